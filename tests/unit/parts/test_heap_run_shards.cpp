// Run heaps per thread group (detail/heap/node_heap.hpp, issue 33): with two CPUs or more a node heap has
// two run heaps, a thread takes its runs from one (threads in the order of their first run, in turn), and
// a run goes back to the run heap whose region holds it, whichever thread frees it. Two threads that
// free and take page runs of the same size then reuse their own (the lines their own core wrote) instead
// of each other's (docs/heap.md, "The same two misses, third session"). Part of the test_heap binary.
#include <numaplace/allocator.hpp>
#include <numaplace/detail/heap/registry.hpp>
#include <numaplace/detail/routed_mapping.hpp> // the heap's internals (out of the public headers when separately compiled)

#include <gtest/gtest.h>

#include <address_space.hpp>
#include <child.hpp>

#include <atomic>
#include <cstddef>
#include <set>
#include <thread>
#include <vector>

using namespace numaplace;

namespace {
constexpr std::size_t run_bytes = std::size_t(2) << 20; // a large run (1 to 16 MiB): no thread cache holds it

// \returns the block `run_bytes` that a new thread takes after running `before` (in that thread).
// \returns the bytes of page runs handed out by node 0's heaps (every source).
std::size_t node0_runs_in_use() {
    std::size_t n = 0;
    for (std::size_t i = 0; i < detail::heap_sources; ++i)
        n += detail::heap_registry::instance().at(detail::heap_index(0, detail::heap_source::at(i))).run_bytes_in_use();
    return n;
}

template <class F>
char* on_new_thread(F before) {
    char* got = nullptr;
    std::thread t([&] { got = before(); });
    t.join();
    return got;
}
} // namespace

TEST(heap_run_shards, two_cpus_make_two_run_heaps_and_each_thread_reuses_the_runs_it_freed) {
    const std::size_t cpus = detail::heap_registry::instance().cpus();
    for (std::size_t i = 0; i < detail::heap_sources; ++i)
        ASSERT_EQ(detail::heap_registry::instance().at(detail::heap_index(0, detail::heap_source::at(i))).run_shards(),
                  cpus >= 2 ? 2u : 1u) << cpus << " CPUs";
    node_allocator<char> a(0);
    const std::size_t in_use = node0_runs_in_use();
    // Thread A takes a run and frees it; thread B (the next thread to take a run) takes one of the same
    // size, then A again: with two run heaps B gets another run and A its own back; with one, B gets A's.
    char* first = nullptr;
    char* b_got = nullptr;
    char* a_again = nullptr;
    std::thread ta([&] {
        first = a.allocate(run_bytes);
        first[0] = 1;
        a.deallocate(first, run_bytes);
        b_got = on_new_thread([&] {
            char* p = a.allocate(run_bytes);
            p[0] = 2;
            return p;
        });
        a_again = a.allocate(run_bytes);
    });
    ta.join();
    if (cpus >= 2) {
        EXPECT_NE(b_got, first) << "the other thread took the run this one freed";
        EXPECT_EQ(a_again, first) << "the run this thread freed was not its next one";
    } else {
        EXPECT_EQ(b_got, first) << "one run heap: the next thread reuses the freed run";
        EXPECT_NE(a_again, first);
    }
    // A run freed by a thread other than its taker goes back to its taker's run heap.
    char* c = nullptr;
    std::thread tc([&] {
        c = a.allocate(run_bytes);
        c[0] = 3;
    });
    tc.join();
    a.deallocate(c, run_bytes); // freed here, by the main thread
    a.deallocate(b_got, run_bytes);
    a.deallocate(a_again, run_bytes);
    std::set<char*> distinct{b_got, a_again, c};
    EXPECT_EQ(distinct.size(), 3u);
    EXPECT_EQ(node0_runs_in_use(), in_use) << "every run back in its run heap";
}

// Under an address-space limit (`ulimit -v`), a thread whose own run heap can map no region takes a free
// run of the other run heap before mapping one alone: thread A takes and frees an 8 MiB run, the limit is
// set to the address space in use plus 4 MiB (less than a region or the block mapped alone need), and
// thread B, the next to take a run (the other run heap), gets A's run. Before, B's request was refused
// (placement_error) with 8 MiB free in A's run heap. One CPU: one run heap, the same run. A fresh process.
TEST(heap_run_shards, a_thread_that_can_map_no_region_takes_the_other_run_heaps_free_run) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "sanitizers reserve terabytes of shadow address space";
#endif
    const int code = numaplace_test::run_child([] {
        constexpr std::size_t bytes = std::size_t(8) << 20;
        release_cached_memory(); // no region left by earlier tests: each run heap must map its own
        node_allocator<char> a(0);
        char* freed = nullptr;
        std::thread ta([&] {
            freed = a.allocate(bytes);
            freed[0] = freed[bytes - 1] = 1;
            a.deallocate(freed, bytes);
        });
        ta.join();
        std::atomic<int> step{0};
        char* got = nullptr;
        int error = 0;
        std::thread tb([&] { // made, and its first small block and malloc arena taken, before the limit
            char* small = a.allocate(64);
            std::vector<char> arena(100);
            step = 1;
            while (step.load() != 2) std::this_thread::yield();
            try {
                got = a.allocate(bytes);
                got[0] = 2;
            } catch (const placement_error& e) {
                error = e.error_number() != 0 ? e.error_number() : -1;
            }
            a.deallocate(small, 64);
        });
        while (step.load() != 1) std::this_thread::yield();
        if (!numaplace_test::limit_address_space(std::size_t(4) << 20)) return 6;
        step = 2;
        tb.join();
        if (error != 0) return 2;
        if (got != freed) return 3;
        a.deallocate(got, bytes);
        return 0;
    });
    EXPECT_EQ(code, 0) << "2: refused (placement_error); 3: not the other run heap's free run; 6: no limit set";
}
