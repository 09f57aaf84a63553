// The C++17 Allocator requirements with real std containers, for node_allocator, interleaved_allocator,
// partitioned_allocator and default_init_allocator over each: one typed test per requirement
// (allocator_requirements/<n>.<requirement>, TypeParam kind::<allocator>), then what only some of them
// have (allocator_conformance). Every expectation is computed from topology::get(), so the same binary is
// exact on one node and in the multi-node guests. The std::pmr resources with std::pmr containers: test_pmr.

#include <numaplace/allocator.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <owned_pages.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

using numaplace::default_init_allocator;
using numaplace::fallback;
using numaplace::interleaved_allocator;
using numaplace::node_allocator;
using numaplace::node_policy;
using numaplace::node_set;
using numaplace::on_node;
using numaplace::partitioned_allocator;
using numaplace::topology;

// --- allocator_traits ----------------------------------------------------------------------------

namespace {

template <class A, class T, class ReboundToDouble>
constexpr bool check_traits() {
    using traits = std::allocator_traits<A>;
    static_assert(std::is_same<typename traits::value_type, T>::value, "value_type");
    static_assert(std::is_same<typename traits::pointer, T*>::value, "pointer");
    static_assert(std::is_same<typename traits::const_pointer, const T*>::value, "const_pointer");
    static_assert(std::is_same<typename traits::size_type, std::size_t>::value, "size_type");
    static_assert(std::is_same<typename traits::difference_type, std::ptrdiff_t>::value, "difference_type");
    static_assert(std::is_same<typename traits::template rebind_alloc<double>, ReboundToDouble>::value,
                  "rebind_alloc gives the same template with U");
    static_assert(std::is_same<typename traits::template rebind_alloc<T>, A>::value, "rebind to T is A");
    static_assert(!traits::is_always_equal::value, "stateful: is_always_equal is false");
    // The allocator travels with the pages: move assignment and swap propagate it, copy assignment does
    // not (the destination keeps saying where its data lives). See allocator.hpp.
    static_assert(!traits::propagate_on_container_copy_assignment::value, "POCCA false");
    static_assert(traits::propagate_on_container_move_assignment::value, "POCMA true");
    static_assert(traits::propagate_on_container_swap::value, "POCS true");
    static_assert(std::is_copy_constructible<A>::value && std::is_move_constructible<A>::value, "copyable");
    static_assert(std::is_copy_assignable<A>::value, "assignable");
    static_assert(std::is_constructible<A, const ReboundToDouble&>::value, "converting constructor");
    static_assert(std::is_constructible<ReboundToDouble, const A&>::value, "converting constructor");
    static_assert(std::is_same<decltype(std::declval<A&>().allocate(std::size_t(1))), T*>::value, "allocate");
    static_assert(noexcept(std::declval<A&>().deallocate(std::declval<T*>(), std::size_t(1))), "deallocate noexcept");
    static_assert(noexcept(std::declval<const A&>().max_size()), "max_size noexcept");
    static_assert(std::is_same<decltype(std::declval<const A&>() == std::declval<const A&>()), bool>::value, "==");
    static_assert(std::is_same<decltype(std::declval<const A&>() != std::declval<const A&>()), bool>::value, "!=");
    static_assert(std::is_same<decltype(std::declval<const A&>() == std::declval<const ReboundToDouble&>()), bool>::value,
                  "== across value types");
    static_assert(std::is_same<decltype(traits::select_on_container_copy_construction(std::declval<const A&>())), A>::value,
                  "select_on_container_copy_construction");
    return true;
}

static_assert(check_traits<node_allocator<int>, int, node_allocator<double>>(), "");
static_assert(check_traits<interleaved_allocator<int>, int, interleaved_allocator<double>>(), "");
static_assert(check_traits<partitioned_allocator<int>, int, partitioned_allocator<double>>(), "");
static_assert(check_traits<node_allocator<std::string>, std::string, node_allocator<double>>(), "");
static_assert(check_traits<default_init_allocator<node_allocator<int>>, int,
                           default_init_allocator<node_allocator<double>>>(), "");
static_assert(check_traits<default_init_allocator<interleaved_allocator<int>>, int,
                           default_init_allocator<interleaved_allocator<double>>>(), "");
static_assert(check_traits<default_init_allocator<partitioned_allocator<int>>, int,
                           default_init_allocator<partitioned_allocator<double>>>(), "");
static_assert(std::is_same<numaplace::partitioned_vector<float>,
                           std::vector<float, default_init_allocator<partitioned_allocator<float>>>>::value, "");
static_assert(std::is_nothrow_copy_constructible<node_allocator<int>>::value, "on_node copies cannot throw");
// Default construction only where the placement has a default: interleave over every node, and the
// default partition of T (nodes with CPUs, weighted by cores). (So e.g. basic_string::substr, which builds
// its result with a default-constructed Allocator, is unavailable with node allocators: construct
// basic_string(s, pos, n, alloc) instead.)
static_assert(!std::is_default_constructible<node_allocator<int>>::value, "");
static_assert(std::is_default_constructible<partitioned_allocator<int>>::value, "");
static_assert(std::is_default_constructible<interleaved_allocator<int>>::value, "");
// Every allocator and placement is a trivially copyable handle: copies never throw, moved-from equals
// the source, destruction is trivial (no leak when libstdc++ drops a node handle's allocator copy).
template <class A>
constexpr bool handle_like() {
    return std::is_trivially_copyable<A>::value && std::is_nothrow_copy_constructible<A>::value &&
           std::is_nothrow_copy_assignable<A>::value && std::is_nothrow_move_constructible<A>::value &&
           std::is_trivially_destructible<A>::value;
}
static_assert(handle_like<node_allocator<int>>(), "");
static_assert(handle_like<interleaved_allocator<int>>(), "");
static_assert(handle_like<partitioned_allocator<int>>(), "");
static_assert(handle_like<numaplace::allocator<int, numaplace::preferred_many>>(), "");
static_assert(handle_like<default_init_allocator<interleaved_allocator<int>>>(), "");
static_assert(handle_like<default_init_allocator<partitioned_allocator<int>>>(), "");
static_assert(handle_like<on_node>() && handle_like<numaplace::interleaved>() &&
                  handle_like<numaplace::preferred_many>() && handle_like<numaplace::partitioned>(), "");
static_assert(handle_like<numaplace::partition<int>>(), "");
// The element type is part of the contract: a partition of another type does not make an allocator.
static_assert(!std::is_constructible<partitioned_allocator<double>, numaplace::partition<float>>::value, "");
static_assert(!std::is_constructible<partitioned_allocator<double>, numaplace::partition<float>&, fallback>::value, "");
static_assert(std::is_constructible<partitioned_allocator<double>, numaplace::partition<double>&, fallback>::value, "");

const std::size_t page = numaplace::detail::page_size();

bool binding_works() { return topology::get().capabilities().memory_binding; }
bool query_works() { return topology::get().capabilities().page_query; }
// Strict where the kernel lets us bind (every guest); degrading where it does not, so containers work.
fallback binding_fallback() { return binding_works() ? fallback::strict : fallback::degrade; }
int last_node() { return static_cast<int>(topology::get().size()) - 1; }

// A value with a heap part, to catch double destruction / missed construction in the containers.
std::string text(int i) { return "value number " + std::to_string(i) + " with a tail longer than SSO"; }

} // namespace

