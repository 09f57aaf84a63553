#include <numaplace/arenas.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/replicated.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <seccomp.hpp>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include <cstdio>
#include <stdlib.h>
#include <unistd.h>

namespace np = numaplace;
using namespace numaplace;

namespace {
constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();


const std::size_t page = detail::page_size();

std::vector<std::uint32_t> table(std::size_t n) {
    std::vector<std::uint32_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>(i * 2654435761u);
    return v;
}

bool in_copy(const void* p, const replicated<std::uint32_t>& r, std::size_t k) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const auto b = reinterpret_cast<std::uintptr_t>(r.copies()[k].data);
    return a >= b && a < b + r.size() * sizeof(std::uint32_t);
}

std::size_t copy_index(const replicated<std::uint32_t>& r, int node) {
    for (std::size_t k = 0; k < r.copies().size(); ++k)
        if (r.copies()[k].node == node) return k;
    return r.copies().size();
}

// The pinning the guest harness expects (NUMAPLACE_EXPECT_PINNING), if any.
void check_expected_pinning() {
    if (const char* want = std::getenv("NUMAPLACE_EXPECT_PINNING")) {
        const pinning p = arena_capabilities().pinning;
        EXPECT_EQ(std::string(want), p == pinning::tbbbind ? "tbbbind" : p == pinning::hwloc ? "hwloc" : "other")
            << arena_capabilities().reason;
    }
}

} // namespace

TEST(replicated, each_copy_is_entirely_on_its_node_with_the_source_contents) {
    const topology& topo = topology::get();
    const std::size_t n = 3 * page + 17; // not a whole number of pages
    const auto src = table(n);
    replicated<std::uint32_t> r(src);
    EXPECT_EQ(r.size(), n);
    EXPECT_EQ(r.nodes(), topo.with_cpus());
    ASSERT_EQ(r.copies().size(), topo.with_cpus().size());
    EXPECT_EQ(r.bytes_per_copy(), (n * 4 + page - 1) / page * page);
    EXPECT_EQ(r.bytes(), r.bytes_per_copy() * r.copies().size());
    EXPECT_FALSE(r.degraded());
    const auto hist = r.where();
    for (std::size_t k = 0; k < r.copies().size(); ++k) {
        const int node = r.copies()[k].node;
        EXPECT_EQ(hist[k].pages, r.bytes_per_copy() / page);
        EXPECT_EQ(hist[k].on(node), hist[k].pages) << "copy " << k << " not wholly on node " << node;
        EXPECT_EQ(r.copy_for(node), r.copies()[k].data);
        EXPECT_TRUE(std::equal(src.begin(), src.end(), r.copies()[k].data));
    }
    std::ostringstream os;
    r.report(os);
    EXPECT_NE(os.str().find("copies"), std::string::npos);
}

TEST(replicated, copies_on_every_node_including_memory_only_ones_and_nearest_for_the_rest) {
    const topology& topo = topology::get();
    const auto src = table(10000);
    replicated<std::uint32_t> r(src, topo.all());
    ASSERT_EQ(r.copies().size(), topo.size());
    for (std::size_t k = 0; k < r.copies().size(); ++k) {
        const auto h = r.where(k);
        EXPECT_EQ(h.on(r.copies()[k].node), h.pages);
        EXPECT_TRUE(std::equal(src.begin(), src.end(), r.copies()[k].data));
    }
    if (const char* l = std::getenv("NUMAPLACE_GUEST_LAYOUT"); l && std::string(l) == "memonly") {
        ASSERT_EQ(topo.size(), 3u);
        EXPECT_EQ(r.where(2).on(2), r.where(2).pages) << "the memory-only node holds its copy";
        // Only the first node's copy: every node reads it.
        replicated<std::uint32_t> one(src, node_set{0});
        EXPECT_EQ(one.copy_for(2), one.copies()[0].data);
        // Nodes 0 and 2: node 1 is nearer to 0 (21) than to 2 (30).
        replicated<std::uint32_t> two(src, node_set{0, 2});
        EXPECT_EQ(two.copy_node_for(1), 0);
        EXPECT_EQ(two.copy_node_for(2), 2);
    }
    if (const char* l = std::getenv("NUMAPLACE_GUEST_LAYOUT"); l && std::string(l) == "4node") {
        // Copies on 0 and 2: node 1 is nearer to 0 (21 vs 31), node 3 to 2.
        replicated<std::uint32_t> two(src, node_set{0, 2});
        EXPECT_EQ(two.copy_node_for(1), 0);
        EXPECT_EQ(two.copy_node_for(3), 2);
    }
    EXPECT_THROW(r.copy_for(static_cast<int>(topo.size())), unknown_node);
    EXPECT_THROW(replicated<std::uint32_t>(src, node_set{static_cast<int>(topo.size())}), unknown_node);
    EXPECT_THROW(replicated<std::uint32_t>(src, node_set{}), invalid_placement);
}

