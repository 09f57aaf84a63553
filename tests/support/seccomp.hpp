// Test support: run a function in a forked child whose memory-policy system calls (mbind,
// set_mempolicy, migrate_pages, move_pages as asked) fail with EPERM, as under a container's seccomp
// profile. Returns the child's exit status (or 128 + signal).
#ifndef NUMAPLACE_TESTS_SECCOMP_HPP_INCLUDED
#define NUMAPLACE_TESTS_SECCOMP_HPP_INCLUDED

#include <cerrno>
#include <cstddef>
#include <functional>
#include <vector>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace numaplace_test {

/// Installs the filter on the calling thread (and the threads it creates later); with `all_threads`,
/// on every thread of the process at once (SECCOMP_FILTER_FLAG_TSYNC), as a sandbox applied after
/// start-up would.
inline bool deny_syscalls_with_eperm(const std::vector<long>& numbers, bool all_threads = false) {
    std::vector<sock_filter> prog;
    prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<unsigned>(offsetof(seccomp_data, nr))));
    for (long nr : numbers) {
        prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
        prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)));
    }
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    if (all_threads) return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) == 0;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}

/// The system call behind every thread pinning (hwloc_set_cpubind, tbbbind, taskset).
inline const std::vector<long>& cpu_binding_syscalls() {
    static const std::vector<long> nrs{SYS_sched_setaffinity};
    return nrs;
}

inline const std::vector<long>& memory_policy_syscalls() {
    static const std::vector<long> nrs{SYS_mbind, SYS_set_mempolicy};
    return nrs;
}

/// Runs `child` (returning an exit code) in a forked process under the filter.
inline int run_denied(const std::vector<long>& numbers, const std::function<int()>& child) {
    pid_t pid = fork();
    if (pid == 0) {
        if (!deny_syscalls_with_eperm(numbers)) _exit(90);
        int code = 91;
        try {
            code = child();
        } catch (...) {
            code = 92;
        }
        _exit(code);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace numaplace_test

#endif
