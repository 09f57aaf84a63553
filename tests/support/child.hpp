#ifndef NUMAPLACE_TEST_SUPPORT_CHILD_HPP_INCLUDED
#define NUMAPLACE_TEST_SUPPORT_CHILD_HPP_INCLUDED

// Children that may die or hang, for the tests: their exit status is asserted, never a timing.

#include <gtest/gtest.h>

#include "time_scale.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace numaplace_test {

/// Waits for the child `pid`. \returns its exit code, 128 + signal, or 255 when it did not end within
/// `seconds` times NUMAPLACE_TIME_SCALE (time_scale.hpp): then its stacks go to stderr (when gdb is there
/// to print them: a hang is a bug to find) and it is killed.
inline int wait_child(pid_t pid, int seconds) {
    if (pid < 0) return -1;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(scaled_seconds(seconds));
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            const std::string gdb = "command -v gdb >/dev/null && gdb -p " + std::to_string(pid) +
                                    " -batch -ex 'thread apply all bt' </dev/null 2>&1 | grep -v '^\\[' >&2";
            std::fprintf(stderr, "child %d hung: not ended within %d s (%d s x NUMAPLACE_TIME_SCALE %d)\n", static_cast<int>(pid),
                         scaled_seconds(seconds), seconds, time_scale());
            if (std::system(gdb.c_str()) != 0) std::fprintf(stderr, "(no stacks of the hung child %d)\n", static_cast<int>(pid));
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return 255;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs `child()` in a forked process. \returns its exit code (98: it threw), 128 + signal, or 255 when
/// it did not end within `seconds` times the factor (see wait_child).
template <class F>
int run_child(F&& child, int seconds = 60) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        int code = 99;
        try {
            code = child();
        } catch (...) {
            code = 98;
        }
        ::_exit(code);
    }
    return wait_child(pid, seconds);
}

/// Runs the current test again in a fresh process of this binary (only that test), with the variable
/// `marker` set to 1 (the copy's sign that it is the fresh one) and `env` set. \returns its exit code
/// (see run_child; 97: the exec failed).
inline int rerun_current_test(const char* marker, const std::vector<std::pair<std::string, std::string>>& env = {},
                              int seconds = 120) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string filter = std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
    return run_child(
        [&] {
            ::setenv(marker, "1", 1);
            for (const auto& e : env) ::setenv(e.first.c_str(), e.second.c_str(), 1);
            ::execl("/proc/self/exe", "test", filter.c_str(), static_cast<char*>(nullptr));
            return 97;
        },
        seconds);
}

} // namespace numaplace_test

#endif
