// Fork attacks, across every component (tests/stress: what they attack is the process, not one header).
// Fork while other threads hold numaplace's process-wide locks (interning registries, the placed-buffer
// record, the degradation log): the child's only thread must still build partitions and placements,
// allocate partitioned memory and record degradations without deadlocking (detail/fork.hpp).
// A child that deadlocks is killed by its alarm and fails the test.

#include <numaplace/admission.hpp>
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/topology.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <time_scale.hpp>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace np = numaplace;

namespace {

// What a forked child does: everything that takes a registry lock. \returns the exit code (0: all exact).
int child_work(std::size_t salt) {
    alarm(static_cast<unsigned>(numaplace_test::scaled_seconds(10))); // a deadlock ends in SIGALRM, seen by the parent
    const np::node_set nodes = np::topology::get().with_cpus();
    std::vector<std::size_t> w(nodes.size(), 1000003 + salt); // a weight no one interned yet: an insert
    np::partition<double> p(4096, nodes, w);
    if (p.size() != 4096 || p.blocks().back().end != 4096) return 2;
    np::interleaved il(nodes, std::vector<std::size_t>(nodes.size(), 7));
    if (il.nodes() != nodes) return 3;
    {
        std::vector<double, np::partitioned_allocator<double>> v(100000, 1.5, np::partitioned_allocator<double>(p));
        if (v[99999] != 1.5) return 4;
    }
    np::detail::degradation_log::instance().record("attack-fork child");
    if (np::degradations().empty()) return 5;
    return 0;
}

} // namespace

// Fork while another thread makes numaplace's process-wide objects for the first time (the topology, the
// heaps, the node pools, the interning registries, the placed-buffer record, the capacity accounting, the
// degradation log). A C++ initialisation guard held by a thread that does not exist in the child would
// hang the child at its first use of that object; every such object is completed (or made without a
// guard) by a fork handler. One try needs a fresh process: the test binary is executed again with
// NUMAPLACE_FIRST_USE_DELAY_US set, and runs the try below during its static initialisation.
namespace {
int use_every_global() {
    const np::node_set nodes = np::topology::get().with_cpus();
    const np::partition<double> p(4096, nodes, std::vector<std::size_t>(nodes.size(), 3));
    const np::interleaved il(nodes, std::vector<std::size_t>(nodes.size(), 5));
    std::vector<double, np::partitioned_allocator<double>> v(50000, 1.0, np::partitioned_allocator<double>(p));
    np::node_allocator<char> a(nodes[0]);
    char* small = a.allocate(100);
    char* mid = a.allocate(100000);
    small[0] = mid[99999] = 1;
    a.deallocate(small, 100);
    a.deallocate(mid, 100000);
    void* q = np::node_pool(nodes[0]).allocate(5000, 64);
    np::node_pool(nodes[0]).deallocate(q, 5000, 64);
    np::detail::degradation_log::instance().record("attack-fork first use");
    return v[49999] == 1.0 && il.nodes() == nodes && p.size() == 4096 ? 0 : 7;
}

// One try: a second thread makes every global while this thread forks after `delay_us`. \returns 0 when
// the child (which uses every global too) exits 0 within 20 s; otherwise its code, 128 + signal, or 255
// (hung: killed after its stacks are printed).
int first_use_try(long delay_us) {
    std::thread maker([] { (void)use_every_global(); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us);
    while (std::chrono::steady_clock::now() < until) {
    }
    const pid_t pid = fork();
    if (pid == 0) _exit(use_every_global());
    maker.join();
    return numaplace_test::wait_child(pid, 20);
}

// In a process executed by the test below, the try runs here (static initialisation of this file, after
// the numaplace headers' own handlers above it are registered) and the process ends with its result.
const bool first_use_try_ran = [] {
    const char* delay = std::getenv("NUMAPLACE_FIRST_USE_DELAY_US");
    if (delay) _exit(first_use_try(std::atol(delay)));
    return false;
}();
} // namespace

TEST(fork_attack, fork_while_another_thread_makes_the_globals_for_the_first_time) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(_GLIBCXX_DEBUG)
    // The thread making the globals calls malloc and builds containers: not fork-safe under GCC 12's
    // sanitizer allocators nor libstdc++'s debug mode (see
    // fork_attack.child_of_busy_process_does_not_deadlock_on_registries).
    GTEST_SKIP() << "the runtime's allocator or debug-mode containers are not fork-safe here";
#endif
    ASSERT_FALSE(first_use_try_ran);
    // Delays from 0 to 6 ms: before, inside and after the topology's loading (about 2-5 ms here).
    int failures = 0;
    for (long delay = 0; delay <= 6000; delay += 150) {
        const pid_t pid = fork();
        ASSERT_NE(pid, -1);
        if (pid == 0) {
            const std::string value = std::to_string(delay);
            ::setenv("NUMAPLACE_FIRST_USE_DELAY_US", value.c_str(), 1);
            ::execl("/proc/self/exe", "test_fork", "--gtest_list_tests", static_cast<char*>(nullptr));
            _exit(253);
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0) ++failures;
        EXPECT_EQ(code, 0) << "delay " << delay << " us (255: the child hung)";
    }
    EXPECT_EQ(failures, 0);
}

