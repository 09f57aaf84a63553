// observation_counters.hpp (linked into test_observe: no binary of its own). Suite observation_counters:
// every value of an observation under its name, equal to the observation's own figure; a group not
// measured is absent with the observation's reason and has no value at all (never a 0); a group not asked
// for is neither; where() results as locality and pages per node. Observations are made as
// test_observe.cpp makes them: real scopes, refusals through the perf_event_open test seam, a synthetic
// topology, /sys hidden in a child.
#include <numaplace/memory.hpp>
#include <numaplace/observation_counters.hpp>
#include <numaplace/observe.hpp>

#include "child.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>
#include <vector>

#include <sched.h>
#include <sys/mount.h>

namespace {

using namespace numaplace;

// Values whose name starts with `prefix`.
std::size_t count_prefixed(const counter_set& c, const std::string& prefix) {
    std::size_t n = 0;
    for (const named_value& v : c.values) n += v.name.rfind(prefix, 0) == 0;
    return n;
}

// Every name once.
bool names_distinct(const counter_set& c) {
    std::set<std::string> seen;
    for (const named_value& v : c.values)
        if (!seen.insert(v.name).second) return false;
    return true;
}

const char* const numastat_fields[6] = {"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"};

std::uint64_t field(const numastat_delta& d, int k) {
    const std::uint64_t v[6] = {d.numa_hit, d.numa_miss, d.numa_foreign, d.interleave_hit, d.local_node, d.other_node};
    return v[k];
}

// A region of pages first touched inside a scope: every value is the observation's figure, under its name.
TEST(observation_counters, every_measured_figure_under_its_name) {
    const std::size_t pages = 256, bytes = pages * detail::page_size();
    void* p = memory::map(bytes);
    memory::forbid_huge_pages(p, bytes);
    observation_scope scope;
    memory::touch(p, bytes);
    const observation o = scope.stop();
    memory::unmap(p, bytes);
    const counter_set c = observation_counters(o);
    EXPECT_TRUE(names_distinct(c));
    for (const named_value& v : c.values) EXPECT_EQ(v.per_iteration, v.name != "rma_lma") << v.name;

    ASSERT_TRUE(o.status(counter_group::numastat).measured) << o.status(counter_group::numastat).reason;
    std::uint64_t local = 0, other = 0;
    for (const numastat_delta& d : o.numastat()) {
        const std::string prefix = "numastat.node" + std::to_string(d.node) + ".";
        for (int k = 0; k < 6; ++k) EXPECT_EQ(c.get(prefix + numastat_fields[k]), static_cast<double>(field(d, k))) << prefix << k;
        local += d.local_node;
        other += d.other_node;
    }
    EXPECT_EQ(count_prefixed(c, "numastat."), 2 + 6 * o.numastat().size());
    EXPECT_EQ(c.get("numastat.local_node"), static_cast<double>(local));
    EXPECT_EQ(c.get("numastat.other_node"), static_cast<double>(other));
    EXPECT_GE(local + other, pages); // each page allocated counts once, local or other, on its node

    ASSERT_TRUE(o.status(counter_group::vmstat).measured) << o.status(counter_group::vmstat).reason;
    const vmstat_delta& v = o.vmstat();
    const std::pair<const char*, const std::optional<std::uint64_t>*> vm[] = {
        {"vmstat.numa_pages_migrated", &v.numa_pages_migrated}, {"vmstat.numa_hint_faults", &v.numa_hint_faults},
        {"vmstat.numa_hint_faults_local", &v.numa_hint_faults_local}, {"vmstat.numa_pte_updates", &v.numa_pte_updates},
        {"vmstat.pgmigrate_success", &v.pgmigrate_success}, {"vmstat.pgmigrate_fail", &v.pgmigrate_fail}};
    for (const auto& f : vm) { // a counter this kernel lacks has no value, not 0
        if (*f.second) EXPECT_EQ(c.get(f.first), static_cast<double>(**f.second)) << f.first;
        else EXPECT_FALSE(c.get(f.first).has_value()) << f.first;
    }

    std::vector<counter_group> wide;
    for (counter_group g : {counter_group::numastat, counter_group::vmstat, counter_group::software, counter_group::node_access})
        if (o.status(g).measured && o.status(g).system_wide) wide.push_back(g);
    EXPECT_EQ(c.system_wide, wide);
    if (o.status(counter_group::software).measured) {
        ASSERT_TRUE(o.software().page_faults.has_value());
        EXPECT_EQ(c.get("page_faults"), static_cast<double>(*o.software().page_faults));
        EXPECT_GE(*c.get("page_faults"), static_cast<double>(pages));
        EXPECT_FALSE(c.absent_reason(counter_group::software).has_value());
    }
}

// The perf groups refused on purpose (the test seam): absent, with the observation's reason, no value.
int refused_with = 0;
int refuse_every_event(const detail::perf_event_spec&, int, int) noexcept { return -refused_with; }
TEST(observation_counters, refused_perf_groups_absent_with_their_reason) {
    for (const int err : {EACCES, ENOENT, EPERM, EMFILE}) {
        refused_with = err;
        detail::perf_open_override.store(&refuse_every_event);
        const observation o = observation_scope().stop();
        detail::perf_open_override.store(nullptr);
        const counter_set c = observation_counters(o);
        for (counter_group g : {counter_group::software, counter_group::node_access}) {
            ASSERT_FALSE(o.status(g).measured) << name(g);
            ASSERT_FALSE(o.status(g).reason.empty()) << name(g);
            EXPECT_EQ(c.absent_reason(g), o.status(g).reason) << name(g) << " errno " << err;
        }
        ASSERT_EQ(c.absent.size(), 2u);
        EXPECT_EQ(c.absent[0].first, counter_group::software); // counter_group order
        EXPECT_EQ(c.absent[1].first, counter_group::node_access);
        EXPECT_EQ(c.absent_text(), "software (" + o.status(counter_group::software).reason + "); node_access (" +
                                       o.status(counter_group::node_access).reason + ")");
        for (const char* gone : {"cpu_migrations", "page_faults", "context_switches", "rma_lma"})
            EXPECT_FALSE(c.get(gone).has_value()) << gone;
        EXPECT_EQ(count_prefixed(c, "node_access."), 0u);
        EXPECT_GT(count_prefixed(c, "numastat."), 0u); // the others still counted
        EXPECT_FALSE(c.absent_reason(counter_group::numastat).has_value());
    }
}

// Groups switched off in observe_options were not asked for: neither values nor an absent entry.
TEST(observation_counters, groups_not_asked_for_are_neither_values_nor_absent) {
    observe_options only_vmstat;
    only_vmstat.numastat = only_vmstat.software = only_vmstat.node_access = false;
    const counter_set c = observation_counters(observation_scope(only_vmstat).stop());
    EXPECT_TRUE(c.absent.empty()) << c.absent_text();
    EXPECT_EQ(c.absent_text(), "");
    for (const named_value& v : c.values) EXPECT_EQ(v.name.rfind("vmstat.", 0), 0u) << v.name;
    EXPECT_EQ(c.system_wide, std::vector<counter_group>{counter_group::vmstat});
    observe_options nothing;
    nothing.numastat = nothing.vmstat = nothing.software = nothing.node_access = false;
    const counter_set none = observation_counters(observation_scope(nothing).stop());
    EXPECT_TRUE(none.values.empty() && none.absent.empty() && none.system_wide.empty());
}

// A topology of another machine: this machine's kernel nodes, named by the kernel's numbers.
TEST(observation_counters, numastat_of_another_topology_named_by_os_index) {
    const auto other = topology::from_synthetic("pack:4 numa:1 core:1 pu:1");
    observe_options options;
    options.of_topology = other.get();
    const observation o = observation_scope(options).stop();
    ASSERT_TRUE(o.status(counter_group::numastat).measured) << o.status(counter_group::numastat).reason;
    const counter_set c = observation_counters(o);
    EXPECT_EQ(count_prefixed(c, "numastat.node"), 0u);
    ASSERT_FALSE(o.numastat().empty());
    for (const numastat_delta& d : o.numastat())
        for (int k = 0; k < 6; ++k)
            EXPECT_EQ(c.get("numastat.os" + std::to_string(d.os_index) + "." + numastat_fields[k]), static_cast<double>(field(d, k)));
    EXPECT_EQ(count_prefixed(c, "numastat.os"), 6 * o.numastat().size());
}

// /sys/devices/system/node hidden (a tmpfs over it, in a child's mount namespace): numastat absent with
// the observation's reason, not one numastat value; vmstat still there.
TEST(observation_counters, numastat_hidden_is_absent_never_zero) {
    const int code = numaplace_test::run_child([] {
        if (unshare(CLONE_NEWNS) != 0) return 77;
        if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("none", "/sys/devices/system/node", "tmpfs", 0, nullptr) != 0)
            return 77;
        const observation o = observation_scope().stop();
        const counter_set c = observation_counters(o);
        if (o.status(counter_group::numastat).measured || o.status(counter_group::numastat).reason.empty()) return 1;
        if (c.absent_reason(counter_group::numastat) != o.status(counter_group::numastat).reason) return 2;
        if (count_prefixed(c, "numastat.") != 0 || c.absent.front().first != counter_group::numastat) return 3;
        for (counter_group g : c.system_wide)
            if (g == counter_group::numastat) return 4;
        return c.get("vmstat.numa_pages_migrated").has_value() == o.vmstat().numa_pages_migrated.has_value() ? 0 : 5;
    });
    if (code == 77) GTEST_SKIP() << "no mount namespace here (needs CAP_SYS_ADMIN)";
    EXPECT_EQ(code, 0);
}