// --- the requirements, one typed test each, for every allocator family --------------------------------

// The type parameters: one per allocator family, named after it (ctest shows the test
// allocator_requirements.<requirement><kind::node_allocator>). kind::X::alloc<T> is the allocator of T;
// make<T>(0) and make<T>(1) compare unequal on any topology when `variants_differ()` (different policy /
// node set / partition size, or fallback on one node).
namespace kind {

struct node_allocator {
    template <class T>
    using alloc = numaplace::node_allocator<T>;
    template <class T>
    static alloc<T> make(int variant) {
        return variant == 0 ? alloc<T>(on_node(0, node_policy::bind, binding_fallback()))
                            : alloc<T>(on_node(last_node(), node_policy::prefer, fallback::degrade));
    }
    static bool variants_differ() { return true; }
};

struct interleaved_allocator {
    template <class T>
    using alloc = numaplace::interleaved_allocator<T>;
    template <class T>
    static alloc<T> make(int variant) {
        return variant == 0 ? alloc<T>(numaplace::interleaved(topology::get().all(), {}, binding_fallback()))
                            : alloc<T>(numaplace::interleaved(node_set{last_node()}, {}, fallback::degrade));
    }
    static bool variants_differ() { return topology::get().size() > 1 || binding_works(); }
};

struct partitioned_allocator {
    template <class T>
    using alloc = numaplace::partitioned_allocator<T>;
    template <class T>
    static alloc<T> make(int variant) {
        // different edge policies: different layouts (the size of a partition does not matter to the allocator)
        return variant == 0 ? alloc<T>(numaplace::partition<T>(100000), binding_fallback())
                            : alloc<T>(numaplace::partition<T>(3, topology::get().with_cpus(), {},
                                                               numaplace::edge_alignment::page),
                                       fallback::degrade);
    }
    static bool variants_differ() { return true; }
};

// default_init_allocator over each family.
template <class Kind>
struct default_init {
    template <class T>
    using alloc = numaplace::default_init_allocator<typename Kind::template alloc<T>>;
    template <class T>
    static alloc<T> make(int variant) { return alloc<T>(Kind::template make<T>(variant)); }
    static bool variants_differ() { return Kind::variants_differ(); }
};

} // namespace kind

template <class Kind>
class allocator_requirements : public ::testing::Test {};

using allocator_kinds =
    ::testing::Types<kind::node_allocator, kind::interleaved_allocator, kind::partitioned_allocator,
                     kind::default_init<kind::node_allocator>, kind::default_init<kind::interleaved_allocator>,
                     kind::default_init<kind::partitioned_allocator>>;
TYPED_TEST_SUITE(allocator_requirements, allocator_kinds);

// --- containers doing real work -------------------------------------------------------------------

