// Test support: run a function in a forked child whose memory-policy system calls (mbind,
// set_mempolicy, migrate_pages, move_pages as asked) fail with EPERM, as under a container's seccomp
// profile. Returns the child's exit status (or 128 + signal). The filter itself: seccomp_filter.hpp.
#ifndef NUMAPLACE_TESTS_SECCOMP_HPP_INCLUDED
#define NUMAPLACE_TESTS_SECCOMP_HPP_INCLUDED

#include "seccomp_filter.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace numaplace_test {

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

/// For a test that must run in a process started under the filter (so that what a process does once,
/// topology's capability probe above all, runs under it too, as in a container), written
/// `if (numaplace_test::rerun_started_under_seccomp()) return;` at its top. In the test binary: re-runs
/// this very test (gtest filter) in a child that installs the filter and execs the binary again, expects
/// it to exit 0 (its gtest output shows above), and \returns true. In that child (marked by
/// NUMAPLACE_TEST_UNDER_SECCOMP): \returns false, and the test body runs under the filter.
inline bool rerun_started_under_seccomp(const std::vector<long>& numbers = memory_policy_syscalls()) {
    if (std::getenv("NUMAPLACE_TEST_UNDER_SECCOMP") != nullptr) return false;
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string filter = std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
    const int code = run_denied(numbers, [&filter] {
        setenv("NUMAPLACE_TEST_UNDER_SECCOMP", "1", 1);
        char self[] = "/proc/self/exe";
        char* argv[] = {self, filter.data(), nullptr};
        execv(self, argv);
        return 93; // exec failed
    });
    EXPECT_EQ(code, 0) << "the test failed in the sandboxed child (see its output above)";
    return true;
}

} // namespace numaplace_test

#endif
