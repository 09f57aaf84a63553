// The shard count the heaps choose (issue 33, "speed first"): one shard while the threads with a heap
// cache are no more than the CPUs the process may use; a shard a cache, up to 16, while they outnumber
// them; back to one when they no longer do, without moving a block. Part of the test_heap binary
// (tests/CMakeLists.txt: no guest boot of its own). Each case runs in a fresh process (this binary
// executed again for it alone) pinned to one CPU before its heaps are made, so the count is exact.
#include <numaplace/allocator.hpp>
#include <numaplace/detail/routed_mapping.hpp> // the heap's internals (out of the public headers when separately compiled)

#include <gtest/gtest.h>

#include <child.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

using namespace numaplace;

namespace {

constexpr const char* fresh = "NUMAPLACE_TEST_FRESH_PROCESS";

// Runs `body` in a fresh process of this binary without NUMAPLACE_HEAP_SHARDS, its main thread (and so
// every thread it makes) pinned to its first allowed CPU. \returns the body's code (0: passed).
int in_fresh_process_on_one_cpu(const std::function<int()>& body) {
    if (std::getenv(fresh)) {
        cpu_set_t mine, one;
        if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return 90;
        CPU_ZERO(&one);
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &mine)) {
                CPU_SET(c, &one);
                break;
            }
        if (::sched_setaffinity(0, sizeof one, &one) != 0) return 91;
        return body();
    }
    const char* forced = std::getenv("NUMAPLACE_HEAP_SHARDS");
    const std::string saved = forced ? forced : "";
    ::unsetenv("NUMAPLACE_HEAP_SHARDS");
    const int code = numaplace_test::rerun_current_test(fresh, {}, 120);
    if (forced) ::setenv("NUMAPLACE_HEAP_SHARDS", saved.c_str(), 1);
    return code;
}

constexpr std::size_t size = 16; // a span class
std::size_t span_shard(void* p) { return detail::heap_span_of(p, detail::heap_class_of(size))->shard; }

// A thread that allocates one block when made (its cache and shard made then), then on request
// allocates `n` more and reports the shard of the last one's span; ends when told.
class worker {
public:
    worker() : t_([this] { run(); }) {
        while (!made_.load()) std::this_thread::yield();
    }
    ~worker() { stop(); }
    std::size_t cache_shard() const { return cache_shard_; }
    std::size_t first_block_shard() const { return first_shard_; }
    // \returns the span shard of the last of `n` blocks allocated now (all kept until the thread ends).
    std::size_t allocate(std::size_t n) {
        want_ = n;
        while (want_.load() != 0) std::this_thread::yield();
        return last_shard_;
    }
    void stop() {
        if (!t_.joinable()) return;
        quit_ = true;
        t_.join();
    }

private:
    void run() {
        node_allocator<char> a(0);
        std::vector<char*> kept{a.allocate(size)};
        first_shard_ = span_shard(kept.back());
        cache_shard_ = detail::thread_cache::get()->shard();
        made_ = true;
        while (!quit_.load()) {
            if (const std::size_t n = want_.load()) {
                for (std::size_t i = 0; i < n; ++i) kept.push_back(a.allocate(size));
                last_shard_ = span_shard(kept.back());
                want_ = 0;
            }
            std::this_thread::yield();
        }
        for (char* p : kept) a.deallocate(p, size);
    }
    std::atomic<bool> made_{false}, quit_{false};
    std::atomic<std::size_t> want_{0};
    std::size_t cache_shard_ = 99, first_shard_ = 99, last_shard_ = 99;
    std::thread t_;
};

} // namespace

TEST(heap_chosen_shards, one_shard_while_caches_fit_the_cpus_a_shard_a_cache_beyond_and_back_to_one) {
    const int code = in_fresh_process_on_one_cpu([] {
        heap_sharding_report r = heap_sharding();
        if (!r.chosen || r.limit != 16 || r.cpus != 1 || r.thread_caches != 0 || r.shards != 1) return 1;
        // the main thread makes no cache here: the workers' are the only ones
        worker a; // 1 cache on 1 CPU: shard 0
        if (a.cache_shard() != 0 || a.first_block_shard() != 0 || heap_shards() != 1) return 2;
        auto b = std::make_unique<worker>(); // 2 caches on 1 CPU: 2 shards, b takes the unused one
        if (b->cache_shard() != 1 || b->first_block_shard() != 1) return 3;
        r = heap_sharding();
        if (r.shards != 2 || r.thread_caches != 2 || r.reason.find("oversubscribed") == std::string::npos) return 4;
        auto c = std::make_unique<worker>(); // 3 caches: shard 2
        if (c->cache_shard() != 2 || c->first_block_shard() != 2 || heap_shards() != 3) return 5;
        const std::size_t batch = detail::heap_table.info[detail::heap_class_of(size)].cache_max;
        // while oversubscribed every thread keeps its own shard through its refills
        if (a.allocate(2 * batch) != 0 || b->allocate(2 * batch) != 1 || c->allocate(2 * batch) != 2) return 6;
        // and the heaps say so to the span heaps and refills (the shared store of empty spans, half batches)
        if (!detail::heap_sharded_now().load()) return 10;
        // a and c end: 1 cache on 1 CPU, one shard in force; b's next refill comes from shard 0, its
        // earlier blocks stay in shard 1's spans (b frees them at its end, into their own shard)
        a.stop();
        c.reset();
        r = heap_sharding();
        if (r.shards != 1 || r.thread_caches != 1 || r.reason.find("one shard") == std::string::npos) return 7;
        if (b->allocate(2 * batch) != 0) return 8;
        if (detail::heap_sharded_now().load()) return 11; // back, where heap_sharded() stays set
        if (!detail::heap_sharded().load()) return 12;
        // a new thread while b lives: 2 caches again, the least used shard in force (1: b is on 0 now)
        worker d;
        if (d.cache_shard() != 1) return 9;
        return 0;
    });
    EXPECT_EQ(code, 0) << "1: the report before any cache, 2: one cache not on shard 0, 3/5: a cache beyond the CPUs "
                          "not on a shard of its own, 4: the report while oversubscribed, 6: a refill left its shard, "
                          "7: not back to one shard, 8: the refill after not from shard 0, 9: the new thread's shard, "
                          "10: not sharded now while oversubscribed, 11: still sharded now after, 12: the sticky flag cleared";
}

TEST(heap_chosen_shards, a_forced_count_is_kept_whatever_the_threads) {
    const auto body = [] {
        const heap_sharding_report r = heap_sharding();
        if (r.chosen || r.limit != 1 || r.shards != 1 || r.reason != "NUMAPLACE_HEAP_SHARDS=1") return 1;
        worker a, b, c; // 3 caches on 1 CPU: still shard 0 for every one
        if (a.cache_shard() != 0 || b.cache_shard() != 0 || c.cache_shard() != 0) return 2;
        if (b.allocate(600) != 0 || c.first_block_shard() != 0 || heap_shards() != 1) return 3;
        return 0;
    };
    int code;
    if (std::getenv(fresh)) {
        code = in_fresh_process_on_one_cpu(body);
    } else {
        code = numaplace_test::rerun_current_test(fresh, {{"NUMAPLACE_HEAP_SHARDS", "1"}}, 120);
    }
    EXPECT_EQ(code, 0) << "1: the report, 2: a cache off shard 0, 3: a refill off shard 0";
}