TEST(replicated, each_block_reads_the_copy_of_its_node) {
    check_expected_pinning();
    const topology& topo = topology::get();
    const auto src = table(200000);
    replicated<std::uint32_t> r(src);
    const std::size_t n = 1u << 20;
    const partition<double> part(n);
    std::atomic<std::size_t> wrong_copy{0}, wrong_node{0}, wrong_local{0}, visited{0}, sum{0};
    const bool pinned = arena_capabilities().pinning == pinning::tbbbind || arena_capabilities().pinning == pinning::hwloc;
    parallel_for(part, [&](subrange s) {
        const std::uint32_t* t = r.copy_for(s.node());
        const std::size_t k = copy_index(r, s.node());
        if (k == r.copies().size() || !in_copy(t, r, k) || !in_copy(t + r.size() - 1, r, k)) ++wrong_copy;
        if (r.local() != t) ++wrong_local;
        if (pinned && topo.current_node() != s.node()) ++wrong_node;
        std::size_t acc = 0;
        for (std::size_t i = s.begin(); i < s.end(); ++i) acc += t[i % r.size()];
        sum += acc;
        visited += s.size();
    });
    EXPECT_EQ(visited.load(), n);
    EXPECT_EQ(wrong_copy.load(), 0u);
    EXPECT_EQ(wrong_local.load(), 0u);
    EXPECT_EQ(wrong_node.load(), 0u) << "a block ran off its node: " << arena_capabilities().reason;
    std::size_t expect = 0;
    for (std::size_t i = 0; i < n; ++i) expect += src[i % src.size()];
    EXPECT_EQ(sum.load(), expect);
    // Outside a loop: the copy of the node the thread runs on (or its nearest).
    const int here = topo.current_node();
    if (here >= 0) {
        const std::uint32_t* l = r.local();
        const int again = topo.current_node();
        if (again == here) EXPECT_EQ(l, r.copy_for(here));
    }
}

TEST(replicated, assign_and_update_refresh_every_copy) {
    auto src = table(5 * page);
    replicated<std::uint32_t> r(src, topology::get().all());
    for (auto& x : src) x ^= 0xdeadbeefu;
    r.assign(src.data());
    for (const auto& c : r.copies()) EXPECT_TRUE(std::equal(src.begin(), src.end(), c.data));
    r.update([](std::uint32_t* d, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::uint32_t>(i);
    });
    for (std::size_t k = 0; k < r.copies().size(); ++k) {
        for (std::size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r.copies()[k].data[i], i) << "copy " << k;
        EXPECT_EQ(r.where(k).on(r.copies()[k].node), r.where(k).pages) << "a refresh moved a copy";
    }
    // An edit that throws: the first copy is edited as far as it got, the others are untouched.
    EXPECT_THROW(r.update([](std::uint32_t* d, std::size_t) {
        d[0] = 99;
        throw std::runtime_error("x");
    }),
                 std::runtime_error);
    if (r.copies().size() > 1) EXPECT_EQ(r.copies()[1].data[0], 0u);
}

TEST(replicated, sizes_zero_one_page_minus_one_and_overflow) {
    replicated<std::uint32_t> zero(nullptr, 0);
    EXPECT_EQ(zero.size(), 0u);
    EXPECT_EQ(zero.bytes(), 0u);
    EXPECT_EQ(zero.copy_for(0), nullptr);
    EXPECT_FALSE(zero.degraded());
    std::ostringstream zero_report; // no pages to bind: nothing refused
    zero.report(zero_report);
    EXPECT_EQ(zero_report.str().find("NOT bound"), std::string::npos) << zero_report.str();
    const std::uint32_t one = 42;
    replicated<std::uint32_t> r1(&one, 1);
    EXPECT_EQ(r1.bytes_per_copy(), page);
    EXPECT_EQ(*r1.copy_for(0), 42u);
    std::vector<char> pm1(page - 1, 'x');
    replicated<char> r2(pm1);
    EXPECT_EQ(r2.bytes_per_copy(), page);
    EXPECT_EQ(r2.where(0).pages, 1u);
    const std::size_t copies = r2.copies().size();
    EXPECT_EQ(r2.where(copies - 1).pages, 1u);
    try { // an index past the copies: numaplace's own out_of_range, naming the index and the count
        (void)r2.where(copies);
        ADD_FAILURE() << "where(" << copies << ") of " << copies << " copies returned";
    } catch (const std::out_of_range& e) {
        EXPECT_NE(std::string(e.what()).find("replicated::where(" + std::to_string(copies) + ")"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)r2.where(SIZE_MAX), std::out_of_range);
    EXPECT_EQ(r2.copy_for(0)[page - 2], 'x');
    EXPECT_THROW(replicated<std::uint32_t>(&one, SIZE_MAX / 2), std::bad_array_new_length);
    EXPECT_THROW(replicated<std::uint32_t>(&one, SIZE_MAX / 4 - 1), std::bad_array_new_length);
}

TEST(replicated, moved_from_is_empty_and_reusable) {
    const auto src = table(3000);
    replicated<std::uint32_t> a(src);
    const std::uint32_t* data = a.copy_for(0);
    replicated<std::uint32_t> b(std::move(a));
    EXPECT_EQ(b.copy_for(0), data);
    EXPECT_EQ(a.size(), 0u);                 // NOLINT: moved-from is specified
    EXPECT_TRUE(a.copies().empty());         // NOLINT
    EXPECT_EQ(a.copy_for(0), nullptr);       // NOLINT
    EXPECT_EQ(a.local(), nullptr);           // NOLINT
    EXPECT_TRUE(a.where().empty());          // NOLINT
    EXPECT_THROW((void)a.where(0), std::out_of_range); // NOLINT: no copy 0
    a.update([](std::uint32_t*, std::size_t) { FAIL() << "edit called on an empty replicated"; });
    a = replicated<std::uint32_t>(src);
    EXPECT_EQ(a.size(), src.size());
    b = std::move(b); // self-move: unchanged
    EXPECT_EQ(b.copy_for(0), data);
    b = std::move(a);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), b.copy_for(0)));
}

