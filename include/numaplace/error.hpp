#ifndef NUMAPLACE_ERROR_HPP_INCLUDED
#define NUMAPLACE_ERROR_HPP_INCLUDED

/// \file
/// Exception types. Everything numaplace throws is one of these or a standard exception
/// (`std::bad_array_new_length` for size overflow, `std::system_error` for a failed system query).

#include "detail/config.hpp"

#include <cstddef>
#include <iterator> // before <stdexcept>/<string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace numaplace {

/// A node id that is not a node of the topology. Names the id and the valid ids.
class unknown_node : public std::invalid_argument {
public:
    /// \effects names `node` and the valid ids `[0, node_count)` in `what()`.
    unknown_node(int node, std::size_t node_count)
        : std::invalid_argument(message(node, node_count)), node_(node), node_count_(node_count) {}
    /// \returns the offending id.
    int node() const noexcept { return node_; }
    /// \returns the number of nodes; valid ids are `[0, node_count())`.
    std::size_t node_count() const noexcept { return node_count_; }

private:
    NUMAPLACE_DECL static std::string message(int node, std::size_t count);
    int node_;
    std::size_t node_count_;
};

#if NUMAPLACE_DEFINITIONS
NUMAPLACE_DECL std::string unknown_node::message(int node, std::size_t count) {
    std::string valid = count == 0 ? std::string("none") : "0.." + std::to_string(count - 1);
    return "numaplace: unknown NUMA node id " + std::to_string(node) + " (valid ids: " + valid + ")";
}
#endif

/// A placement or partition over no node at all, or an otherwise malformed argument.
class invalid_placement : public std::invalid_argument {
public:
    /// \effects `what()` is "numaplace: " followed by `what`.
    explicit invalid_placement(const std::string& what) : std::invalid_argument("numaplace: " + what) {}
};

/// Memory could not be placed as a strict placement demands: the kernel refused the binding (e.g.
/// `EPERM` under a seccomp filter), the node has not that much memory, or the mapping failed.
/// Derived from `std::bad_alloc`, so code that handles allocation failure handles this too.
/// Copying it never throws and `what()` never allocates: the message lives in a `std::runtime_error`
/// member (a reference-counted, nothrow-copyable string in libstdc++), the details are fields.
class placement_error : public std::bad_alloc {
public:
    /// \effects records the node (-1: several), the request's bytes and the errno; `what()` says all three.
    placement_error(int node, std::size_t bytes, int error_number, const std::string& what)
        : node_(node), bytes_(bytes), errno_(error_number), reason_(what),
          what_("numaplace: " + what + " (node " + (node < 0 ? std::string("any") : std::to_string(node)) +
                ", " + std::to_string(bytes) + " bytes, errno " + std::to_string(error_number) + ")") {}
    // Copy only (moves copy): a moved-from error keeps its message; copies share it and never throw.
    /// \effects copies; never throws (the message is shared).
    placement_error(const placement_error&) noexcept = default;
    /// \effects copies; never throws. \returns `*this`.
    placement_error& operator=(const placement_error&) noexcept = default;
    /// \returns the node id the memory was meant for, or -1 when it concerns several nodes.
    int node() const noexcept { return node_; }
    /// \returns the size of the request in bytes.
    std::size_t bytes() const noexcept { return bytes_; }
    /// \returns the `errno` the kernel gave (`ENOMEM` when numaplace refused it beforehand).
    int error_number() const noexcept { return errno_; }
    /// \returns the message; never allocates.
    const char* what() const noexcept override { return what_.what(); }
    /// \returns the same error for a request of `bytes` (a heap that maps a span or region for a block
    /// says what was asked for, not what it mapped). \throws std::bad_alloc (the message's copy).
    placement_error for_request(std::size_t bytes) const { return placement_error(node_, bytes, errno_, reason_.what()); }

private:
    int node_;
    std::size_t bytes_;
    int errno_;
    std::runtime_error reason_; // `what` as given
    std::runtime_error what_;
};

static_assert(std::is_nothrow_copy_constructible<placement_error>::value &&
                  std::is_nothrow_copy_assignable<placement_error>::value,
              "exceptions must copy without throwing");
static_assert(std::is_nothrow_copy_constructible<unknown_node>::value &&
                  std::is_nothrow_copy_constructible<invalid_placement>::value,
              "exceptions must copy without throwing");

/// What a placement does when the kernel refuses it. Either way, a request larger than the memory the
/// placement may use is refused with ENOMEM (see admission.hpp).
enum class fallback {
    strict, ///< throw `placement_error` (a `std::bad_alloc`), having released everything
    degrade ///< leave the pages to the default policy (first touch) and record it: `degradations()`
};

namespace detail {
// Out of line and cold, so the throwing code does not bloat the callers.
[[noreturn]] NUMAPLACE_COLD inline void throw_unknown_node(int node, std::size_t count) {
    throw unknown_node(node, count);
}
[[noreturn]] NUMAPLACE_COLD inline void throw_invalid(const std::string& what) {
    throw invalid_placement(what);
}
[[noreturn]] NUMAPLACE_COLD inline void throw_placement(int node, std::size_t bytes, int err,
                                                                         const std::string& what) {
    throw placement_error(node, bytes, err, what);
}
[[noreturn]] NUMAPLACE_COLD inline void throw_bad_length() {
    throw std::bad_array_new_length();
}
} // namespace detail

} // namespace numaplace

#endif