TYPED_TEST(allocator_requirements, std_vector_grows_erases_copies_and_moves) {
    using K = TypeParam;
    using A = typename K::template alloc<int>;
    const A a = K::template make<int>(0);
    std::vector<int, A> v(a);
    const int n = 100000; // 400 KB: many pages, several reallocations through small and large sizes
    for (int i = 0; i < n; ++i) v.push_back(i);
    ASSERT_EQ(v.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ASSERT_EQ(v[static_cast<std::size_t>(i)], i);
    EXPECT_TRUE(v.get_allocator() == a);
    // erase every odd value
    v.erase(std::remove_if(v.begin(), v.end(), [](int x) { return x % 2 != 0; }), v.end());
    ASSERT_EQ(v.size(), static_cast<std::size_t>(n / 2));
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<int>(2 * i));
    v.insert(v.begin() + 10, 1000, -1);
    EXPECT_EQ(std::count(v.begin(), v.end(), -1), 1000);
    v.erase(v.begin() + 10, v.begin() + 1010);
    // copy, move, compare
    std::vector<int, A> copy(v);
    EXPECT_TRUE(copy == v);
    EXPECT_TRUE(copy.get_allocator() == v.get_allocator());
    const int* data = copy.data();
    std::vector<int, A> moved(std::move(copy));
    EXPECT_EQ(moved.data(), data); // the pages move with the data
    EXPECT_TRUE(moved == v);
    v.shrink_to_fit();
    EXPECT_TRUE(moved == v);
    v.clear();
    v.shrink_to_fit();
    EXPECT_TRUE(v.empty());
    // a vector of strings: elements with their own allocations (std::allocator) inside placed memory
    using S = typename K::template alloc<std::string>;
    std::vector<std::string, S> s(K::template make<std::string>(0));
    for (int i = 0; i < 2000; ++i) s.emplace_back(text(i));
    std::vector<std::string, S> s2 = s;
    s.erase(s.begin(), s.begin() + 1000);
    ASSERT_EQ(s.size(), 1000u);
    for (int i = 0; i < 1000; ++i) EXPECT_EQ(s[static_cast<std::size_t>(i)], text(i + 1000));
    EXPECT_EQ(s2.size(), 2000u);
}

TYPED_TEST(allocator_requirements, std_deque_grows_at_both_ends_copies_and_moves) {
    using K = TypeParam;
    using A = typename K::template alloc<long>;
    std::deque<long, A> d(K::template make<long>(0));
    const long n = 50000;
    for (long i = 0; i < n; ++i) {
        d.push_back(i);
        d.push_front(-i - 1);
    }
    ASSERT_EQ(d.size(), static_cast<std::size_t>(2 * n));
    for (long i = 0; i < 2 * n; ++i) ASSERT_EQ(d[static_cast<std::size_t>(i)], i - n);
    for (long i = 0; i < n / 2; ++i) {
        d.pop_front();
        d.pop_back();
    }
    d.erase(d.begin() + 100, d.begin() + 200);
    ASSERT_EQ(d.size(), static_cast<std::size_t>(n - 100));
    std::deque<long, A> copy(d);
    EXPECT_TRUE(copy == d);
    std::deque<long, A> moved(std::move(copy));
    EXPECT_TRUE(moved == d);
    d.shrink_to_fit();
    EXPECT_TRUE(moved == d);
}

TYPED_TEST(allocator_requirements, std_list_sorts_and_splices_between_equal_allocators) {
    using K = TypeParam;
    using A = typename K::template alloc<int>;
    const A a = K::template make<int>(0);
    std::list<int, A> l(a);
    const int n = 20000; // 20000 nodes of ~24 bytes: > 100 pages, all from the node pool
    for (int i = 0; i < n; ++i) l.push_back((i * 7919) % n);
    l.sort();
    int expected = 0;
    for (int x : l) ASSERT_EQ(x, expected++);
    l.remove_if([](int x) { return x % 3 == 0; });
    EXPECT_EQ(l.size(), static_cast<std::size_t>(n - (n + 2) / 3));
    std::list<int, A> copy(l);
    EXPECT_TRUE(copy == l);
    std::list<int, A> other(a);
    other.push_back(-1);
    other.splice(other.end(), copy); // equal allocators: nodes change owner
    EXPECT_TRUE(copy.empty());
    EXPECT_EQ(other.size(), l.size() + 1);
    other.pop_front();
    EXPECT_TRUE(other == l);
    std::list<int, A> moved(std::move(other));
    EXPECT_TRUE(moved == l);
}

TYPED_TEST(allocator_requirements, std_map_inserts_erases_copies_and_moves) {
    using K = TypeParam;
    using A = typename K::template alloc<std::pair<const int, std::string>>;
    std::map<int, std::string, std::less<int>, A> m(K::template make<std::pair<const int, std::string>>(0));
    const int n = 10000;
    for (int i = 0; i < n; ++i) m.emplace((i * 7919) % n, text(i));
    ASSERT_EQ(m.size(), static_cast<std::size_t>(n));
    int expected = 0;
    for (const auto& kv : m) ASSERT_EQ(kv.first, expected++);
    for (int i = 0; i < n; i += 2) EXPECT_EQ(m.erase(i), 1u);
    EXPECT_EQ(m.size(), static_cast<std::size_t>(n / 2));
    EXPECT_EQ(m.count(2), 0u);
    EXPECT_EQ(m.count(3), 1u);
    auto copy = m;
    EXPECT_TRUE(copy == m);
    auto moved = std::move(copy);
    EXPECT_TRUE(moved == m);
    moved.clear();
    EXPECT_TRUE(moved.empty());
}

