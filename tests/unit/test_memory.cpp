// memory.hpp (map, bind, touch, unmap: the mechanism, every function 0 or an errno) and admission.hpp (the
// capacity contract: a request is admitted only if the memory its policy may use can hold it, strict or
// degrading, for every face: allocators, pmr resources, the pooled heap). Expectations are computed from
// topology::get(), so they hold on any number of nodes; the memonly guest fills its memory-only node.
#include <numaplace/admission.hpp>
#include <numaplace/memory.hpp>

#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <expect.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sys/resource.h>

using namespace numaplace;
using numaplace_test::contains;
using numaplace_test::expect_enomem;
using numaplace_test::expect_unknown_node;
using numaplace_test::run_child;
using numaplace_test::virtual_size;

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;

int node_count() { return static_cast<int>(topology::get().size()); }
} // namespace

// --- memory.hpp ---------------------------------------------------------------------------------------

TEST(memory, map_bind_touch_unmap_puts_every_page_on_the_node) {
    const std::size_t page = detail::page_size(), pages = 16;
    const auto& topo = topology::get();
    const bool query = topo.capabilities().page_query;
    for (const auto& node : topo.nodes()) {
        void* p = memory::map(pages * page);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % page, 0u);
        if (query) EXPECT_EQ(where(p, pages * page).untouched, pages) << "map touches nothing";
        const int err = memory::bind(p, pages * page, memory::policy_mode::bind, node_set{node.id});
        if (topo.capabilities().memory_binding) EXPECT_EQ(err, 0) << "node " << node.id;
        memory::touch(p, pages * page);
        if (query) {
            const page_histogram h = where(p, pages * page);
            EXPECT_EQ(h.untouched, 0u) << "touch faults in every page";
            if (err == 0) EXPECT_EQ(h.on(node.id), pages) << "node " << node.id;
        }
        memory::unmap(p, pages * page);
    }
    // sizes whose page rounding overflows are refused before anything is mapped
    void* out = nullptr;
    EXPECT_EQ(memory::try_map(SIZE_MAX, page, out), ENOMEM);
    EXPECT_EQ(memory::try_map(SIZE_MAX - page + 2, page, out), ENOMEM);
}

TEST(memory, bind_rejects_unknown_ids) {
    const int n = node_count();
    const std::size_t page = numaplace::detail::page_size();
    void* p = numaplace::memory::map(page);
    expect_unknown_node([&] { numaplace::memory::bind(p, page, numaplace::memory::policy_mode::bind, node_set{n}); },
                        n, "memory::bind({N})");
    numaplace::memory::unmap(p, page);
}

// --- admission.hpp: the capacity contract -------------------------------------------------------------

TEST(admission, admit_refuses_more_than_the_policy_may_use) {
    const auto& topo = topology::get();
    const std::size_t page = detail::page_size();
    // preferred placements may spill anywhere: a page fits, more than every node has does not
    EXPECT_EQ(memory::admit(page, memory::policy_mode::preferred, topo.all()), 0);
    std::size_t total = 0;
    int tested = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) continue; // size unknown
        total += static_cast<std::size_t>(node.memory);
        const std::size_t bytes = static_cast<std::size_t>(node.memory) + page;
        EXPECT_EQ(memory::admit(bytes, memory::policy_mode::bind, node_set{node.id}), ENOMEM) << "node " << node.id;
        EXPECT_EQ(memory::admit(bytes, memory::policy_mode::bind_balancing, node_set{node.id}), ENOMEM) << "node " << node.id;
        ++tested;
    }
    if (tested == 0) GTEST_SKIP() << "no node reports its memory size";
    if (tested == node_count())
        EXPECT_EQ(memory::admit(total + page, memory::policy_mode::preferred, topo.all()), ENOMEM);
    EXPECT_STREQ(memory::name(memory::policy_mode::bind), "bind");
    EXPECT_STREQ(memory::name(memory::policy_mode::interleave), "interleave");
}