namespace {
// The seccomp child runs in a fresh process image (fork, filter, exec of this binary): oneTBB, which
// the parent has started, is not usable in a forked child (its worker threads are not copied).
int seccomp_child_body() {
    const auto src = table(4 * page);
    try {
        replicated<std::uint32_t> r(src);
        return 10;
    } catch (const placement_error& e) {
        if (e.error_number() != EPERM) return 11;
    }
    const std::size_t before = degradation_count();
    replicated<std::uint32_t> r(src, topology::get().with_cpus(), fallback::degrade);
    if (!r.degraded() || r.copies()[0].bound) return 12;
    if (degradation_count() != before + r.copies().size()) return 13;
    for (const auto& c : r.copies())
        if (!std::equal(src.begin(), src.end(), c.data)) return 14;
    std::ostringstream os;
    r.report(os);
    if (os.str().find("NOT bound") == std::string::npos) return 15;
    return 0;
}
const bool seccomp_child_ran = [] {
    if (const char* c = std::getenv("NUMAPLACE_TEST_REPLICATED_SECCOMP_CHILD"); c && std::string(c) == "1") {
        int code = 91;
        try {
            code = seccomp_child_body();
        } catch (...) {
            code = 92;
        }
        std::fflush(nullptr);
        _exit(code);
    }
    return false;
}();
} // namespace

TEST(replicated, seccomp_eperm_on_mbind_strict_throws_degrading_records_and_fills) {
    (void)seccomp_child_ran;
    const int code = numaplace_test::run_denied(numaplace_test::memory_policy_syscalls(), [] {
        ::setenv("NUMAPLACE_TEST_REPLICATED_SECCOMP_CHILD", "1", 1);
        char self[] = "/proc/self/exe";
        char* argv[] = {self, nullptr};
        ::execv(self, argv);
        return 93;
    });
    EXPECT_EQ(code, 0);
}

// --- attacks -----------------------------------------------------------------------------------------

TEST(replicated_attack, boundaries_and_values) {
    np::replicated<int> d;
    EXPECT_EQ(d.copy_for(0), nullptr);
    EXPECT_EQ(d.local(), nullptr);
    EXPECT_EQ(d.bytes(), 0u);
    d.update([](int*, std::size_t) { FAIL(); });
    std::vector<int> src(1025);
    std::iota(src.begin(), src.end(), 0);
    np::replicated<int> r(src);
    EXPECT_EQ(r.copies().size(), np::topology::get().with_cpus().size());
    for (const auto& c : r.copies()) EXPECT_TRUE(std::equal(src.begin(), src.end(), c.data));
    np::replicated<int> m = std::move(r);
    EXPECT_EQ(r.size(), 0u);
    EXPECT_EQ(r.copy_for(0), nullptr);
    m = std::move(m);
    EXPECT_EQ(m.size(), 1025u);
    EXPECT_EQ(m.copy_for(0)[1024], 1024);
    np::replicated<int> z(src.data(), 0);
    EXPECT_EQ(z.size(), 0u);
    EXPECT_EQ(z.bytes(), 0u);
    EXPECT_THROW(np::replicated<int>(src.data(), max_size), std::bad_array_new_length);
    EXPECT_THROW(np::replicated<int>(nullptr, 10), std::invalid_argument);
    EXPECT_THROW(np::replicated<int>(src.data(), 10, np::node_set{}), np::invalid_placement);
    EXPECT_THROW(m.copy_for(-1), np::unknown_node);
}