TYPED_TEST(allocator_requirements, std_unordered_map_rehashes_copies_and_moves) {
    using K = TypeParam;
    using V = std::pair<const int, int>;
    using A = typename K::template alloc<V>;
    std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, A> m(16, std::hash<int>(), std::equal_to<int>(),
                                                                          K::template make<V>(0));
    const int n = 50000; // the bucket array alone is > 100 pages: the large path
    for (int i = 0; i < n; ++i) m.emplace(i, i * 3);
    ASSERT_EQ(m.size(), static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ASSERT_EQ(m.at(i), i * 3);
    for (int i = 0; i < n; i += 3) m.erase(i);
    EXPECT_EQ(m.size(), static_cast<std::size_t>(n - (n + 2) / 3));
    auto copy = m;
    EXPECT_TRUE(copy == m);
    auto moved = std::move(copy);
    EXPECT_TRUE(moved == m);
    m.rehash(4 * static_cast<std::size_t>(n));
    EXPECT_TRUE(moved == m);
}

TYPED_TEST(allocator_requirements, std_basic_string_small_medium_and_large) {
    using K = TypeParam;
    using A = typename K::template alloc<char>;
    using string = std::basic_string<char, std::char_traits<char>, A>;
    const A a = K::template make<char>(0);
    string small("sso", a); // fits the small buffer
    string medium(100, 'm', a); // < page: the node pool
    string s(a);
    for (int i = 0; i < 2000; ++i) s += std::to_string(i) + ',';
    ASSERT_GT(s.size(), 2 * page); // the large path
    EXPECT_EQ(s.compare(0, 8, "0,1,2,3,"), 0);
    EXPECT_NE(s.find("1999,"), string::npos);
    const string part(s, 10, 20, a);
    EXPECT_EQ(part.size(), 20u);
    EXPECT_EQ(s.compare(10, 20, part), 0);
    string copy(s);
    EXPECT_TRUE(copy == s);
    copy.erase(0, 4);
    EXPECT_EQ(copy.compare(0, 4, "2,3,"), 0);
    copy.insert(0, "0,1,");
    EXPECT_TRUE(copy == s);
    string moved(std::move(copy));
    EXPECT_TRUE(moved == s);
    moved.append(medium).append(small);
    EXPECT_EQ(moved.size(), s.size() + 103);
    moved.resize(5);
    moved.shrink_to_fit();
    EXPECT_EQ(moved, "0,1,2");
}

// --- propagation on real containers ---------------------------------------------------------------

namespace {
template <class K, class C>
void propagation_on(C a_container_seed, C b_container_seed) {
    using A = typename C::allocator_type;
    C a(std::move(a_container_seed));
    C b(std::move(b_container_seed));
    const A alloc_a = a.get_allocator(), alloc_b = b.get_allocator();
    ASSERT_FALSE(alloc_a == alloc_b);
    const C a_original = a, b_original = b; // copies: select_on_container_copy_construction keeps them
    EXPECT_TRUE(a_original.get_allocator() == alloc_a);
    EXPECT_TRUE(b_original.get_allocator() == alloc_b);
    {
        // copy assignment: the destination keeps its allocator, takes the elements
        C dst = b_original;
        dst = a_original;
        EXPECT_TRUE(dst == a_original);
        EXPECT_TRUE(dst.get_allocator() == alloc_b);
        EXPECT_FALSE(dst.get_allocator() == alloc_a);
    }
    {
        // move assignment: the allocator moves with the data
        C src = a_original;
        C dst = b_original;
        dst = std::move(src);
        EXPECT_TRUE(dst == a_original);
        EXPECT_TRUE(dst.get_allocator() == alloc_a);
    }
    {
        // swap: allocators are exchanged with the data
        C x = a_original;
        C y = b_original;
        x.swap(y);
        EXPECT_TRUE(x == b_original);
        EXPECT_TRUE(y == a_original);
        EXPECT_TRUE(x.get_allocator() == alloc_b);
        EXPECT_TRUE(y.get_allocator() == alloc_a);
        using std::swap;
        swap(x, y);
        EXPECT_TRUE(x.get_allocator() == alloc_a);
        EXPECT_TRUE(x == a_original);
    }
    {
        // copy construction copies the allocator
        C copy(a_original);
        EXPECT_TRUE(copy.get_allocator() == alloc_a);
        C moved(std::move(copy));
        EXPECT_TRUE(moved.get_allocator() == alloc_a);
    }
}
} // namespace

TYPED_TEST(allocator_requirements, copy_assignment_keeps_the_allocator_move_assignment_and_swap_propagate_it) {
    using K = TypeParam;
    if (!K::variants_differ()) GTEST_SKIP() << "one node and no memory binding: no two unequal allocators";
    {
        using A = typename K::template alloc<int>;
        std::vector<int, A> a(K::template make<int>(0)), b(K::template make<int>(1));
        for (int i = 0; i < 5000; ++i) a.push_back(i);
        b.assign(3, 42);
        propagation_on<K>(std::move(a), std::move(b));
        // move assignment and swap of vectors are O(1): the buffer itself changes owner
        std::vector<int, A> x(2000, 1, K::template make<int>(0)), y(K::template make<int>(1));
        const int* buffer = x.data();
        y = std::move(x);
        EXPECT_EQ(y.data(), buffer);
        std::vector<int, A> z(10, 2, K::template make<int>(0));
        const int* zbuffer = z.data();
        y.swap(z);
        EXPECT_EQ(y.data(), zbuffer);
        EXPECT_EQ(z.data(), buffer);
    }
    {
        using A = typename K::template alloc<long>;
        std::deque<long, A> a(K::template make<long>(0)), b(K::template make<long>(1));
        for (long i = 0; i < 3000; ++i) a.push_back(i);
        b.push_back(7);
        propagation_on<K>(std::move(a), std::move(b));
    }
    {
        using A = typename K::template alloc<int>;
        std::list<int, A> a(K::template make<int>(0)), b(K::template make<int>(1));
        for (int i = 0; i < 1000; ++i) a.push_back(i);
        b.push_back(7);
        propagation_on<K>(std::move(a), std::move(b));
    }
    {
        using V = std::pair<const int, std::string>;
        using A = typename K::template alloc<V>;
        std::map<int, std::string, std::less<int>, A> a(K::template make<V>(0)), b(K::template make<V>(1));
        for (int i = 0; i < 1000; ++i) a.emplace(i, text(i));
        b.emplace(-1, "x");
        propagation_on<K>(std::move(a), std::move(b));
    }
    {
        using V = std::pair<const int, int>;
        using A = typename K::template alloc<V>;
        using M = std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, A>;
        M a(8, std::hash<int>(), std::equal_to<int>(), K::template make<V>(0));
        M b(8, std::hash<int>(), std::equal_to<int>(), K::template make<V>(1));
        for (int i = 0; i < 3000; ++i) a.emplace(i, -i);
        b.emplace(1, 1);
        propagation_on<K>(std::move(a), std::move(b));
    }
    {
        using A = typename K::template alloc<char>;
        using string = std::basic_string<char, std::char_traits<char>, A>;
        string a(3 * page, 'a', K::template make<char>(0)), b("short", K::template make<char>(1));
        propagation_on<K>(std::move(a), std::move(b));
        string c(100, 'c', K::template make<char>(0)), d(5000, 'd', K::template make<char>(1));
        propagation_on<K>(std::move(c), std::move(d));
    }
}

// --- equality, rebinding, raw allocate/deallocate -------------------------------------------------

TYPED_TEST(allocator_requirements, equal_allocators_free_each_others_memory_across_rebind) {
    using K = TypeParam;
    using A = typename K::template alloc<int>;
    using D = typename K::template alloc<double>;
    using R = typename std::allocator_traits<A>::template rebind_alloc<std::pair<const int, std::string>>;
    const A a = K::template make<int>(0);
    const A same = K::template make<int>(0);
    EXPECT_TRUE(a == same);
    EXPECT_FALSE(a != same);
    EXPECT_TRUE(A(a) == a); // copy
    const D d(a);           // converting constructor
    EXPECT_TRUE(d == a);
    EXPECT_TRUE(a == d);
    EXPECT_FALSE(d != a);
    EXPECT_TRUE(A(d) == a); // and back
    const R r(d);
    EXPECT_TRUE(r == a);
    EXPECT_TRUE(A(r) == a);
    if (K::variants_differ()) {
        const A other = K::template make<int>(1);
        EXPECT_FALSE(a == other);
        EXPECT_TRUE(a != other);
        EXPECT_FALSE(D(other) == a);
        EXPECT_TRUE(D(other) != a);
        EXPECT_TRUE(D(other) == other);
    }
    // A a(std::move(a1)): a1 keeps its value and equals a (containers use moved-from allocators)
    A source = K::template make<int>(0);
    A target(std::move(source));
    EXPECT_TRUE(source == target);
    EXPECT_TRUE(target == a);
    int* q = source.allocate(3);
    target.deallocate(q, 3);
    A assigned = K::template make<int>(1);
    A source2 = K::template make<int>(0);
    assigned = std::move(source2);
    EXPECT_TRUE(assigned == a);
    EXPECT_TRUE(source2 == a);
    const D converted(std::move(source2)); // converting "move" leaves it too
    EXPECT_TRUE(converted == a);
    EXPECT_TRUE(source2 == a);
    // memory from an allocator is released by any equal one, also of another value type (rebound back)
    D dd(a);
    for (std::size_t n : {std::size_t(1), std::size_t(100), 4 * page}) {
        double* p = dd.allocate(n);
        p[0] = 1.5;
        p[n - 1] = 2.5;
        D(A(dd)).deallocate(p, n);
    }
}

TYPED_TEST(allocator_requirements, allocate_deallocate_round_trip_aligned_and_disjoint) {
    using K = TypeParam;
    using A = typename K::template alloc<std::uint64_t>;
    A a = K::template make<std::uint64_t>(0);
    EXPECT_EQ(a.max_size(), std::numeric_limits<std::size_t>::max() / sizeof(std::uint64_t));
    EXPECT_EQ(std::allocator_traits<A>::max_size(a), a.max_size());
    // allocate(0) is fine and is released by deallocate(p, 0)
    std::uint64_t* zero = nullptr;
    EXPECT_NO_THROW(zero = a.allocate(0));
    a.deallocate(zero, 0);
    // small (below a page: the node pool) and large (a page or more: its own placed mapping)
    const std::size_t per_page = page / sizeof(std::uint64_t);
    for (std::size_t n : {std::size_t(1), std::size_t(2), std::size_t(7), std::size_t(64), per_page - 1, per_page,
                          per_page + 1, 3 * per_page, 100 * per_page + 17, std::size_t(1) << 20}) {
        SCOPED_TRACE("n = " + std::to_string(n));
        std::vector<std::uint64_t*> blocks;
        for (int rep = 0; rep < 3; ++rep) {
            std::uint64_t* p = a.allocate(n);
            ASSERT_NE(p, nullptr);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(std::uint64_t), 0u);
            // A page or more is its own page-aligned mapping, except on one node, where the heap pools
            // blocks up to 1 MiB (aligned to alignof(T) and to the largest power of two dividing their class).
            if (n * sizeof(std::uint64_t) >= page &&
                (!std::is_same<typename A::placement_type, numaplace::on_node>::value ||
                 n * sizeof(std::uint64_t) > numaplace::detail::heap_max_block))
                EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % page, 0u);
            for (std::size_t i = 0; i < n; ++i) p[i] = i * 2654435761u + static_cast<std::size_t>(rep);
            blocks.push_back(p);
        }
        // distinct, non-overlapping, contents intact
        for (std::size_t b = 0; b < blocks.size(); ++b) {
            for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(blocks[b][i], i * 2654435761u + b);
            for (std::size_t c = b + 1; c < blocks.size(); ++c)
                EXPECT_TRUE(blocks[b] + n <= blocks[c] || blocks[c] + n <= blocks[b]);
        }
        for (auto* p : blocks) a.deallocate(p, n);
    }
    // through allocator_traits, as containers use it
    using traits = std::allocator_traits<A>;
    std::uint64_t* p = traits::allocate(a, 10);
    traits::construct(a, p, std::uint64_t(5));
    EXPECT_EQ(*p, 5u);
    traits::destroy(a, p);
    traits::deallocate(a, p, 10);
}