TEST(admission, strict_bind_of_more_than_the_node_has_throws_placement_error) {
    const auto& topo = topology::get();
    const std::size_t page = numaplace::detail::page_size();
    int tested = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) continue; // size unknown: numaplace cannot refuse beforehand
        const int k = node.id;
        const std::size_t bytes = static_cast<std::size_t>(node.memory) + page;
        SCOPED_TRACE("node " + std::to_string(k) + ", " + std::to_string(bytes) + " bytes");
        numaplace::node_allocator<char> strict(k);
        const std::size_t before = virtual_size();
        try {
            char* p = strict.allocate(bytes);
            strict.deallocate(p, bytes);
            ADD_FAILURE() << "strict bind of more than the node's memory succeeded";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.node(), k);
            EXPECT_EQ(e.bytes(), bytes);
            EXPECT_EQ(e.error_number(), ENOMEM);
            const std::string msg = e.what();
            EXPECT_TRUE(contains(msg, "node " + std::to_string(k))) << msg;
            EXPECT_TRUE(contains(msg, std::to_string(bytes) + " bytes")) << msg;
            EXPECT_TRUE(contains(msg, "errno " + std::to_string(ENOMEM))) << msg;
        }
        // nothing stays mapped (the failed mapping was as large as the node)
        const std::size_t after = virtual_size();
        EXPECT_LT(after, before + bytes / 2) << "before " << before << " after " << after;
        // caught as std::bad_alloc, as any allocation failure
        EXPECT_THROW((void)strict.allocate(bytes), std::bad_alloc);
        // the same through a page_resource
        numaplace::page_resource<numaplace::on_node> resource{numaplace::on_node(k)};
        EXPECT_THROW((void)resource.allocate(bytes), numaplace::placement_error);
        // and through an interleave over that node alone
        numaplace::interleaved_allocator<char> one{numaplace::interleaved(node_set{k})};
        try {
            (void)one.allocate(bytes);
            ADD_FAILURE() << "strict interleave over one node of more than its memory succeeded";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.node(), k);
            EXPECT_EQ(e.error_number(), ENOMEM);
        }
        EXPECT_LT(virtual_size(), before + bytes / 2);
        ++tested;
    }
    if (tested == 0) GTEST_SKIP() << "no node reports its memory size";
}

TEST(admission, degrading_bind_of_more_than_the_node_is_refused_too) {
    // memory.hpp's contract: a fallback cannot make memory that does not exist (the pages would
    // OOM-kill at first touch), so a degrading placement refuses it with ENOMEM as a strict one does.
    const auto& topo = topology::get();
    const std::size_t page = numaplace::detail::page_size();
    int tested = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) continue;
        const int k = node.id;
        const std::size_t bytes = static_cast<std::size_t>(node.memory) + page;
        numaplace::node_allocator<char> degrading{numaplace::on_node(k, node_policy::bind, fallback::degrade)};
        const std::size_t count = numaplace::degradation_count();
        try {
            (void)degrading.allocate(bytes);
            ADD_FAILURE() << "node " << k << " served more than its memory";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_EQ(e.node(), k);
        }
        EXPECT_EQ(numaplace::degradation_count(), count) << "node " << k;
        ++tested;
    }
    if (tested == 0) GTEST_SKIP() << "no node reports its memory size";
}

TEST(admission, strict_weighted_interleave_of_more_than_all_nodes_have_throws) {
    const auto& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "weighted interleave needs two nodes";
    std::size_t total = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) GTEST_SKIP() << "node " << node.id << " reports no memory size";
        total += static_cast<std::size_t>(node.memory);
    }
    std::vector<std::size_t> weights(topo.size(), 1);
    weights[0] = 2;
    const std::size_t bytes = total + numaplace::detail::page_size();
    numaplace::interleaved_allocator<char> strict{numaplace::interleaved(topo.all(), weights)};
    ASSERT_FALSE(strict.placement().weights().empty());
    const std::size_t before = virtual_size();
    try {
        (void)strict.allocate(bytes);
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.node(), -1); // several nodes
        EXPECT_EQ(e.bytes(), bytes);
        EXPECT_EQ(e.error_number(), ENOMEM);
        EXPECT_TRUE(contains(e.what(), "node any")) << e.what();
    }
    EXPECT_LT(virtual_size(), before + bytes / 2);
    // degrading: refused the same way (memory.hpp's capacity contract), nothing recorded
    numaplace::interleaved_allocator<char> degrading{numaplace::interleaved(topo.all(), weights, fallback::degrade)};
    const std::size_t count = numaplace::degradation_count();
    try {
        (void)degrading.allocate(bytes);
        ADD_FAILURE() << "degrading weighted interleave served more than all nodes have";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM);
    }
    EXPECT_EQ(numaplace::degradation_count(), count);
}

