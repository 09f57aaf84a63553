#ifndef NUMAPLACE_TEST_SUPPORT_TIME_SCALE_HPP_INCLUDED
#define NUMAPLACE_TEST_SUPPORT_TIME_SCALE_HPP_INCLUDED

// The one factor of every wall-clock bound in the tests (watchdogs, alarms, waits with a deadline):
// NUMAPLACE_TIME_SCALE, a whole number from 1 (ctest sets it from the CMake variable of the same name,
// and numa-guest hands it to its guest: docs/testing.md, "Slow machines"). A bound is a hang detector,
// never a timing: a slow or loaded machine raises the factor, it never fails a test.

#include <chrono>
#include <climits>
#include <cstdlib>

namespace numaplace_test {

/// \returns NUMAPLACE_TIME_SCALE: a whole number from 1 to 1000 (digits only, no sign, space or leading
/// zero: what CMake and numa-guest accept); 1 when unset or not such a number. Never 0: alarm(0) would
/// cancel a watchdog.
inline int time_scale() noexcept {
    const char* v = std::getenv("NUMAPLACE_TIME_SCALE");
    if (!v || *v < '1' || *v > '9') return 1;
    char* end = nullptr;
    const long f = std::strtol(v, &end, 10);
    return *end == '\0' && f >= 1 && f <= 1000 ? static_cast<int>(f) : 1;
}

/// \returns `seconds` times the factor (INT_MAX at most).
inline int scaled_seconds(int seconds) noexcept {
    const long long s = static_cast<long long>(seconds) * time_scale();
    return s > INT_MAX ? INT_MAX : static_cast<int>(s);
}

/// \returns `d` times the factor.
template <class Rep, class Period>
std::chrono::duration<Rep, Period> scaled(std::chrono::duration<Rep, Period> d) noexcept {
    return d * time_scale();
}

} // namespace numaplace_test

#endif