TYPED_TEST(allocator_requirements, allocate_past_max_size_throws_bad_array_new_length) {
    using K = TypeParam;
    auto a = K::template make<int>(0);
    EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
    auto d = K::template make<double>(0);
    EXPECT_THROW((void)d.allocate(d.max_size() + 1), std::bad_array_new_length);
    EXPECT_THROW((void)d.allocate(std::numeric_limits<std::size_t>::max()), std::bad_array_new_length);
    // through a container: vector::reserve past max_size throws length_error, never allocates
    std::vector<double, decltype(d)> v(d);
    EXPECT_THROW(v.reserve(v.max_size() + 1), std::length_error);
}

// --- what differs only where the topology allows it -----------------------------------------------

TEST(allocator_conformance, allocators_on_different_nodes_compare_unequal) {
    const auto& topo = topology::get();
    // policy and fallback are part of the placement on any topology
    EXPECT_FALSE(node_allocator<int>(0) == node_allocator<int>(0, node_policy::prefer));
    EXPECT_FALSE(node_allocator<int>(0) == node_allocator<double>(0, node_policy::bind, fallback::degrade));
    EXPECT_FALSE(interleaved_allocator<int>(numaplace::interleaved(fallback::strict)) ==
                 interleaved_allocator<int>(numaplace::interleaved(fallback::degrade)));
    // the allocator splits every allocation by the layout: the size it was made with does not matter
    EXPECT_TRUE(partitioned_allocator<int>(numaplace::partition<int>(1000)) ==
                partitioned_allocator<int>(numaplace::partition<int>(1001)));
    EXPECT_FALSE(partitioned_allocator<int>(numaplace::partition<int>(1000)) ==
                 partitioned_allocator<int>(numaplace::partition<int>(1000), fallback::degrade));
    EXPECT_FALSE(partitioned_allocator<int>(numaplace::partition<int>(1000)) ==
                 partitioned_allocator<int>(numaplace::partition<int>::rows(10, 100)));
    EXPECT_TRUE(partitioned_allocator<int>(numaplace::partition<int>(1000)) ==
                partitioned_allocator<double>(partitioned_allocator<int>(numaplace::partition<int>(1000))));
    if (topo.size() < 2) GTEST_SKIP() << "one node: no two nodes to compare";
    for (int j = 0; j < static_cast<int>(topo.size()); ++j)
        for (int k = 0; k < static_cast<int>(topo.size()); ++k) {
            EXPECT_EQ(node_allocator<int>(j) == node_allocator<int>(k), j == k) << j << ' ' << k;
            EXPECT_EQ(node_allocator<int>(j) == node_allocator<char>(k), j == k) << j << ' ' << k;
            EXPECT_EQ(interleaved_allocator<int>(node_set{j}) == interleaved_allocator<long>(node_set{k}), j == k);
        }
    EXPECT_FALSE(interleaved_allocator<int>(node_set{0}) == interleaved_allocator<int>(topo.all()));
    EXPECT_FALSE(interleaved_allocator<int>(node_set{0, 1}) ==
                 interleaved_allocator<int>(node_set{0, 1}, std::vector<std::size_t>{2, 1}));
    EXPECT_TRUE(interleaved_allocator<int>(node_set{0, 1}) ==
                interleaved_allocator<int>(node_set{0, 1}, std::vector<std::size_t>{3, 3})); // reduced: uniform
    EXPECT_FALSE(partitioned_allocator<int>(numaplace::partition<int>(1000, node_set{0}, {})) ==
                 partitioned_allocator<int>(numaplace::partition<int>(1000, node_set{1}, {})));
    // and containers on different nodes hold their own placement through copy assignment
    std::vector<int, node_allocator<int>> on0(1000, 1, node_allocator<int>(0)), on1(node_allocator<int>(1));
    on1 = on0;
    EXPECT_TRUE(on1.get_allocator() == node_allocator<int>(1));
    EXPECT_TRUE(on1 == on0);
}

