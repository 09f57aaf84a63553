// compared_placement.hpp (linked into test_observe: no binary, no guest boot of its own). Suite
// compared_placement: names, each placement's pages by where() (on the host and in every guest layout);
// compared_placement_attack: bad and duplicate names, unknown nodes, placed_array's sizes from 0 to
// SIZE_MAX, moved-from values. Arrays are a few pages, small pages (exact page counts), well under 1 s.
#include <numaplace/compared_placement.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <sched.h>

namespace {

using namespace numaplace;

std::size_t page() { return detail::page_size(); }

// The last node with CPUs: node 1 (2node), 3 (4node), 0 on one node, in restricted and memonly as hwloc numbers them.
int last_cpu_node() {
    int last = 0;
    for (int id : topology::get().with_cpus()) last = id;
    return last;
}

// Runs f on a thread bound to the CPUs of `node`. \returns whether that thread ran on `node`.
bool on_cpus_of(int node, const std::function<void()>& f) {
    bool there = false;
    std::thread([&] {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (unsigned c : topology::get().at(node).cpus) CPU_SET(c, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) return;
        f();
        there = topology::get().current_node() == node;
    }).join();
    return there;
}

// Pages of [begin, end) elements of an array at a page boundary: its pages, none shared with another block.
template <class T>
std::size_t pages_of(std::size_t begin, std::size_t end) {
    return begin == end ? 0 : (detail::round_up(end * sizeof(T), page()) - begin * sizeof(T) / page() * page()) / page();
}

// Pages per node id that `layout`'s blocks must have: the pages each block owns in the array (a grain
// belongs to the block holding its first byte: basic_partition::page_bytes).
template <class T>
std::vector<std::size_t> expected_pages(const partition<T>& layout) {
    std::vector<std::size_t> per(topology::get().size(), 0);
    const basic_partition& e = layout.untyped();
    for (std::size_t k = 0; k < e.block_count(); ++k) {
        const auto range = e.page_bytes(k, layout.element_count() * sizeof(T));
        per[static_cast<std::size_t>(e.nodes()[k])] += (range.second - range.first) / page();
    }
    return per;
}

std::vector<std::size_t> all_on(int node, std::size_t pages) {
    std::vector<std::size_t> per(topology::get().size(), 0);
    per[static_cast<std::size_t>(node)] = pages;
    return per;
}

// 32 small pages per node with CPUs, small-page edges: every node gets a block.
partition<double> small_layout() {
    const std::size_t per_page = page() / sizeof(double);
    return partition<double>(32 * per_page * topology::get().with_cpus().size(), topology::get().with_cpus(), {},
                             edge_alignment::page);
}

const char* const name_rule = "' must be non-empty letters, digits, '_', '-' or '.' (it becomes a benchmark argument)";

TEST(compared_placement, names_kinds_and_binding) {
    const std::vector<compared_placement> standard = standard_placements();
    const char* const names[] = {"node_local", "interleaved", "serial_first_touch", "partitioned", "partitioned_huge"};
    const compared_kind kinds[] = {compared_kind::node_local, compared_kind::interleaved, compared_kind::serial_first_touch,
                                   compared_kind::partitioned, compared_kind::partitioned_huge};
    ASSERT_EQ(standard.size(), 5u);
    for (std::size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(standard[i].name(), names[i]);
        EXPECT_EQ(standard[i].kind(), kinds[i]);
        EXPECT_EQ(standard[i].node(), i == 0 ? 0 : -1);
        EXPECT_EQ(standard[i].bound(), kinds[i] != compared_kind::serial_first_touch);
    }
    EXPECT_EQ(compared_placement::first_touch().name(), "first_touch");
    EXPECT_FALSE(compared_placement::first_touch().bound());
    const int last = static_cast<int>(topology::get().size()) - 1;
    EXPECT_EQ(compared_placement::node_local(last).name(), last == 0 ? "node_local" : "node" + std::to_string(last));
    EXPECT_EQ(compared_placement::node_local(last).node(), last);
    EXPECT_EQ(compared_placement::node_local(0, "A-z_0.9").name(), "A-z_0.9"); // every class of character allowed
    const compared_placement mine = compared_placement::custom("mine", on_node(0));
    EXPECT_EQ(mine.kind(), compared_kind::custom);
    EXPECT_TRUE(mine.bound());
    EXPECT_EQ(mine.node(), -1);
}

// node_local: every page on its node, whoever touches; nothing faulted in by the constructor.
TEST(compared_placement, node_local_pages_on_the_node) {
    const int node = static_cast<int>(topology::get().size()) - 1; // memonly: the memory-only node 2
    const partition<double> part = small_layout();
    placed_array<double> a(compared_placement::node_local(node), part, page_choice::small);
    const std::size_t pages = pages_of<double>(0, a.size());
    EXPECT_EQ(where(a.data(), a.bytes()).untouched, pages);
    memory::touch(a.data(), a.bytes());
    const page_histogram h = where(a.data(), a.bytes());
    EXPECT_EQ(h.pages, pages);
    EXPECT_EQ(h.per_node, all_on(node, pages));
}

// interleaved: pages round robin over every node (memory-only ones too): no node has more than one page
// more than another.
TEST(compared_placement, interleaved_pages_round_robin) {
    placed_array<double> a(compared_placement::interleaved(), small_layout(), page_choice::small);
    memory::touch(a.data(), a.bytes());
    const page_histogram h = where(a.data(), a.bytes());
    const std::size_t nodes = topology::get().size(), pages = pages_of<double>(0, a.size());
    ASSERT_EQ(h.per_node.size(), nodes);
    EXPECT_EQ(h.untouched, 0u);
    for (std::size_t k = 0; k < nodes; ++k) {
        EXPECT_GE(h.per_node[k], pages / nodes) << "node " << k;
        EXPECT_LE(h.per_node[k], (pages + nodes - 1) / nodes) << "node " << k;
    }
}

// serial_first_touch: every page faulted in by the constructor, on the constructing thread's node.
TEST(compared_placement, serial_first_touch_pages_where_the_constructor_ran) {
    const int node = last_cpu_node();
    const partition<double> part = small_layout();
    std::vector<std::size_t> per;
    std::size_t untouched = 1;
    ASSERT_TRUE(on_cpus_of(node, [&] {
        placed_array<double> a(compared_placement::serial_first_touch(), part, page_choice::small);
        const page_histogram h = where(a.data(), a.bytes());
        per = h.per_node;
        untouched = h.untouched;
    }));
    EXPECT_EQ(untouched, 0u);
    EXPECT_EQ(per, all_on(node, pages_of<double>(0, part.element_count())));
}

// first_touch: nothing faulted in; the user's initialisation decides.
TEST(compared_placement, first_touch_pages_where_the_initialisation_ran) {
    const int node = last_cpu_node();
    placed_array<double> a(compared_placement::first_touch(), small_layout(), page_choice::small);
    const std::size_t pages = pages_of<double>(0, a.size());
    EXPECT_EQ(where(a.data(), a.bytes()).untouched, pages);
    ASSERT_TRUE(on_cpus_of(node, [&] { memory::touch(a.data(), a.bytes()); }));
    EXPECT_EQ(where(a.data(), a.bytes()).per_node, all_on(node, pages));
}

// partitioned: block k's pages on node k whoever touches them (here the test's thread, wherever it runs).
TEST(compared_placement, partitioned_pages_by_block) {
    const partition<double> part = small_layout();
    placed_array<double> a(compared_placement::partitioned(), part, page_choice::small);
    EXPECT_EQ(a.layout(), part);
    EXPECT_EQ(a.locality().histogram.untouched, pages_of<double>(0, a.size()));
    memory::touch(a.data(), a.bytes());
    const partition_locality l = a.locality();
    EXPECT_EQ(l.histogram.per_node, expected_pages(part));
    EXPECT_EQ(l.remote, 0u);
    EXPECT_EQ(l.local, pages_of<double>(0, a.size()));
}

// partitioned_huge: the same split with huge-page edges (what the array is placed and checked by).
TEST(compared_placement, partitioned_huge_pages_by_huge_edged_block) {
    const std::size_t huge = page_geometry::of(topology::get()).huge;
    const std::size_t n = 2 * huge / sizeof(double) * topology::get().with_cpus().size();
    const partition<double> part(n, topology::get().with_cpus(), {}, edge_alignment::page);
    placed_array<double> a(compared_placement::partitioned_huge(), part, page_choice::small);
    EXPECT_EQ(a.layout().edge_policy(), edge_alignment::huge);
    EXPECT_EQ(a.layout().size(), part.size());
    EXPECT_EQ(a.layout().nodes(), part.nodes());
    EXPECT_EQ(a.size(), n);
    memory::touch(a.data(), a.bytes());
    const partition_locality l = a.locality();
    EXPECT_EQ(l.histogram.per_node, expected_pages(a.layout()));
    EXPECT_EQ(l.remote, 0u);
}

// A user's own placement value: allocated through it (here: everything on the last node, strict).
TEST(compared_placement, custom_placement_value) {
    const int node = static_cast<int>(topology::get().size()) - 1;
    placed_array<double> a(compared_placement::custom("mine", on_node(node)), small_layout(), page_choice::small);
    EXPECT_EQ(a.placement().name(), "mine");
    memory::touch(a.data(), a.bytes());
    EXPECT_EQ(where(a.data(), a.bytes()).per_node, all_on(node, pages_of<double>(0, a.size())));
}

TEST(compared_placement_attack, bad_names_refused_with_the_name) {
    for (const std::string& bad : {std::string(), std::string("a b"), std::string("a/b"), std::string("a:b"),
                                  std::string("x\n"), std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
        // node_local takes "" for its default name: it is given "a b" instead
        const std::string node_bad = bad.empty() ? "a b" : bad;
        const std::function<compared_placement()> makers[] = {
            [&] { return compared_placement::node_local(0, node_bad); },
            [&] { return compared_placement::interleaved(bad); },
            [&] { return compared_placement::serial_first_touch(bad); },
            [&] { return compared_placement::first_touch(bad); },
            [&] { return compared_placement::partitioned(bad); },
            [&] { return compared_placement::partitioned_huge(bad); },
            [&] { return compared_placement::custom(bad, on_node(0)); }};
        for (std::size_t m = 0; m < std::size(makers); ++m) {
            const std::string& named = m == 0 ? node_bad : bad;
            try {
                makers[m]();
                ADD_FAILURE() << "maker " << m << " accepted '" << named << "'";
            } catch (const invalid_placement& e) { // what() ends at a '\0' of the name
                const std::string full = "numaplace: compared_placement: name '" + named + name_rule;
                EXPECT_EQ(e.what(), full.substr(0, full.find('\0')));
            }
        }
    }
    EXPECT_EQ(compared_placement::node_local(0, "").name(), "node_local"); // empty: the default name, not refused
}

TEST(compared_placement_attack, duplicate_names_refused) {
    try {
        detail::check_distinct_names({compared_placement::interleaved(), compared_placement::node_local(0),
                                      compared_placement::partitioned("interleaved")},
                                     "register_placements");
        ADD_FAILURE() << "two placements named 'interleaved' accepted";
    } catch (const invalid_placement& e) {
        EXPECT_STREQ(e.what(), "numaplace: register_placements: two placements named 'interleaved'");
    }
    EXPECT_NO_THROW(detail::check_distinct_names(standard_placements(), "register_placements"));
    EXPECT_NO_THROW(detail::check_distinct_names({compared_placement::interleaved("a"), compared_placement::interleaved("A")},
                                                 "register_placements")); // names are case-sensitive
    EXPECT_NO_THROW(detail::check_distinct_names({}, "register_placements"));
}

TEST(compared_placement_attack, unknown_node_refused_at_once) {
    for (int bad : {-1, static_cast<int>(topology::get().size())}) {
        try {
            compared_placement::node_local(bad);
            ADD_FAILURE() << "node " << bad << " accepted";
        } catch (const unknown_node& e) {
            EXPECT_EQ(e.node(), bad);
            EXPECT_EQ(e.node_count(), topology::get().size());
        }
    }
}

// Sizes at the edges: 0 elements (one page mapped, none spanned), 1, page - 1 bytes, a page, a page + 1.
TEST(compared_placement_attack, placed_array_small_sizes) {
    std::vector<compared_placement> kinds = standard_placements();
    kinds.push_back(compared_placement::first_touch());
    for (const std::size_t n : {std::size_t(0), std::size_t(1), page() - 1, page(), page() + 1}) {
        const partition<char> part(n, topology::get().with_cpus(), {}, edge_alignment::page);
        for (const compared_placement& how : kinds) {
            placed_array<char> a(how, part, page_choice::small);
            ASSERT_NE(a.data(), nullptr) << how.name() << " n " << n;
            EXPECT_EQ(a.size(), n);
            EXPECT_EQ(a.bytes(), n);
            memory::touch(a.data(), a.bytes());
            const partition_locality l = a.locality();
            const std::size_t pages = n == 0 ? 0 : (n + page() - 1) / page();
            EXPECT_EQ(l.histogram.pages, pages) << how.name() << " n " << n;
            EXPECT_EQ(l.histogram.touched(), pages) << how.name() << " n " << n;
            if (how.kind() == compared_kind::partitioned || how.kind() == compared_kind::partitioned_huge)
                EXPECT_EQ(l.histogram.per_node, expected_pages(a.layout())) << how.name() << " n " << n;
            if (how.kind() == compared_kind::node_local) EXPECT_EQ(l.histogram.per_node, all_on(0, pages));
        }
    }
}

// SIZE_MAX - k bytes: no mapping can hold them. Rounding to pages overflows (k < page - 1) or the kernel
// refuses: placement_error, ENOMEM, the size asked for. More than SIZE_MAX bytes of elements: the
// partition refuses first (invalid_placement), so no placed_array ever sees a byte count that overflows.
TEST(compared_placement_attack, placed_array_sizes_near_size_max) {
    std::vector<compared_placement> kinds = standard_placements();
    kinds.push_back(compared_placement::first_touch());
    kinds.push_back(compared_placement::custom("mine", on_node(0)));
    // the node the error names: the placement's one node, -1 for several (or none: unbound)
    const topology& topo = topology::get();
    const int interleaved_node = topo.size() == 1 ? 0 : -1;
    const int partitioned_node = topo.with_cpus().size() == 1 ? topo.with_cpus()[0] : -1;
    auto node_named = [&](const compared_placement& how) {
        switch (how.kind()) {
        case compared_kind::node_local:
        case compared_kind::custom: return 0;
        case compared_kind::interleaved: return interleaved_node;
        case compared_kind::partitioned:
        case compared_kind::partitioned_huge: return partitioned_node;
        default: return -1;
        }
    };
    for (const std::size_t k : {std::size_t(0), std::size_t(1), page() - 1, page(), 4 * page() + 3}) {
        const partition<char> part(SIZE_MAX - k, topology::get().with_cpus(), {}, edge_alignment::page);
        for (const compared_placement& how : kinds) {
            try {
                placed_array<char> a(how, part);
                ADD_FAILURE() << how.name() << ": " << SIZE_MAX - k << " bytes placed";
            } catch (const placement_error& e) {
                EXPECT_EQ(e.error_number(), ENOMEM) << how.name() << " k " << k;
                EXPECT_EQ(e.bytes(), SIZE_MAX - k) << how.name() << " k " << k;
                EXPECT_EQ(e.node(), node_named(how)) << how.name();
            }
        }
    }
    EXPECT_THROW(partition<double>(SIZE_MAX / sizeof(double) + 1), invalid_placement);
    EXPECT_THROW(partition<double>::rows(SIZE_MAX / sizeof(double) / 2 + 1, 2), invalid_placement);
    const partition<double> most(SIZE_MAX / sizeof(double), topology::get().with_cpus(), {}, edge_alignment::page);
    EXPECT_THROW(placed_array<double>(compared_placement::partitioned(), most), placement_error);
}

// A moved-from placement keeps its name and still allocates (moves copy); assigning to it works.
TEST(compared_placement_attack, moved_from_placements_stay_whole) {
    compared_placement mine = compared_placement::custom("mine", on_node(0));
    const compared_placement moved(std::move(mine));
    EXPECT_EQ(mine.name(), "mine"); // NOLINT(bugprone-use-after-move): valid, equal to its source
    EXPECT_EQ(mine.kind(), compared_kind::custom);
    EXPECT_EQ(moved.name(), "mine");
    {
        placed_array<double> a(mine, small_layout(), page_choice::small);
        memory::touch(a.data(), a.bytes());
        EXPECT_EQ(where(a.data(), a.bytes()).per_node, all_on(0, pages_of<double>(0, a.size())));
    }
    compared_placement other = compared_placement::partitioned();
    compared_placement taken = std::move(other);
    other = std::move(mine);
    EXPECT_EQ(other.name(), "mine");
    EXPECT_EQ(taken.name(), "partitioned");
    // placed_array holds mapped memory in place (benchmark.hpp keeps it by unique_ptr): neither copied nor moved.
    static_assert(!std::is_copy_constructible<placed_array<double>>::value, "");
    static_assert(!std::is_move_constructible<placed_array<double>>::value, "");
    static_assert(!std::is_move_assignable<placed_array<double>>::value, "");
}

} // namespace
