// seccomp-exec: runs a program the way Docker's default seccomp profile would (without CAP_SYS_NICE):
// mbind, set_mempolicy, get_mempolicy, migrate_pages, move_pages and set_mempolicy_home_node fail with EPERM.
//   seccomp-exec PROGRAM [ARGS...]
// Used by the cli.sandbox.* tests: every example meant to run anywhere must exit 0 under it.
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
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
    const long denied[] = {SYS_mbind,         SYS_set_mempolicy, SYS_get_mempolicy,
                           SYS_migrate_pages, SYS_move_pages,    SYS_set_mempolicy_home_node};
    std::vector<sock_filter> prog;
    prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<unsigned>(offsetof(seccomp_data, nr))));
    for (long nr : denied) {
        prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
        prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)));
    }
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
        std::fprintf(stderr, "seccomp-exec: cannot install the filter: %s\n", std::strerror(errno));
        return 125;
    }
    execvp(argv[1], argv + 1);
    std::fprintf(stderr, "seccomp-exec: %s: %s\n", argv[1], std::strerror(errno));
    return 127;
}