TEST(allocator_conformance, default_init_allocator_converts_and_compares_like_its_base) {
    using B = node_allocator<int>;
    using DI = default_init_allocator<B>;
    const B base(0);
    const DI di(base);
    EXPECT_TRUE(di == base);
    EXPECT_TRUE(base == di);
    const default_init_allocator<node_allocator<double>> rebound(di);
    EXPECT_TRUE(rebound == di);
    EXPECT_TRUE(DI(rebound) == base);
    const DI from_placement(on_node(0));
    EXPECT_TRUE(from_placement == base);
    const DI from_id(0);
    EXPECT_TRUE(from_id == base);
    const DI copy = std::allocator_traits<DI>::select_on_container_copy_construction(di);
    EXPECT_TRUE(copy == di);
    EXPECT_FALSE(DI(on_node(0, node_policy::prefer)) == di);
}

TEST(allocator_conformance, default_init_allocator_still_constructs_with_arguments) {
    using DI = default_init_allocator<node_allocator<std::string>>;
    std::vector<std::string, DI> v(DI(0));
    for (int i = 0; i < 1000; ++i) v.emplace_back(text(i));
    v.resize(1100); // class types: default-initialisation still runs the constructor
    EXPECT_EQ(v[999], text(999));
    EXPECT_TRUE(v[1050].empty());
    std::vector<int, default_init_allocator<node_allocator<int>>> w(default_init_allocator<node_allocator<int>>(0));
    w.assign(5000, 7);
    w.resize(6000, 9);
    EXPECT_EQ(std::count(w.begin(), w.end(), 7), 5000);
    EXPECT_EQ(std::count(w.begin(), w.end(), 9), 1000);
    w.insert(w.begin(), 3, 1);
    EXPECT_EQ(w[0], 1);
    EXPECT_EQ(w[3], 7);
}