TEST(admission, request_beyond_node_memory_throws_enomem_strict_or_degrading) {
    const auto& node = topology::get().at(0);
    const std::size_t too_much = static_cast<std::size_t>(node.memory) + mib;
    for (auto fb : {fallback::strict, fallback::degrade}) {
        node_allocator<char> a(0, node_policy::bind, fb);
        try {
            (void)a.allocate(too_much);
            FAIL() << "allocated more than node 0 has";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.node(), 0);
            EXPECT_EQ(e.bytes(), too_much);
            EXPECT_EQ(e.error_number(), ENOMEM);
        }
    }
}

TEST(admission, requests_beyond_free_memory_are_refused_for_every_policy) {
    const auto& topo = topology::get();
    const std::size_t tib = std::size_t(1) << 40;
    expect_enomem([&] { (void)node_allocator<char>(0).allocate(tib); }, "bind strict");
    expect_enomem([&] { (void)node_allocator<char>(0, node_policy::bind, fallback::degrade).allocate(tib); }, "bind degrade");
    expect_enomem([&] { (void)node_allocator<char>(0, node_policy::prefer).allocate(tib); }, "prefer strict");
    expect_enomem([&] { (void)node_allocator<char>(0, node_policy::prefer, fallback::degrade).allocate(tib); }, "prefer degrade");
    expect_enomem([&] { (void)interleaved_allocator<char>(interleaved(topo.all(), {}, fallback::degrade)).allocate(tib); }, "interleave");
    expect_enomem([&] { (void)node_pool(0).allocate(tib, 64); }, "node_pool");
    page_resource<on_node> pages{on_node(0, node_policy::prefer, fallback::degrade)};
    expect_enomem([&] { (void)pages.allocate(tib, 64); }, "page_resource prefer");
}

TEST(admission, two_strict_requests_of_six_tenths_of_a_node_only_fit_one_at_a_time) {
    for (const auto& node : topology::get().nodes()) {
        if (node.memory == 0) continue;
        const std::size_t bytes = static_cast<std::size_t>(node.memory) / 10 * 6;
        node_allocator<char> a(node.id);
        char* first = nullptr;
        try {
            first = a.allocate(bytes);
        } catch (const placement_error& e) {
            // a node more than 40 % used cannot take even the first: refused the same way
            EXPECT_EQ(e.error_number(), ENOMEM);
            continue;
        }
        try {
            char* second = a.allocate(bytes);
            a.deallocate(second, bytes);
            ADD_FAILURE() << "node " << node.id << ": both 0.6x requests admitted";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_EQ(e.node(), node.id);
        }
        a.deallocate(first, bytes);
        char* again = nullptr;
        EXPECT_NO_THROW(again = a.allocate(bytes)) << "the first reservation was not released";
        if (again) a.deallocate(again, bytes);
    }
}

