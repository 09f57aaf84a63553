// Test support: the seccomp filter that makes chosen system calls fail with EPERM, as a container's
// seccomp profile does. One builder for the unit tests (seccomp.hpp) and for the seccomp-exec tool the
// sandbox tests run the examples under (examples/seccomp_exec.cpp, built with the tests): no gtest, no
// numaplace, so both can include it; not a numaplace header (not installed, not an API).
#ifndef NUMAPLACE_TESTS_SECCOMP_FILTER_HPP_INCLUDED
#define NUMAPLACE_TESTS_SECCOMP_FILTER_HPP_INCLUDED

#include <cerrno>
#include <cstddef>
#include <vector>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace numaplace_test {

/// Installs the filter on the calling thread (and the threads it creates later, and the programs it
/// execs); with `all_threads`, on every thread of the process at once (SECCOMP_FILTER_FLAG_TSYNC), as
/// a sandbox applied after start-up would. \returns false with errno set if it could not.
inline bool deny_syscalls_with_eperm(const std::vector<long>& numbers, bool all_threads = false);

/// The same, the calls failing with `error` (ENOSYS: as under a profile that does not know them).
inline bool deny_syscalls_with(const std::vector<long>& numbers, int error, bool all_threads = false) {
    std::vector<sock_filter> prog;
    prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<unsigned>(offsetof(seccomp_data, nr))));
    for (long nr : numbers) {
        prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 1));
        prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(error) & SECCOMP_RET_DATA)));
    }
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    if (all_threads) return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fprog) == 0;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}
inline bool deny_syscalls_with_eperm(const std::vector<long>& numbers, bool all_threads) {
    return deny_syscalls_with(numbers, EPERM, all_threads);
}

/// Installs a filter on the calling thread under which system call `nr` fails with `error` whenever the
/// low 32 bits of its argument `arg` (0-based) have any bit of `bits` set. Everything else is allowed.
/// \returns false with errno set if it could not.
inline bool refuse_syscall_arg_bits(long nr, unsigned arg, unsigned bits, int error) {
    const unsigned arg_low = static_cast<unsigned>(offsetof(seccomp_data, args) + arg * sizeof(__u64)); // little endian
    std::vector<sock_filter> prog{
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<unsigned>(offsetof(seccomp_data, nr))),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_low),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, bits, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(error) & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}

/// Installs a filter on the calling thread under which `mbind` fails with EINVAL whenever its mode
/// argument has any bit of `mode_flags` set, as on a kernel that does not know those mode flags (e.g.
/// MPOL_F_NUMA_BALANCING, 1 << 13, before Linux 5.12). Everything else is allowed. \returns false with
/// errno set if it could not.
inline bool refuse_mbind_mode_flags_with_einval(unsigned mode_flags) {
    return refuse_syscall_arg_bits(SYS_mbind, 2, mode_flags, EINVAL);
}

/// Installs a filter on the calling thread under which `mmap` fails with `error` whenever its flags
/// argument has any bit of `flags` set (e.g. MAP_HUGETLB: a sandbox that forbids huge pages, applied
/// after start-up). Everything else is allowed. \returns false with errno set if it could not.
inline bool refuse_mmap_flags_with(unsigned flags, int error) { return refuse_syscall_arg_bits(SYS_mmap, 3, flags, error); }

} // namespace numaplace_test

#endif