// --- default-init leaves pages untouched, value-init touches them --------------------------------

TEST(allocator_conformance, default_init_vector_leaves_pages_untouched) {
    if (!query_works()) GTEST_SKIP() << "move_pages query refused: where() cannot report";
    const auto& topo = topology::get();
    const std::size_t n = 1000000;
    for (const auto& node : topo.nodes()) {
        SCOPED_TRACE("node " + std::to_string(node.id));
        // A block reused from the heap keeps the pages its previous user touched (on its node): give
        // them back first, so that this one is new memory, which the allocator itself never touches.
        numaplace::release_cached_memory();
        const node_allocator<int> a(on_node(node.id, node_policy::bind, binding_fallback()));
        std::vector<int, default_init_allocator<node_allocator<int>>> lazy(n, a);
        ASSERT_EQ(lazy.size(), n);
        const auto h = numaplace::where(lazy);
        EXPECT_EQ(h.pages, (n * sizeof(int) + page - 1) / page);
        EXPECT_EQ(h.untouched, h.pages);

        std::vector<int, node_allocator<int>> eager(n, a); // value-initialised: zero-filled, touched
        const auto e = numaplace::where(eager);
        EXPECT_EQ(e.untouched, 0u);
        EXPECT_EQ(e.touched(), e.pages);
        if (binding_works()) EXPECT_EQ(e.on(node.id), e.pages);
        EXPECT_EQ(std::count(eager.begin(), eager.end(), 0), static_cast<std::ptrdiff_t>(n));

        // writing the lazy vector faults its pages in on the node
        std::fill(lazy.begin(), lazy.end(), 3);
        const auto after = numaplace::where(lazy);
        EXPECT_EQ(after.untouched, 0u);
        if (binding_works()) EXPECT_EQ(after.on(node.id), after.pages);
    }
}


TEST(allocator_conformance, partitioned_vector_leaves_pages_untouched_and_binds_blocks) {
    if (!query_works()) GTEST_SKIP() << "move_pages query refused: where() cannot report";
    const std::size_t n = 1000000;
    const numaplace::partition<double> part(n);
    numaplace::partitioned_vector<double> v(n, partitioned_allocator<double>(part, binding_fallback()));
    const auto h = numaplace::where(v);
    EXPECT_EQ(h.untouched, h.pages);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % part.alignment(), 0u) << "an allocation starts on a grain";
    std::fill(v.begin(), v.end(), 1.0);
    EXPECT_EQ(numaplace::where(v.data(), part).histogram.untouched, 0u);
    // bound: each grain on the node of the block holding its first byte, exact per node, at most one
    // shared grain per edge
    if (binding_works()) numaplace_test::expect_pages_on_their_owners(v.data(), part, "1000000 doubles, alignment " + std::to_string(part.alignment()));
}