// The memory-only node of the `memonly` guest (512 MiB) filled to the brim with strict allocations of
// several sizes: each fill ends in placement_error (ENOMEM) and the process is never killed.
TEST(admission, near_full_fills_of_the_memory_only_node_throw_never_kill) {
    const char* layout = std::getenv("NUMAPLACE_GUEST_LAYOUT");
    if (!layout || std::string(layout) != "memonly") GTEST_SKIP() << "runs in the memonly guest (its node 2)";
    const auto& topo = topology::get();
    ASSERT_EQ(topo.size(), 3u);
    for (std::size_t bytes : {8 * mib, 65536 * std::size_t(1), std::size_t(4096), std::size_t(256)}) {
        const int code = run_child([bytes] {
            node_allocator<char> a(2);
            std::size_t total = 0;
            try {
                for (;;) {
                    char* p = a.allocate(bytes);
                    memory::touch(p, bytes);
                    total += bytes;
                }
            } catch (const placement_error& e) {
                if (e.error_number() != ENOMEM) return 2;
            }
            std::fprintf(stderr, "filled %zu MiB of node 2 with %zu-byte blocks\n", total / mib, bytes);
            return total >= 300 * mib ? 0 : 3; // most of the node was usable
        }, 240);
        EXPECT_EQ(code, 0) << bytes << " bytes: 2 = wrong errno, 3 = refused too early, 137 = OOM-killed";
    }
}

// At the kernel's mapping limit (vm.max_map_count), unmapping part of a mapping needs one more mapping
// and fails with ENOMEM. memory::unmap then releases the pages (MADV_DONTNEED), keeps the range listed,
// and unmaps it at a later unmap, once mappings are free again: no freed block stays resident unseen.
TEST(memory, unmap_at_the_mapping_limit_releases_the_pages_and_unmaps_later) {
    const int code = run_child([] {
        std::size_t limit = 0;
        if (std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
            unsigned long v = 0;
            if (std::fscanf(f, "%lu", &v) == 1) limit = v;
            std::fclose(f);
        }
        if (limit == 0 || limit > 1000000) return 77; // cannot fill the map count here
        const std::size_t page = detail::page_size();
        char* block = static_cast<char*>(memory::map(3 * page));
        std::memset(block, 1, 3 * page);
        // Fill the map count: single pages of alternating protection never merge.
        std::vector<void*> filler;
        for (std::size_t i = 0;; ++i) {
            void* p = ::mmap(nullptr, page, (i % 2) ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) break;
            filler.push_back(p);
            if (filler.size() > limit + 10) return 10; // the limit did not hold
        }
        // The middle page: unmapping it would split the block's mapping in two.
        const std::size_t before = detail::stranded_count.load();
        memory::unmap(block + page, page);
        if (detail::stranded_count.load() != before + 1) return 11;
        unsigned char vec[1] = {1};
        if (::mincore(block + page, page, vec) != 0) return 12; // still mapped
        if (vec[0] & 1) return 13;                               // but its page was released
        // A mapping refused at the limit says so (not "out of memory" alone). Not under a sanitizer: its
        // runtime needs mappings of its own to build the exception and aborts at the limit.
#ifndef NUMAPLACE_SANITIZED
        try {
            void* refused = memory::map(page);
            memory::unmap(refused, page);
            return 16;
        } catch (const placement_error& e) {
            if (e.error_number() != ENOMEM || !std::strstr(e.what(), "vm.max_map_count")) return 17;
        }
#endif
        // Free mappings, then any unmap retries the stranded range.
        for (std::size_t i = 0; i < 16; ++i) ::munmap(filler[i], page);
        void* other = memory::map(page);
        memory::unmap(other, page);
        if (detail::stranded_count.load() != before) return 14;
        if (::mincore(block + page, page, vec) == 0 || errno != ENOMEM) return 15; // gone now
        return 0;
    });
    if (code == 77) GTEST_SKIP() << "vm.max_map_count unreadable or too large to fill in a test";
    EXPECT_EQ(code, 0);
}