// A fork before any use of numaplace makes nothing: fork hooks take locks only, so a program that links
// numaplace and forks (a shell-out, a daemon) loads no hwloc topology and probes no capability inside
// fork(), and a child that changes its sandbox probes its own capabilities later. Run in a fresh process
// (static initialisation, before main), where nothing has used numaplace yet.
namespace {
const bool fork_before_use_ran = [] {
    if (!std::getenv("NUMAPLACE_FORK_BEFORE_USE")) return false;
    auto made = [] {
        return np::topology::system_cell().peek() != nullptr || np::detail::degradation_log::cell().peek() != nullptr ||
               np::detail::capacity::cell().peek() != nullptr || np::detail::placed_buffers::cell().peek() != nullptr ||
               np::detail::node_pools_cell().peek() != nullptr;
    };
    if (made()) _exit(3); // something was made before main: the check below would prove nothing
    const pid_t pid = fork();
    if (pid == 0) _exit(made() ? 4 : 0);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) _exit(5);
    if (WEXITSTATUS(status) != 0) _exit(WEXITSTATUS(status));
    _exit(made() ? 6 : 0);
}();
} // namespace

TEST(fork_attack, a_fork_before_any_use_makes_nothing) {
    ASSERT_FALSE(fork_before_use_ran);
    const pid_t pid = fork();
    ASSERT_NE(pid, -1);
    if (pid == 0) {
        ::setenv("NUMAPLACE_FORK_BEFORE_USE", "1", 1);
        ::execl("/proc/self/exe", "test_fork", "--gtest_list_tests", static_cast<char*>(nullptr));
        _exit(253);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: made before main; 4: made in the child; 6: made in the parent by fork";
}

TEST(fork_attack, child_of_busy_process_does_not_deadlock_on_registries) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // The busy threads below call malloc all the time (interning inserts into a std::set under the
    // registry's lock; the log records strings). The sanitizer runtimes of Debian 12's GCC 12 have no fork
    // handlers for their allocators (ASan got them in LLVM 18, llvm-project PR 75290; TSan in PR 96600):
    // a child forked while a busy thread is inside the runtime's malloc waits on the runtime's lock at its
    // first operator new (gdb: __sanitizer::SizeClassAllocator64::GetFromAllocator), before any numaplace
    // code. The release build runs this test; heap.fork_under_load runs under the sanitizers with workers
    // that no longer call malloc.
    GTEST_SKIP() << "GCC 12's sanitizer allocators are not fork-safe with a second thread calling malloc";
#endif
#ifdef _GLIBCXX_DEBUG
    // The same for libstdc++'s debug mode: its process-wide mutex pool (safe iterators) has no fork handlers.
    GTEST_SKIP() << "libstdc++ debug mode is not fork-safe with a second thread using containers";
#endif
    // Function-local statics (the topology, each registry) must be initialised before forking: a child
    // forked while another thread is inside a static initialiser waits for it forever (C++ guard).
    ASSERT_EQ(child_work(1u << 20), 0);
    alarm(0);
    std::atomic<bool> stop{false};
    std::vector<std::thread> busy;
    // interning: every iteration inserts a new layout (weights never seen before)
    busy.emplace_back([&] {
        const np::node_set nodes = np::topology::get().with_cpus();
        for (std::size_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
            np::partition<float> p(1000, nodes, std::vector<std::size_t>(nodes.size(), i));
            (void)p;
        }
    });
    // the placed-buffer record: partitioned mappings come and go
    busy.emplace_back([&] {
        const np::partition<double> p(1 << 14);
        while (!stop.load(std::memory_order_relaxed)) {
            std::vector<double, np::partitioned_allocator<double>> v(1 << 14, np::partitioned_allocator<double>(p));
            (void)v;
        }
    });
    // the degradation log
    busy.emplace_back([&] {
        while (!stop.load(std::memory_order_relaxed)) np::detail::degradation_log::instance().record("attack-fork busy");
    });

    int failures = 0, forks = 0;
    for (int i = 0; i < 40; ++i) {
        const pid_t pid = fork();
        ASSERT_NE(pid, -1);
        if (pid == 0) _exit(child_work(static_cast<std::size_t>(i)));
        ++forks;
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ++failures;
            if (WIFSIGNALED(status)) ADD_FAILURE() << "child " << i << " killed by signal " << WTERMSIG(status);
            else ADD_FAILURE() << "child " << i << " exited " << WEXITSTATUS(status);
            if (failures > 2) break;
        }
    }
    stop = true;
    for (auto& t : busy) t.join();
    EXPECT_EQ(forks, 40);
    EXPECT_EQ(failures, 0);
}