TEST(allocator_conformance, interleaved_vector_spreads_pages_evenly) {
    if (!query_works()) GTEST_SKIP() << "move_pages query refused: where() cannot report";
    if (!binding_works()) GTEST_SKIP() << "memory binding refused: interleave degrades to first touch";
    const auto& topo = topology::get();
    const std::size_t pages = 64 * topo.size() + 3;
    std::vector<char, interleaved_allocator<char>> v(pages * page, 1, interleaved_allocator<char>(topo.all()));
    const auto h = numaplace::where(v);
    ASSERT_EQ(h.pages, pages);
    EXPECT_EQ(h.untouched, 0u);
    const std::size_t lo = pages / topo.size(), hi = (pages + topo.size() - 1) / topo.size();
    std::size_t sum = 0;
    for (const auto& node : topo.nodes()) {
        EXPECT_GE(h.on(node.id), lo) << "node " << node.id;
        EXPECT_LE(h.on(node.id), hi) << "node " << node.id;
        sum += h.on(node.id);
    }
    EXPECT_EQ(sum, pages);
}

// --- value semantics: moved-from allocators and placements, and libstdc++'s node-handle drop ---------

namespace {
template <class A>
void expect_moved_from_equals_source(const A& original) {
    A source = original;
    A moved(std::move(source));
    EXPECT_TRUE(source == original); // NOLINT(bugprone-use-after-move): the point of the test
    EXPECT_TRUE(moved == original);
    A assigned = original;
    assigned = std::move(moved);
    EXPECT_TRUE(moved == original); // NOLINT
    // and the moved-from one still allocates and frees (observers and placement intact)
    auto* p = source.allocate(3 * page);
    source.deallocate(p, 3 * page);
    auto* q = source.allocate(3);
    source.deallocate(q, 3);
    EXPECT_NO_THROW((void)source.placement().home_node());
}
} // namespace

TEST(allocator_conformance, moved_from_allocators_and_placements_are_valid_and_equal_to_their_source) {
    const fallback fb = binding_fallback();
    expect_moved_from_equals_source(node_allocator<double>(0, node_policy::bind, fb));
    expect_moved_from_equals_source(interleaved_allocator<double>(numaplace::interleaved(topology::get().all(), {}, fb)));
    expect_moved_from_equals_source(
        numaplace::allocator<double, numaplace::preferred_many>(numaplace::preferred_many(topology::get().all(), fallback::degrade)));
    expect_moved_from_equals_source(partitioned_allocator<double>(numaplace::partition<double>(1000), fb));
    expect_moved_from_equals_source(partitioned_allocator<double>());
    expect_moved_from_equals_source(default_init_allocator<partitioned_allocator<double>>(partitioned_allocator<double>()));
    // placements: observers after a move
    numaplace::interleaved il(topology::get().all(), std::vector<std::size_t>(topology::get().size(), 2));
    numaplace::interleaved il2(std::move(il));
    EXPECT_EQ(il.nodes(), topology::get().all()); // NOLINT
    EXPECT_EQ(il, il2);
    numaplace::preferred_many pm(topology::get().all());
    numaplace::preferred_many pm2(std::move(pm));
    EXPECT_EQ(pm.home_node(), 0); // NOLINT
    EXPECT_EQ(pm, pm2);
    numaplace::partitioned pt(numaplace::partition<int>(100));
    numaplace::partitioned pt2(std::move(pt));
    EXPECT_EQ(pt.partition().nodes(), topology::get().with_cpus()); // NOLINT
    EXPECT_EQ(pt.alignment(1 << 20), pt2.alignment(1 << 20));
    EXPECT_EQ(pt, pt2);
}

TEST(allocator_conformance, reinserted_node_handles_and_merged_maps_leak_nothing) {
    // libstdc++ 12 drops (without destroying) the allocator copy a node handle holds when the node is
    // re-inserted or maps are merged. numaplace allocators are trivially destructible handles, so
    // nothing leaks: this test runs under LeakSanitizer in the ASan stage.
    using A = interleaved_allocator<std::pair<const int, int>>;
    using map = std::map<int, int, std::less<int>, A>;
    const A a(numaplace::interleaved(topology::get().all(), {}, fallback::degrade));
    map m(a), other(a);
    for (int i = 0; i < 100; ++i) m.emplace(i, i);
    for (int i = 0; i < 100; ++i) {
        auto node = m.extract(i);
        ASSERT_FALSE(node.empty());
        EXPECT_TRUE(node.get_allocator() == a);
        node.mapped() += 1;
        auto r = other.insert(std::move(node));
        ASSERT_TRUE(r.inserted);
    }
    EXPECT_TRUE(m.empty());
    ASSERT_EQ(other.size(), 100u);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(other.at(i), i + 1);
    map third(a);
    for (int i = 100; i < 150; ++i) third.emplace(i, i);
    other.merge(third);
    EXPECT_TRUE(third.empty());
    EXPECT_EQ(other.size(), 150u);
    // the same with partitioned and node allocators, and an unordered_map
    using P = partitioned_allocator<std::pair<const int, int>>;
    std::map<int, int, std::less<int>, P> pm{P()}, pm2{P()};
    for (int i = 0; i < 100; ++i) pm.emplace(i, i);
    for (int i = 0; i < 100; ++i) pm2.insert(pm.extract(i));
    EXPECT_EQ(pm2.size(), 100u);
    using N = node_allocator<std::pair<const int, int>>;
    std::unordered_map<int, int, std::hash<int>, std::equal_to<int>, N> um{8, std::hash<int>(), std::equal_to<int>(), N(0)};
    decltype(um) um2{8, std::hash<int>(), std::equal_to<int>(), N(0)};
    for (int i = 0; i < 100; ++i) um.emplace(i, i);
    um2.merge(um);
    EXPECT_EQ(um2.size(), 100u);
}
