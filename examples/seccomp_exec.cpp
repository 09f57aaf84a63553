// seccomp-exec: runs a program the way Docker's default seccomp profile would (without CAP_SYS_NICE):
// mbind, set_mempolicy, get_mempolicy, migrate_pages, move_pages and set_mempolicy_home_node fail with EPERM.
//   seccomp-exec PROGRAM [ARGS...]
// Used by the cli.sandbox.* tests: every example meant to run anywhere must exit 0 under it. The filter is
// the unit tests' (tests/support/seccomp_filter.hpp), so both sandboxes refuse alike.
#include "seccomp_filter.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_set_mempolicy_home_node
#define SYS_set_mempolicy_home_node 450
#endif

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: seccomp-exec PROGRAM [ARGS...]\n");
        return 2;
    }
    if (!numaplace_test::deny_syscalls_with_eperm({SYS_mbind, SYS_set_mempolicy, SYS_get_mempolicy, SYS_migrate_pages,
                                                   SYS_move_pages, SYS_set_mempolicy_home_node})) {
        std::fprintf(stderr, "seccomp-exec: cannot install the filter: %s\n", std::strerror(errno));
        return 125;
    }
    execvp(argv[1], argv + 1);
    std::fprintf(stderr, "seccomp-exec: %s: %s\n", argv[1], std::strerror(errno));
    return 127;
}