TEST(fork_attack, child_after_one_tbb_started_uses_non_tbb_calls) {
#ifdef _GLIBCXX_DEBUG
    // libstdc++'s debug mode guards every container with a process-wide mutex pool that has no fork
    // handlers: the parent's thread building std::vectors holds one at fork about a third of the time and
    // the child then hangs in std::vector's constructor (gdb: _Safe_sequence_base::_M_swap), before any
    // numaplace code. The release, ASan and TSan builds run this test.
    GTEST_SKIP() << "libstdc++ debug mode is not fork-safe with a second thread using containers";
#endif
    // oneTBB is started (its workers exist) and a thread keeps using the small-object heap; a forked
    // child must not use oneTBB, but allocators, where and partitions must work there.
    np::parallel_for(np::partition<int>(100000), [](np::subrange) {});
    ASSERT_EQ(child_work(2u << 20), 0);
    alarm(0);
    std::atomic<bool> stop{false}, steady{false};
    std::thread small([&] {
        np::node_allocator<int> a(np::topology::get().with_cpus()[0]);
        for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
            if (i == 1000) steady = true;
            std::vector<int, np::node_allocator<int>> v(7, 1, a);
            (void)v;
        }
    });
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // Under GCC 12's sanitizers fork only once the thread is past its start-up (its thread cache made with
    // malloc): the runtimes' allocators are not fork-safe (see
    // fork_attack.child_of_busy_process_does_not_deadlock_on_registries).
    while (!steady) std::this_thread::sleep_for(std::chrono::milliseconds(1));
#endif
    int failures = 0;
    for (int i = 0; i < 20 && failures == 0; ++i) {
        const pid_t pid = fork();
        ASSERT_NE(pid, -1);
        if (pid == 0) {
            alarm(static_cast<unsigned>(numaplace_test::scaled_seconds(10)));
            std::vector<int, np::node_allocator<int>> v(7, 3, np::node_allocator<int>(np::topology::get().with_cpus()[0]));
            const np::page_histogram h = np::where(v.data(), v.size() * sizeof(int));
            _exit(v[6] == 3 && h.pages == 1 ? child_work(static_cast<std::size_t>(3000 + i)) : 9);
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ++failures;
            ADD_FAILURE() << "child " << i << (WIFSIGNALED(status) ? " killed by signal " : " exited ")
                          << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        }
    }
    stop = true;
    small.join();
    EXPECT_EQ(failures, 0);
}

// The children's alarms and watchdogs (time_scale.hpp) are their bound times NUMAPLACE_TIME_SCALE, a whole
// number from 1 to 1000 as CMake and numa-guest accept it; any other value is 1, never 0 (alarm(0) cancels
// the alarm: a deadlocked child would hang the test instead of ending in SIGALRM). In a child: setenv.
TEST(fork_attack, the_childrens_alarms_scale_by_a_whole_factor_and_never_vanish) {
    const int code = numaplace_test::run_child([] {
        const std::pair<const char*, int> cases[] = {{"", 1},   {"0", 1},    {"1", 1},  {"3", 3},   {"1000", 1000}, {"1001", 1},
                                                     {"-3", 1}, {"+3", 1},   {" 3", 1}, {"3 ", 1},  {"03", 1},      {"3x", 1},
                                                     {"abc", 1}, {"99999999999999999999", 1}};
        int k = 1;
        for (const auto& c : cases) {
            setenv("NUMAPLACE_TIME_SCALE", c.first, 1);
            if (numaplace_test::time_scale() != c.second || numaplace_test::scaled_seconds(10) != 10 * c.second ||
                numaplace_test::scaled(std::chrono::milliseconds(7)) != std::chrono::milliseconds(7 * c.second)) {
                std::fprintf(stderr, "NUMAPLACE_TIME_SCALE=\"%s\": %d, expected %d\n", c.first, numaplace_test::time_scale(), c.second);
                return k;
            }
            ++k;
        }
        setenv("NUMAPLACE_TIME_SCALE", "1000", 1);
        if (numaplace_test::scaled_seconds(INT_MAX / 10) != INT_MAX) return 50; // clamped, not wrapped
        unsetenv("NUMAPLACE_TIME_SCALE");
        return numaplace_test::time_scale() == 1 ? 0 : 51;
    });
    EXPECT_EQ(code, 0) << "the case that failed (1-based), 50: overflow, 51: unset";
}