// A reservation whose range the caller unmapped itself (without memory::unmap) is dropped when the
// accounting re-reads the node, so it cannot hold the node's memory forever.
TEST(admission, a_reservation_unmapped_behind_its_back_is_dropped) {
    const node& n = topology::get().nodes().front();
    if (!topology::get().capabilities().memory_binding) GTEST_SKIP() << "mbind refused here";
    const std::size_t page = detail::page_size();
    const int code = run_child([&] {
        // 3/5 of the node's free memory, three times over a caller's own range that it then unmaps (a
        // fresh mapping elsewhere each time: the old ranges stay unmapped): without the drop, the second
        // round would find the first one's reservation still holding the node.
        std::uint64_t free_kb = 0, file_kb = 0;
        if (std::FILE* f = std::fopen(("/sys/devices/system/node/node" + std::to_string(n.os_index) + "/meminfo").c_str(), "r")) {
            char line[256];
            unsigned long long v = 0;
            while (std::fgets(line, sizeof line, f)) {
                const char* colon = std::strchr(line, ':');
                if (!colon || std::sscanf(colon + 1, "%llu", &v) != 1) continue;
                if (std::strstr(line, "MemFree:")) free_kb = v;
                else if (std::strstr(line, "(file):")) file_kb += v;
            }
            std::fclose(f);
        }
        if (free_kb == 0) return 77;
        const std::size_t bytes = static_cast<std::size_t>((free_kb + file_kb / 2) * 1024 / 5 * 3) / page * page;
        std::vector<void*> guards; // keep each unmapped range's address from being mapped again
        for (int round = 0; round < 3; ++round) {
            void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) return 20;
            try {
                place_pages(p, bytes, memory::policy_mode::bind, node_set{n.id}, fallback::strict);
            } catch (const placement_error& e) {
                std::fprintf(stderr, "round %d: %s\n", round, e.what());
                return 21 + round;
            }
            ::munmap(p, bytes);
            // occupy the address with a mapping of another kind: the stale reservation is not reused
            void* g = ::mmap(p, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (g != MAP_FAILED) guards.push_back(g);
        }
        return 0;
    });
    if (code == 77) GTEST_SKIP() << "node memory unknown";
    EXPECT_EQ(code, 0);
}

// A mapping refused because of its size says so, not "the mapping limit": more than any address range
// (1 PiB) everywhere, and more than the address-space limit (ulimit -v) in a child that sets one. Every
// path that maps: memory::map, a heap's large block, an interleaved block.
TEST(memory, a_mapping_beyond_the_address_space_or_its_limit_is_named_so) {
    const auto expect_named = [](std::size_t bytes, const std::string& words) {
        const std::vector<std::function<void()>> paths{
            [bytes] { (void)memory::map(bytes); },
            [bytes] { (void)node_allocator<char>(0).allocate(bytes); },
            [bytes] { (void)interleaved_allocator<char>(topology::get().all()).allocate(bytes); },
        };
        int bad = 0;
        for (std::size_t k = 0; k < paths.size(); ++k) try {
                paths[k]();
                ADD_FAILURE() << "path " << k << ": " << bytes << " bytes mapped";
                ++bad;
            } catch (const placement_error& e) {
                EXPECT_EQ(e.error_number(), ENOMEM) << "path " << k;
                EXPECT_EQ(e.bytes(), bytes) << "path " << k;
                EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << "path " << k << ": " << e.what();
                if (e.error_number() != ENOMEM || std::string(e.what()).find(words) == std::string::npos) ++bad;
            }
        return bad;
    };
    expect_named(std::size_t(1) << 50, "bytes are more than any free range of the process's address space");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return; // sanitizers reserve terabytes of shadow address space: no address-space limit in their runs
#endif
    const int code = numaplace_test::run_child([&] {
        (void)node_allocator<char>(0).allocate(1); // heaps made before the limit
        rlimit lim{};
        if (::getrlimit(RLIMIT_AS, &lim) != 0) return 2;
        std::FILE* f = std::fopen("/proc/self/statm", "r");
        unsigned long vm_pages = 0;
        if (!f || std::fscanf(f, "%lu", &vm_pages) != 1) return 3;
        std::fclose(f);
        lim.rlim_cur = vm_pages * detail::page_size() + 64 * mib;
        if (::setrlimit(RLIMIT_AS, &lim) != 0) return 4;
        return expect_named(std::size_t(1) << 30, "bytes are more than the address-space limit (ulimit -v " +
                                                      std::to_string(lim.rlim_cur >> 10) + ")") == 0 ? 0 : 5;
    });
    EXPECT_EQ(code, 0) << "5: a path did not name the limit (its message above)";
}