TEST(observation_counters, locality_and_pages_per_node) {
    partition_locality l;
    l.histogram.pages = 10;
    l.histogram.untouched = 2;
    l.histogram.per_node = {3, 5};
    l.local = 6;
    l.remote = 2;
    const counter_set c = locality_counters(l);
    ASSERT_EQ(c.values.size(), 4u);
    const char* const names[] = {"locality", "pages.node0", "pages.node1", "pages.untouched"};
    const double values[] = {0.75, 3, 5, 2};
    for (std::size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(c.values[i].name, names[i]);
        EXPECT_EQ(c.values[i].value, values[i]) << names[i];
        EXPECT_FALSE(c.values[i].per_iteration) << names[i];
    }
    EXPECT_TRUE(c.absent.empty() && c.system_wide.empty());
    // against one node: locality = its share of the touched pages; a node out of range holds none
    EXPECT_EQ(locality_counters(l.histogram, 1).get("locality"), 5.0 / 8.0);
    EXPECT_EQ(locality_counters(l.histogram, 0).get("pages.node1"), 5.0);
    EXPECT_EQ(locality_counters(l.histogram, 7).get("locality"), 0.0);
    page_histogram untouched;
    untouched.pages = untouched.untouched = 4;
    untouched.per_node = {0};
    EXPECT_EQ(locality_counters(untouched, 0).get("locality"), 1.0); // nothing touched: nothing remote
    EXPECT_EQ(locality_counters(untouched, 0).get("pages.untouched"), 4.0);
}

} // namespace