TEST(replicated_attack, loop_inside_replicated_update) {
    std::vector<int> src(50000, 1);
    np::replicated<int> r(src);
    r.update([](int* data, std::size_t size) {
        np::parallel_for(partition<int>(size), [data](std::size_t i) { data[i] = static_cast<int>(i); });
    });
    for (const auto& c : r.copies())
        for (std::size_t i = 0; i < r.size(); ++i) ASSERT_EQ(c.data[i], static_cast<int>(i));
    // and a replicated built from inside a loop body
    std::atomic<int> ok{0};
    np::parallel_for(partition<int>(2), [&](std::size_t) {
        np::replicated<int> inner(src);
        if (inner.local() != nullptr && inner.local()[49999] == 1) ok.fetch_add(1);
    });
    EXPECT_EQ(ok.load(), 2);
}

namespace {
// Mappings of `bytes` to `bytes` + a huge page (a copy's mapping; a sanitizer's runtime maps small ones
// and its huge shadow regions all the time).
std::size_t mappings_of_at_least(std::size_t bytes) {
    std::FILE* f = std::fopen("/proc/self/maps", "r");
    std::size_t n = 0;
    unsigned long long b = 0, e = 0;
    char line[512];
    while (f && std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "%llx-%llx", &b, &e) == 2 && e - b >= bytes && e - b <= bytes + detail::huge_page_size()) ++n;
    if (f) std::fclose(f);
    return n;
}
} // namespace

// Every copy is admitted against its node's free memory before anything is filled: a copy larger than
// the node can hold is refused with ENOMEM (for every fallback), with nothing left mapped.
TEST(replicated, a_copy_larger_than_its_node_is_refused_with_enomem) {
    const node& n = topology::get().nodes().back();
    if (n.memory == 0) GTEST_SKIP() << "node memory unknown";
    const std::size_t bytes = static_cast<std::size_t>(n.memory) + page;
    // The source is never read (refused before the fill): a mapping that reads as zeros costs nothing.
    void* src = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(src, MAP_FAILED);
    const std::size_t before = mappings_of_at_least(bytes);
    for (fallback fb : {fallback::strict, fallback::degrade}) {
        try {
            replicated<char> r(static_cast<const char*>(src), bytes, node_set{n.id}, fb);
            ADD_FAILURE() << "no throw";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_EQ(e.node(), n.id);
        }
        EXPECT_EQ(mappings_of_at_least(bytes), before); // no copy left mapped
    }
    ::munmap(src, bytes);
}

// Copies honour alignof(T) above the page size, like the allocators.
TEST(replicated, copies_are_aligned_to_alignof_t_above_the_page_size) {
    struct alignas(65536) wide {
        unsigned char bytes[65536];
    };
    std::vector<wide> src(3);
    for (std::size_t i = 0; i < src.size(); ++i) src[i].bytes[0] = static_cast<unsigned char>(i + 1);
    for (int round = 0; round < 8; ++round) {
        replicated<wide> r(src.data(), src.size());
        for (const auto& c : r.copies()) {
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.data) % alignof(wide), 0u);
            for (std::size_t i = 0; i < src.size(); ++i) EXPECT_EQ(c.data[i].bytes[0], i + 1);
        }
    }
}

// A copy of at least a huge page starts on a huge-page boundary and spans whole huge pages, and a
// smaller one has huge pages off: no huge page ever covers two copies (with the binding refused, a huge
// page faulted by one node's arena would otherwise land part of another node's copy there).
TEST(replicated, no_huge_page_is_shared_by_two_copies) {
    if (topology::get().with_cpus().size() < 2) GTEST_SKIP() << "needs two nodes"; // one copy shares nothing
    if (topology::get().capabilities().thp == "never") GTEST_SKIP() << "THP off: nothing to share";
    const std::size_t huge = detail::huge_page_size();
    for (std::size_t n : {std::size_t(100), huge / 4 + 1, huge, 3 * huge + 5}) {
        std::vector<char> src(n, 'x');
        replicated<char> r(src, topology::get().with_cpus(), fallback::degrade);
        const auto& cs = r.copies();
        for (std::size_t a = 0; a < cs.size(); ++a) {
            const auto pa = reinterpret_cast<std::uintptr_t>(cs[a].data);
            if (n >= huge) EXPECT_EQ(pa % huge, 0u) << n;
            for (std::size_t b = 0; b < cs.size(); ++b) {
                if (a == b) continue;
                const auto pb = reinterpret_cast<std::uintptr_t>(cs[b].data);
                const std::uintptr_t last_a = pa + n - 1;
                // no 2 MiB frame holds bytes of both copies unless huge pages are off on the smaller one
                if (n >= huge) EXPECT_NE(last_a / huge, pb / huge) << n;
            }
        }
    }
}
