// pmr.hpp: node_pool (one std::pmr resource per node, over the node's heap) and page_resource<Placement>
// (whole pages placed by any placement): the ids they accept, every size from 0 to the impossible, every
// power-of-two alignment, and std::pmr containers on them for every node. Memory they cannot have (the
// capacity contract, ENOMEM): test_memory.
#include <numaplace/pmr.hpp>

#include <numaplace/placement.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>
#include <numaplace/detail/background_release.hpp> // the internals these tests look into, which the
#include <numaplace/detail/routed_mapping.hpp>     // separately compiled mode leaves out of the public headers

#include <gtest/gtest.h>

#include <expect.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory_resource>
#include <string>
#include <utility>
#include <vector>

using namespace numaplace;
using numaplace_test::expect_enomem;
using numaplace_test::expect_unknown_node;
using numaplace_test::huge_sizes;

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;
const std::size_t page = detail::page_size();

int node_count() { return static_cast<int>(topology::get().size()); }

bool binding_works() { return topology::get().capabilities().memory_binding; }
bool query_works() { return topology::get().capabilities().page_query; }
// Strict where the kernel lets us bind (every guest); degrading where it does not, so containers work.
fallback binding_fallback() { return binding_works() ? fallback::strict : fallback::degrade; }

// A value with a heap part, to catch double destruction / missed construction in the containers.
std::string text(int i) { return "value number " + std::to_string(i) + " with a tail longer than SSO"; }

const std::vector<std::size_t>& alignments() {
    static const std::vector<std::size_t> a{1, 8, 16, 64, 4096, 8192, 65536, 2 * mib};
    return a;
}
} // namespace

TEST(pmr, node_pool_rejects_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { (void)numaplace::node_pool(n); }, n, "node_pool(N)");
    expect_unknown_node([&] { (void)numaplace::node_pool(-1); }, -1, "node_pool(-1)");
    for (int k = 0; k < n; ++k) EXPECT_NO_THROW((void)numaplace::node_pool(k)) << k;
}

TEST(pmr, resources_refuse_impossible_sizes_and_serve_zero) {
    page_resource<on_node> pages{on_node(0)};
    page_resource<interleaved> spread{interleaved(topology::get().all())};
    std::vector<std::pair<std::pmr::memory_resource*, std::string>> resources{
        {&node_pool(0), "node_pool"}, {&pages, "page_resource<on_node>"}, {&spread, "page_resource<interleaved>"}};
    for (auto& r : resources) {
        for (std::size_t a : alignments()) {
            for (std::size_t bytes : {std::size_t(0), std::size_t(1), page - 1, page, page + 1}) {
                void* p = r.first->allocate(bytes, a);
                ASSERT_NE(p, nullptr) << r.second << " " << bytes << "@" << a;
                EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % a, 0u) << r.second << " " << bytes << "@" << a;
                if (bytes) static_cast<char*>(p)[bytes - 1] = 1;
                r.first->deallocate(p, bytes, a);
            }
            for (std::size_t bytes : huge_sizes())
                expect_enomem([&] { (void)r.first->allocate(bytes, a); },
                              r.second + " " + std::to_string(bytes) + "@" + std::to_string(a));
        }
        // zero bytes twice: two distinct blocks
        void* z1 = r.first->allocate(0, 16);
        void* z2 = r.first->allocate(0, 16);
        EXPECT_NE(z1, z2) << r.second;
        r.first->deallocate(z1, 0, 16);
        r.first->deallocate(z2, 0, 16);
    }
}

TEST(pmr, every_power_of_two_alignment_to_4_mib_exactly) {
    std::vector<std::pair<std::pmr::memory_resource*, std::string>> resources{{&node_pool(0), "node_pool"}};
    page_resource<on_node> pages{on_node(0)};
    resources.emplace_back(&pages, "page_resource");
    for (auto& r : resources)
        for (std::size_t a = 1; a <= 4 * mib; a *= 2)
            for (std::size_t bytes : {std::size_t(1), std::size_t(24), std::size_t(100), page, 5000 + a / 3, std::size_t(70000)}) {
                std::vector<void*> blocks;
                for (int k = 0; k < 5; ++k) {
                    void* p = r.first->allocate(bytes, a);
                    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % a, 0u) << r.second << " " << bytes << "@" << a;
                    static_cast<char*>(p)[0] = 1;
                    static_cast<char*>(p)[bytes - 1] = 2;
                    blocks.push_back(p);
                }
                for (void* p : blocks) r.first->deallocate(p, bytes, a);
            }
}

// An alignment that is not a power of two (a caller's precondition in std::pmr): refused the same way
// by both resources, placement_error EINVAL naming the node and the bytes, never a misaligned block.
TEST(pmr, an_alignment_that_is_not_a_power_of_two_is_refused_by_both_resources) {
    page_resource<on_node> pages{on_node(0)};
    for (std::pmr::memory_resource* r : {static_cast<std::pmr::memory_resource*>(&node_pool(0)),
                                         static_cast<std::pmr::memory_resource*>(&pages)})
        for (std::size_t a : {std::size_t(0), std::size_t(3), std::size_t(6), std::size_t(12), std::size_t(24), page + 1,
                              std::size_t(4097), SIZE_MAX})
            for (std::size_t bytes : {std::size_t(1), std::size_t(100), std::size_t(70000)}) {
                SCOPED_TRACE(std::to_string(bytes) + " bytes at alignment " + std::to_string(a));
                try {
                    void* p = r->allocate(bytes, a);
                    r->deallocate(p, bytes, a);
                    ADD_FAILURE() << "no exception";
                } catch (const placement_error& e) {
                    EXPECT_EQ(e.error_number(), EINVAL);
                    EXPECT_EQ(e.node(), 0);
                    EXPECT_EQ(e.bytes(), bytes);
                }
            }
}

