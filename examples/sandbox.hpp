// Shared by the examples meant to run anywhere, containers included: Docker's default seccomp profile
// denies mbind/set_mempolicy (without CAP_SYS_NICE) and move_pages, so strict placements throw
// placement_error and where() throws std::system_error, both with EPERM. Such a refusal is the
// sandbox's, not a failure of the program: it is reported in one line and the example exits 0.
#ifndef NUMAPLACE_EXAMPLES_SANDBOX_HPP_INCLUDED
#define NUMAPLACE_EXAMPLES_SANDBOX_HPP_INCLUDED

#include <numaplace/error.hpp>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>

namespace numaplace_examples {

/// \effects prints why `program` stopped (stdout is flushed first, so nothing printed is lost).
/// \returns 0 when the kernel refused NUMA placement or page queries with EPERM (a sandbox), else 1.
inline int report(const char* program, const std::exception& e) {
    std::fflush(stdout);
    int err = 0;
    if (const auto* p = dynamic_cast<const numaplace::placement_error*>(&e)) err = p->error_number();
    if (const auto* s = dynamic_cast<const std::system_error*>(&e)) err = s->code().value();
    if (err == EPERM) {
        std::printf("%s: NUMA placement refused by the sandbox (EPERM: mbind/set_mempolicy/move_pages denied, as "
                    "under Docker's default seccomp profile); run with --cap-add SYS_NICE and a seccomp profile "
                    "allowing move_pages to see placement. (%s)\n", program, e.what());
        std::fflush(stdout);
        return 0;
    }
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
}

} // namespace numaplace_examples

#endif
