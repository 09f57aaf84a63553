#ifndef NUMAPLACE_DETAIL_WIDE_MATH_HPP_INCLUDED
#define NUMAPLACE_DETAIL_WIDE_MATH_HPP_INCLUDED

// Exact a * b / c for the partition's shares (a size_t count times a weight prefix over a weight sum, the
// prefix and sum up to nodes x 2^64): floor, ceil and the remainder, without overflow.

#include "config.hpp"

#include <cstddef>

namespace numaplace {
namespace detail {

/// \returns floor(a * b / c) for b <= c, c != 0, c < 2^127, exactly (a * b may exceed 128 bits);
/// `rem` set to a * b mod c.
inline std::size_t mul_div(std::size_t a, wide_uint b, wide_uint c, wide_uint& rem) noexcept {
    if ((c >> 64) == 0) {
        const wide_uint ab = static_cast<wide_uint>(a) * b; // b <= c < 2^64: fits
        rem = ab % c;
        return static_cast<std::size_t>(ab / c);
    }
    // Shift-and-add over the bits of a, keeping q = floor(a' * b / c) and r = a' * b mod c (< c).
    wide_uint q = 0, r = 0;
    for (int bit = 63; bit >= 0; --bit) {
        q <<= 1;
        r <<= 1; // < 2c < 2^128
        if (r >= c) { r -= c; q += 1; }
        if ((a >> bit) & 1u) {
            r += b; // < 2c
            if (r >= c) { r -= c; q += 1; }
        }
    }
    rem = r;
    return static_cast<std::size_t>(q);
}
/// \returns floor(a * b / c) (see above).
inline std::size_t mul_div(std::size_t a, wide_uint b, wide_uint c) noexcept {
    wide_uint rem = 0;
    return mul_div(a, b, c, rem);
}
/// \returns ceil(a * b / c) for b <= c, c != 0, c < 2^127 (at most a).
inline std::size_t mul_div_up(std::size_t a, wide_uint b, wide_uint c) noexcept {
    wide_uint rem = 0;
    const std::size_t q = mul_div(a, b, c, rem);
    return q + (rem != 0 ? 1 : 0); // q < a when inexact: no overflow
}

} // namespace detail
} // namespace numaplace

#endif