// --- std::pmr containers with numaplace resources, for every node -----------------------------------

TEST(pmr, containers_on_every_node_pool) {
    const auto& topo = topology::get();
    for (const auto& node : topo.nodes()) {
        SCOPED_TRACE("node " + std::to_string(node.id));
        std::pmr::memory_resource& pool = numaplace::node_pool(node.id);
        EXPECT_EQ(&pool, &numaplace::node_pool(node.id)); // one pool per node, for the process
        EXPECT_TRUE(pool.is_equal(numaplace::node_pool(node.id)));
        for (const auto& other : topo.nodes())
            if (other.id != node.id) EXPECT_FALSE(pool.is_equal(numaplace::node_pool(other.id)));

        std::pmr::vector<int> v(&pool);
        for (int i = 0; i < 100000; ++i) v.push_back(i); // grows past the pool's largest block
        for (int i = 0; i < 100000; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i);
        v.erase(v.begin(), v.begin() + 50000);
        EXPECT_EQ(v.front(), 50000);

        std::pmr::map<int, std::pmr::string> m(&pool);
        for (int i = 0; i < 5000; ++i) m.emplace(i, text(i).c_str());
        ASSERT_EQ(m.size(), 5000u);
        EXPECT_EQ(m.get_allocator().resource(), &pool);
        // uses-allocator construction: the strings inside use the map's resource too
        EXPECT_EQ(m.at(17).get_allocator().resource(), &pool);
        EXPECT_EQ(m.at(17), text(17).c_str());
        for (int i = 0; i < 5000; i += 2) m.erase(i);
        EXPECT_EQ(m.size(), 2500u);
        std::pmr::map<int, std::pmr::string> copy(m, std::pmr::new_delete_resource());
        EXPECT_TRUE(copy == m);
        EXPECT_EQ(copy.at(17).get_allocator().resource(), std::pmr::new_delete_resource());

        std::pmr::string s(&pool);
        for (int i = 0; i < 3000; ++i) s += std::to_string(i);
        EXPECT_GT(s.size(), 2 * page);
        EXPECT_EQ(s.get_allocator().resource(), &pool);
        std::pmr::string s2(s, &pool);
        EXPECT_EQ(s2, s);

        if (query_works() && binding_works()) {
            // the pool's chunks are bound to the node
            std::pmr::vector<double> placed(200000, 1.0, &pool);
            const auto h = numaplace::where(placed);
            EXPECT_EQ(h.on(node.id), h.pages);
        }
    }
}

TEST(pmr, containers_on_every_node_page_resource) {
    const auto& topo = topology::get();
    for (const auto& node : topo.nodes()) {
        SCOPED_TRACE("node " + std::to_string(node.id));
        numaplace::page_resource<on_node> resource{on_node(node.id, node_policy::bind, binding_fallback())};
        numaplace::page_resource<on_node> same{on_node(node.id, node_policy::bind, binding_fallback())};
        numaplace::page_resource<on_node> preferring{on_node(node.id, node_policy::prefer, fallback::degrade)};
        EXPECT_TRUE(resource.is_equal(same));
        EXPECT_FALSE(resource.is_equal(preferring));
        EXPECT_FALSE(resource.is_equal(*std::pmr::new_delete_resource()));
        EXPECT_EQ(resource.placement(), on_node(node.id, node_policy::bind, binding_fallback()));

        std::pmr::vector<int> v(&resource);
        for (int i = 0; i < 200000; ++i) v.push_back(i * 3);
        for (int i = 0; i < 200000; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i * 3);
        std::pmr::vector<int> copy(v, &same);
        EXPECT_TRUE(copy == v);
        v.erase(v.begin() + 10, v.end());
        v.shrink_to_fit();
        EXPECT_EQ(v.size(), 10u);

        std::pmr::map<int, std::pmr::string> m(&resource); // one page per node: wasteful but correct
        for (int i = 0; i < 200; ++i) m.emplace(i, text(i).c_str());
        EXPECT_EQ(m.at(150), text(150).c_str());
        EXPECT_EQ(m.at(150).get_allocator().resource(), &resource);
        for (int i = 0; i < 200; i += 4) m.erase(i);
        EXPECT_EQ(m.size(), 150u);

        std::pmr::string s(10 * page, 'x', &resource);
        s.append(std::string(page, 'y'));
        EXPECT_EQ(s.size(), 11 * page);
        EXPECT_EQ(std::count(s.begin(), s.end(), 'y'), static_cast<std::ptrdiff_t>(page));

        // allocations are page-aligned whatever alignment was asked, and round-trip
        for (std::size_t bytes : {std::size_t(1), std::size_t(100), page, 5 * page + 3}) {
            void* p = resource.allocate(bytes, 64);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % page, 0u);
            std::fill_n(static_cast<char*>(p), bytes, 'z');
            resource.deallocate(p, bytes, 64);
        }

        if (query_works() && binding_works()) {
            std::pmr::vector<long> placed(300000, 5, &resource);
            const auto h = numaplace::where(placed);
            EXPECT_EQ(h.untouched, 0u);
            EXPECT_EQ(h.on(node.id), h.pages);
        }
    }
}
