// tiers.hpp, memory_attribute.hpp and report.hpp's tier table: every argument at its boundaries, every
// default-constructed or moved-from value's answers, and the table numaplace-info prints fed synthetic
// tiers (memory_tiers::from_values): every node shows its own bandwidth and latency, whatever the
// combination. Linked into test_topology (a binary of its own would cost a guest boot per layout).
#include <numaplace/diagnostics.hpp>
#include <numaplace/detail/memory_attribute_hwloc.hpp>
#include <numaplace/memory_attribute.hpp>
#include <numaplace/report.hpp>
#include <numaplace/tiers.hpp>
#include <numaplace/topology.hpp>

#include <hwloc.h> // calls hwloc on topology::native(): numaplace's headers declare hwloc's types only

#include <gtest/gtest.h>

#include <expect.hpp>

#include <climits>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using numaplace::memory_attribute;
using numaplace::memory_tier_table;
using numaplace::memory_tiers;
using numaplace::node_set;
using numaplace::topology;
using numaplace_test::expect_invalid;
using numaplace_test::expect_unknown_node;

namespace {
using values = std::vector<std::optional<std::uint64_t>>;
const std::optional<std::uint64_t> none;

const memory_attribute outside[] = {static_cast<memory_attribute>(6), static_cast<memory_attribute>(-1),
                                    static_cast<memory_attribute>(INT_MAX), static_cast<memory_attribute>(INT_MIN)};

// The text numaplace-info prints after "memory tiers from node N: " for these values from node 0.
std::string line(const values& bandwidth, const values& latency) {
    std::ostringstream os;
    numaplace::print_tier_table(os, numaplace::tier_table(memory_tiers::from_values(0, memory_attribute::bandwidth, bandwidth),
                                                          memory_tiers::from_values(0, memory_attribute::latency, latency)));
    return os.str();
}

// Runs `f`, which must throw invalid_placement, and not its memory_attributes_unknown subclass.
template <class F>
void expect_plain_invalid(F f, const char* word, const char* what) {
    SCOPED_TRACE(what);
    try {
        f();
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::memory_attributes_unknown& e) {
        ADD_FAILURE() << "memory_attributes_unknown: " << e.what();
    } catch (const numaplace::invalid_placement& e) {
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
}
} // namespace

TEST(memory_attribute, values_outside_the_enumerators_are_named_invalid_and_never_read_past_a_table) {
    for (auto a : {memory_attribute::bandwidth, memory_attribute::read_bandwidth, memory_attribute::write_bandwidth,
                   memory_attribute::latency, memory_attribute::read_latency, memory_attribute::write_latency}) {
        EXPECT_TRUE(numaplace::is_valid(a));
        EXPECT_STRNE(numaplace::name(a), "?");
    }
    static_assert(numaplace::is_valid(memory_attribute::write_latency) && !numaplace::is_valid(static_cast<memory_attribute>(6)), "");
    const topology& topo = topology::get();
    const int first = topo.with_cpus()[0];
    for (auto a : outside) {
        const std::string value = std::to_string(static_cast<int>(a));
        SCOPED_TRACE(value);
        EXPECT_FALSE(numaplace::is_valid(a));
        EXPECT_STREQ(numaplace::name(a), "?");
        EXPECT_FALSE(numaplace::higher_is_better(a));
        // the hwloc reader: nothing (it indexed its table with the value: ASan/UBSan)
        EXPECT_FALSE(numaplace::detail::hwloc_memory_attribute(topo.native(), a, 0, static_cast<unsigned>(first)).has_value());
        // the attribute is checked before the nodes: an unknown node does not hide it
        for (int node : {first, -1}) {
            expect_invalid([&] { (void)topo.memory_attribute_value(a, node, node); }, "attribute " + value + " is none",
                           "memory_attribute_value");
            expect_invalid([&] { (void)memory_tiers::of(node, a, topo); }, "attribute " + value + " is none", "of");
        }
        expect_invalid([&] { (void)memory_tiers::from_values(0, a, values{1}); }, "attribute " + value + " is none", "from_values");
        // an error naming it does not read past a table either
        EXPECT_NE(std::string(numaplace::memory_attributes_unknown(first, a).what()).find("no ? from node"), std::string::npos);
    }
}

TEST(tiers, initiators_at_their_boundaries) {
    const topology& topo = topology::get();
    const int n = static_cast<int>(topo.size());
    for (int bad : {-1, n, INT_MAX, INT_MIN}) expect_unknown_node([&] { (void)memory_tiers::of(bad); }, bad, "of");
    const node_set with_cpus = topo.with_cpus();
    for (int id : {with_cpus[0], with_cpus[with_cpus.size() - 1]}) EXPECT_EQ(memory_tiers::of(id).initiator(), id);
    for (const auto& node : topo.nodes())
        if (!node.has_cpus()) expect_invalid([&] { (void)memory_tiers::of(node.id); }, "no CPUs", "a memory-only initiator");
    // from_values: the initiator must index the values
    for (int bad : {-1, 3, INT_MAX}) {
        try {
            (void)memory_tiers::from_values(bad, memory_attribute::bandwidth, values{1, 2, 3});
            ADD_FAILURE() << bad;
        } catch (const numaplace::unknown_node& e) {
            EXPECT_EQ(e.node(), bad);
            EXPECT_EQ(e.node_count(), 3u);
        }
    }
    EXPECT_THROW((void)memory_tiers::from_values(0, memory_attribute::latency, values{}), numaplace::unknown_node);
    const memory_tiers last = memory_tiers::from_values(2, memory_attribute::latency, values{none, none, 7});
    EXPECT_EQ(last.initiator(), 2);
    ASSERT_EQ(last.tiers().size(), 1u);
    EXPECT_EQ(last.tiers()[0].nodes, node_set{2});
    EXPECT_EQ(last.unknown(), (node_set{0, 1}));
}

TEST(tiers, from_values_groups_equal_values_best_first_with_extreme_values) {
    const std::uint64_t top = UINT64_MAX;
    const memory_tiers bw = memory_tiers::from_values(1, memory_attribute::bandwidth, values{0, top, none, top - 1, 0, top});
    ASSERT_EQ(bw.tiers().size(), 3u);
    EXPECT_EQ(bw.tiers()[0].nodes, (node_set{1, 5}));
    EXPECT_EQ(bw.tiers()[0].value, top);
    EXPECT_EQ(bw.tiers()[1].nodes, node_set{3});
    EXPECT_EQ(bw.tiers()[1].value, top - 1);
    EXPECT_EQ(bw.tiers()[2].nodes, (node_set{0, 4}));
    EXPECT_EQ(bw.tiers()[2].value, 0u);
    EXPECT_EQ(bw.unknown(), node_set{2});
    EXPECT_EQ(bw.best(), (node_set{1, 5}));
    EXPECT_EQ(bw.value_of(3), top - 1);
    EXPECT_EQ(bw.value_of(2), none);
    EXPECT_EQ(bw.value_of(6), none);
    EXPECT_EQ(bw.value_of(-1), none);
    const memory_tiers lat = memory_tiers::from_values(0, memory_attribute::write_latency, values{top, 0, 0});
    ASSERT_EQ(lat.tiers().size(), 2u);
    EXPECT_EQ(lat.tiers()[0].nodes, (node_set{1, 2})); // lowest first
    EXPECT_EQ(lat.tiers()[1].value, top);
}

TEST(tiers, a_default_constructed_or_moved_from_value_has_no_initiator_and_best_refuses_it) {
    const auto expect_empty = [](const memory_tiers& t, const char* what) {
        SCOPED_TRACE(what);
        EXPECT_TRUE(t.tiers().empty());
        EXPECT_TRUE(t.unknown().empty());
        EXPECT_FALSE(t.known());
        EXPECT_EQ(t.initiator(), -1);
        EXPECT_EQ(t.attribute(), memory_attribute::bandwidth);
        EXPECT_EQ(t.value_of(0), none);
        const std::size_t before = numaplace::degradation_count();
        expect_plain_invalid([&] { (void)t.best(); }, "no initiator", "strict");
        expect_plain_invalid([&] { (void)t.best(numaplace::fallback::degrade); }, "no initiator", "degrade"); // was node -1
        EXPECT_EQ(numaplace::degradation_count(), before) << "nothing degraded: nothing was placed";
    };
    expect_empty(memory_tiers(), "default-constructed");
    memory_tiers source = memory_tiers::from_values(1, memory_attribute::latency, values{5, 3});
    memory_tiers moved(std::move(source));
    expect_empty(source, "moved-from (construction)");
    EXPECT_EQ(moved.best(), node_set{1});
    memory_tiers assigned = memory_tiers::from_values(0, memory_attribute::bandwidth, values{9});
    assigned = std::move(moved);
    expect_empty(moved, "moved-from (assignment)");
    EXPECT_EQ(assigned.initiator(), 1);
    EXPECT_EQ(assigned.attribute(), memory_attribute::latency);
    EXPECT_EQ(assigned.best(), node_set{1});
    // no value at all, but an initiator: strict says unknown, degrading gives the initiator's node
    const memory_tiers nothing = memory_tiers::from_values(1, memory_attribute::bandwidth, values{none, none});
    EXPECT_THROW((void)nothing.best(), numaplace::memory_attributes_unknown);
    EXPECT_EQ(nothing.best(numaplace::fallback::degrade), node_set{1});
}

// The four combinations numaplace-info meets, exactly as printed.
TEST(tier_table, every_node_shows_its_own_bandwidth_and_latency) {
    // one bandwidth, two latencies (printed with the first node's latency for both until 2026-11-27)
    EXPECT_EQ(line(values{102400, 51200, 51200, none}, values{100, 150, 200, 300}),
              "nodes 0 (102400 MiB/s, 100 ns) > nodes 1 (51200 MiB/s, 150 ns), nodes 2 (51200 MiB/s, 200 ns); "
              "no bandwidth: nodes 3 (bandwidth unknown, 300 ns)");
    // latency only (printed "; unknown: 0 1 2 3" after the colon until 2026-11-27)
    EXPECT_EQ(line(values{none, none, none, none}, values{100, 150, 150, none}),
              "nodes 0 (bandwidth unknown, 100 ns) > nodes 1 2 (bandwidth unknown, 150 ns); unknown: 3");
    EXPECT_EQ(line(values{102400, 51200, 51200, none}, values{none, none, none, none}),
              "nodes 0 (102400 MiB/s, latency unknown) > nodes 1 2 (51200 MiB/s, latency unknown); unknown: 3");
    EXPECT_EQ(line(values{none, none}, values{none, none}), "none; unknown: 0 1");
    EXPECT_EQ(line(values{7}, values{9}), "nodes 0 (7 MiB/s, 9 ns)");
    // within a tier: known latencies best first, unknown last; a bandwidth without a latency
    EXPECT_EQ(line(values{50, 50, 50, 60}, values{none, 200, 100, none}),
              "nodes 3 (60 MiB/s, latency unknown) > nodes 2 (50 MiB/s, 100 ns), nodes 1 (50 MiB/s, 200 ns), "
              "nodes 0 (50 MiB/s, latency unknown)");
    const memory_tier_table t = numaplace::tier_table(memory_tiers::from_values(0, memory_attribute::bandwidth, values{9, none, 9}),
                                                      memory_tiers::from_values(0, memory_attribute::latency, values{4, 4, none}));
    EXPECT_EQ(t.initiator, 0);
    EXPECT_EQ(t.ranked_by, memory_attribute::bandwidth);
    ASSERT_EQ(t.rows.size(), 3u);
    EXPECT_EQ(t.rows[0].nodes, node_set{0});
    EXPECT_EQ(t.rows[0].rank, std::size_t{0});
    EXPECT_EQ(t.rows[1].nodes, node_set{2});
    EXPECT_EQ(t.rows[1].latency, none);
    EXPECT_EQ(t.rows[1].rank, std::size_t{0});
    EXPECT_EQ(t.rows[2].nodes, node_set{1});
    EXPECT_EQ(t.rows[2].bandwidth, none);
    EXPECT_EQ(t.rows[2].latency, 4u);
    EXPECT_EQ(t.rows[2].rank, std::nullopt);
    EXPECT_TRUE(t.unknown.empty());
}

// The class, not the cases: every combination of three values (two levels and unknown) for four nodes,
// both attributes: each node in exactly one row or in unknown, with the values the tiers give it, rows of
// one rank sharing the ranking value, ranks best first.
TEST(tier_table, every_combination_of_values_keeps_each_nodes_own_values) {
    const std::optional<std::uint64_t> level[] = {none, 10, 20};
    for (int code = 0; code < 81 * 81; ++code) {
        values bw(4), lat(4);
        for (int k = 0, c = code; k < 4; ++k, c /= 3) bw[k] = level[c % 3];
        for (int k = 0, c = code / 81; k < 4; ++k, c /= 3) lat[k] = level[c % 3];
        const memory_tiers b = memory_tiers::from_values(0, memory_attribute::bandwidth, bw);
        const memory_tiers l = memory_tiers::from_values(0, memory_attribute::latency, lat);
        const memory_tier_table t = numaplace::tier_table(b, l);
        std::vector<int> seen(4, 0);
        for (std::size_t r = 0; r < t.rows.size(); ++r) {
            const auto& row = t.rows[r];
            for (int id : row.nodes) {
                ++seen[static_cast<std::size_t>(id)];
                EXPECT_EQ(row.bandwidth, bw[static_cast<std::size_t>(id)]) << "code " << code << " node " << id;
                EXPECT_EQ(row.latency, lat[static_cast<std::size_t>(id)]) << "code " << code << " node " << id;
            }
            if (r > 0 && row.rank && t.rows[r - 1].rank)
                EXPECT_TRUE(*row.rank == *t.rows[r - 1].rank || *row.rank == *t.rows[r - 1].rank + 1) << code;
            if (r > 0 && t.rows[r - 1].rank == std::nullopt) EXPECT_EQ(row.rank, std::nullopt) << code;
        }
        for (int id : t.unknown) {
            ++seen[static_cast<std::size_t>(id)];
            EXPECT_FALSE(bw[static_cast<std::size_t>(id)] || lat[static_cast<std::size_t>(id)]) << code;
        }
        EXPECT_EQ(seen, std::vector<int>(4, 1)) << "code " << code;
        EXPECT_EQ(t.ranked_by.has_value(), b.known() || l.known()) << code;
        std::ostringstream os;
        numaplace::print_tier_table(os, t);
        EXPECT_EQ(os.str().find(":;"), std::string::npos) << os.str();
        ASSERT_FALSE(os.str().empty());
        EXPECT_TRUE(os.str()[0] == 'n') << os.str(); // "nodes ..." or "none", never a separator first
    }
}

TEST(tier_table, refuses_tiers_that_are_not_one_initiators_bandwidth_and_latency) {
    const memory_tiers bw = memory_tiers::from_values(0, memory_attribute::bandwidth, values{1, 2});
    const memory_tiers lat = memory_tiers::from_values(0, memory_attribute::latency, values{1, 2});
    expect_invalid([&] { (void)numaplace::tier_table(lat, bw); }, "by bandwidth then by latency", "swapped");
    expect_invalid([&] { (void)numaplace::tier_table(bw, memory_tiers::from_values(1, memory_attribute::latency, values{1, 2})); },
                   "one initiator", "two initiators");
    expect_invalid([&] { (void)numaplace::tier_table(bw, memory_tiers::from_values(0, memory_attribute::latency, values{1, 2, 3})); },
                   "same nodes", "other nodes");
    expect_invalid([&] { (void)numaplace::tier_table(bw, memory_tiers::from_values(0, memory_attribute::read_latency, values{1, 2})); },
                   "by bandwidth then by latency", "read latency");
    expect_invalid([&] { (void)numaplace::tier_table(memory_tiers(), memory_tiers()); }, "by bandwidth then by latency",
                   "default-constructed");
}
