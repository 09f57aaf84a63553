#include <numaplace/diagnostics.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/report.hpp>
#include <numaplace/tiers.hpp>
#include <numaplace/topology.hpp>

#include <hwloc.h> // calls hwloc on topology::native(): numaplace's headers declare hwloc's types only

#include <gtest/gtest.h>

#include <child.hpp>
#include <expect.hpp>
#include <seccomp.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <algorithm>

#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

using numaplace::topology;
using numaplace_test::expect_invalid;
using numaplace_test::expect_system_error;
using numaplace_test::expect_unknown_node;

namespace {
int node_count() { return static_cast<int>(topology::get().size()); }
} // namespace

TEST(topology, nodes_have_consecutive_ids_and_distinct_os_indexes) {
    const auto& topo = topology::get();
    ASSERT_GE(topo.size(), 1u);
    std::set<unsigned> os;
    for (std::size_t i = 0; i < topo.size(); ++i) {
        EXPECT_EQ(topo.nodes()[i].id, static_cast<int>(i));
        os.insert(topo.nodes()[i].os_index);
        EXPECT_GT(topo.nodes()[i].memory, 0u);
        EXPECT_EQ(topo.from_os_index(topo.nodes()[i].os_index), static_cast<int>(i));
    }
    EXPECT_EQ(os.size(), topo.size());
}

TEST(topology, cpus_of_nodes_are_exactly_the_cpus_this_process_may_use) {
    const auto& topo = topology::get();
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    std::set<unsigned> from_nodes;
    for (const auto& n : topo.nodes())
        for (unsigned c : n.cpus) {
            EXPECT_TRUE(from_nodes.insert(c).second) << "cpu " << c << " in two nodes";
            EXPECT_EQ(topo.node_of_cpu(c), n.id);
        }
    std::set<unsigned> from_kernel;
    for (unsigned c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) from_kernel.insert(c);
    EXPECT_EQ(from_nodes, from_kernel);
}

static std::set<unsigned> parse_cpulist(const std::string& list) {
    std::set<unsigned> cpus;
    std::stringstream ss(list);
    std::string part;
    while (std::getline(ss, part, ',')) {
        if (part.empty()) continue;
        auto dash = part.find('-');
        unsigned lo = static_cast<unsigned>(std::stoul(part.substr(0, dash)));
        unsigned hi = dash == std::string::npos ? lo : static_cast<unsigned>(std::stoul(part.substr(dash + 1)));
        for (unsigned c = lo; c <= hi; ++c) cpus.insert(c);
    }
    return cpus;
}

TEST(topology, node_ids_agree_with_the_kernel_node_of_each_cpu) {
    // /sys/devices/system/node/nodeK/cpulist lists the cpus of OS node K.
    const auto& topo = topology::get();
    for (const auto& n : topo.nodes()) {
        std::ifstream in("/sys/devices/system/node/node" + std::to_string(n.os_index) + "/cpulist");
        std::string list;
        ASSERT_TRUE(static_cast<bool>(std::getline(in, list))) << "no sysfs entry for os node " << n.os_index;
        auto kernel = parse_cpulist(list);
        for (unsigned c : n.cpus) EXPECT_TRUE(kernel.count(c)) << "cpu " << c << " not on os node " << n.os_index;
    }
}

TEST(topology, distance_matrix_is_local_on_the_diagonal_and_symmetric_in_size) {
    const auto& topo = topology::get();
    for (const auto& a : topo.nodes()) {
        EXPECT_EQ(topo.distance(a.id, a.id), 10u);
        for (const auto& b : topo.nodes())
            if (a.id != b.id) EXPECT_GT(topo.distance(a.id, b.id), 10u);
    }
    if (topo.capabilities().distances_known) {
        // compare with the kernel's table for our nodes
        for (const auto& a : topo.nodes()) {
            std::ifstream in("/sys/devices/system/node/node" + std::to_string(a.os_index) + "/distance");
            std::vector<unsigned> row;
            unsigned d;
            while (in >> d) row.push_back(d);
            for (const auto& b : topo.nodes())
                if (b.os_index < row.size()) EXPECT_EQ(topo.distance(a.id, b.id), row[b.os_index]);
        }
    }
}

TEST(topology, current_node_is_the_node_of_the_running_cpu) {
    const auto& topo = topology::get();
    int cpu = sched_getcpu();
    ASSERT_GE(cpu, 0);
    int node = topo.current_node();
    ASSERT_GE(node, 0);
    const auto& cpus = topo.at(node).cpus;
    EXPECT_NE(std::find(cpus.begin(), cpus.end(), static_cast<unsigned>(cpu)), cpus.end());
}

TEST(topology, with_cpus_excludes_memory_only_nodes) {
    const auto& topo = topology::get();
    auto with = topo.with_cpus();
    for (const auto& n : topo.nodes()) EXPECT_EQ(with.contains(n.id), n.has_cpus());
    EXPECT_EQ(topo.all().size(), topo.size());
}

TEST(topology, capabilities_read_the_kernel_settings) {
    const auto& caps = topology::get().capabilities();
    EXPECT_EQ(caps.nodes, topology::get().size());
    EXPECT_GE(caps.system_nodes, caps.nodes);
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (std::getline(thp, line)) EXPECT_NE(line.find("[" + caps.thp + "]"), std::string::npos);
    std::ifstream bal("/proc/sys/kernel/numa_balancing");
    int b = -1;
    if (bal >> b) EXPECT_EQ(caps.numa_balancing, b);
    // The probe of mbind either works or reports why not.
    EXPECT_EQ(caps.memory_binding, caps.memory_binding_errno == 0);
}

TEST(topology, report_lists_every_node_and_capability) {
    std::ostringstream os;
    numaplace::print_report(os);
    const std::string r = os.str();
    for (const auto& n : topology::get().nodes())
        EXPECT_NE(r.find("node " + std::to_string(n.id) + " (os " + std::to_string(n.os_index) + ")"), std::string::npos);
    for (const char* key : {"memory binding", "MPOL_PREFERRED_MANY", "MPOL_WEIGHTED_INTERLEAVE", "transparent huge pages",
                            "kernel.numa_balancing", "degradations"})
        EXPECT_NE(r.find(key), std::string::npos) << key;
}

TEST(topology, synthetic_topologies_have_the_requested_nodes) {
    auto t = topology::from_synthetic("pack:4 numa:1 core:2 pu:1");
    ASSERT_EQ(t->size(), 4u);
    for (const auto& n : t->nodes()) {
        EXPECT_EQ(n.cores, 2u);
        EXPECT_EQ(n.cpus.size(), 2u);
    }
    EXPECT_FALSE(t->is_this_system());
    EXPECT_THROW(topology::from_synthetic("this is not a topology"), numaplace::invalid_placement);
    // not this system's: the kernel was not asked, and the report says so instead of "NO (errno 0: ...)"
    EXPECT_FALSE(t->capabilities().probed);
    EXPECT_TRUE(topology::get().capabilities().probed);
    std::ostringstream os;
    numaplace::print_report(os, *t);
    const std::string r = os.str();
    for (const char* key : {"memory binding (mbind):", "page query (move_pages):", "cpu binding (hwloc):", "MPOL_PREFERRED_MANY:",
                            "MPOL_WEIGHTED_INTERLEAVE:", "MPOL_F_NUMA_BALANCING:"}) {
        const std::size_t at = r.find(key);
        ASSERT_NE(at, std::string::npos) << key;
        const std::string line = r.substr(at, r.find('\n', at) - at);
        EXPECT_NE(line.find("not probed (the topology is not this system's)"), std::string::npos) << line;
    }
    EXPECT_EQ(r.find("errno 0"), std::string::npos) << r;
    std::ostringstream mine;
    numaplace::print_report(mine);
    EXPECT_EQ(mine.str().find("not probed"), std::string::npos) << mine.str();
}

// A topology read from XML or a synthetic description has no kernel to ask which node owns a CPU;
// hwloc gives a node attached to a socket or to the machine that parent's cpuset. Each CPU belongs to
// one node, as on the machine it came from: the smallest cpuset first, then the lowest OS index.
TEST(topology, a_foreign_topology_gives_each_cpu_to_one_node_as_the_kernel_does) {
    const auto cpus_by_os = [](const topology& t) {
        std::vector<std::vector<unsigned>> by_os(t.size());
        for (const auto& n : t.nodes()) by_os.at(n.os_index) = n.cpus;
        return by_os;
    };
    using cpus = std::vector<std::vector<unsigned>>;
    // a CXL-like node attached to the machine (os 2, cpuset: every CPU) beside a node per socket
    auto cxl = topology::from_synthetic("[numa(memory=536870912)] pack:2 [numa(memory=1073741824)] core:2 pu:1");
    ASSERT_EQ(cxl->size(), 3u);
    EXPECT_EQ(cpus_by_os(*cxl), (cpus{{0, 1}, {2, 3}, {}}));
    EXPECT_EQ(cxl->at(cxl->from_os_index(2)).cores, 0u);
    EXPECT_EQ(cxl->with_cpus().size(), 2u);
    // two nodes per socket (KNL's MCDRAM, HBM in flat mode, an HMAT node near a socket): the second
    // of each socket is memory-only; written to XML and read back, the same
    auto flat = topology::from_synthetic("pack:2 [numa(memory=1073741824)] [numa(memory=536870912)] core:2 pu:1");
    ASSERT_EQ(flat->size(), 4u);
    EXPECT_EQ(cpus_by_os(*flat), (cpus{{0, 1}, {}, {2, 3}, {}}));
    const std::string xml = ::testing::TempDir() + "numaplace_flat_topology.xml";
    ASSERT_EQ(hwloc_topology_export_xml(flat->native(), xml.c_str(), 0), 0);
    auto from_xml = topology::from_xml(xml);
    std::remove(xml.c_str());
    EXPECT_EQ(cpus_by_os(*from_xml), (cpus{{0, 1}, {}, {2, 3}, {}}));
    EXPECT_FALSE(from_xml->at(from_xml->from_os_index(1)).has_cpus());
    // a partition of the planned machine: blocks on the nodes with CPUs only, as on that machine
    const numaplace::partition<double> part(std::size_t(1) << 20, *from_xml);
    EXPECT_EQ(part.block_count(), 2u);
    for (const auto& b : part.untyped().blocks()) EXPECT_TRUE(from_xml->at(b.node).has_cpus()) << b.node;
    // disjoint sockets keep all their CPUs
    auto plain = topology::from_synthetic("pack:2 numa:1 core:2 pu:1");
    EXPECT_EQ(cpus_by_os(*plain), (cpus{{0, 1}, {2, 3}}));
}

// The capability probe of a process whose first numaplace call meets its address-space limit (no page
// can be mapped): the kernel's answers all the same, not "refused, errno 0" for the rest of the process.
TEST(topology, capabilities_probed_at_the_address_space_limit_are_the_kernels) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "sanitizers reserve terabytes of shadow address space";
#endif
    if (!std::getenv("NUMAPLACE_TEST_PROBE_AT_LIMIT")) {
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_TEST_PROBE_AT_LIMIT"), 0);
        return;
    }
    // 16 MiB of room in malloc's heap, kept after the free, for hwloc's loading under the limit
    ASSERT_EQ(::mallopt(M_MMAP_THRESHOLD, 32 << 20), 1);
    ASSERT_EQ(::mallopt(M_TRIM_THRESHOLD, 64 << 20), 1);
    void* room = std::malloc(std::size_t(16) << 20);
    ASSERT_NE(room, nullptr);
    std::memset(room, 1, std::size_t(16) << 20);
    std::free(room);
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_AS, &old), 0);
    const rlimit lim{numaplace_test::virtual_size(), old.rlim_max};
    ASSERT_EQ(::setrlimit(RLIMIT_AS, &lim), 0);
    void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const bool at_limit = page == MAP_FAILED;
    const numaplace::capabilities caps = topology::get().capabilities(); // the first use: probed now
    ASSERT_EQ(::setrlimit(RLIMIT_AS, &old), 0);
    ASSERT_TRUE(at_limit) << "a page could still be mapped: the limit did not bite";
    ASSERT_TRUE(caps.probed);
    // the oracle: the same probe now that pages can be mapped
    const auto now = numaplace::detail::os_probe_policies(topology::get().nodes().front().os_index);
    ASSERT_TRUE(now.mapped);
    EXPECT_EQ(caps.memory_binding_errno, now.bind_errno);
    EXPECT_EQ(caps.memory_binding, now.bind_errno == 0);
    EXPECT_EQ(caps.page_query_errno, now.query_errno);
    EXPECT_EQ(caps.page_query, now.query_errno == 0);
    EXPECT_EQ(caps.preferred_many, now.preferred_many);
    EXPECT_EQ(caps.weighted_interleave, now.weighted_interleave);
    EXPECT_EQ(caps.numa_balancing_bind, now.numa_balancing_bind);
}

TEST(topology, get_is_one_snapshot_shared_by_threads) {
    const topology* a = &topology::get();
    const topology* b = nullptr;
    std::thread t([&] { b = &topology::get(); });
    t.join();
    EXPECT_EQ(a, b);
}

TEST(topology, lookups_reject_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { (void)topology::get().at(n); }, n, "at(N)");
    expect_unknown_node([&] { (void)topology::get().at(-1); }, -1, "at(-1)");
    expect_unknown_node([&] { topology::get().check(n); }, n, "check(N)");
    expect_unknown_node([&] { (void)topology::get().distance(0, n); }, n, "distance(0, N)");
    expect_unknown_node([&] { (void)topology::get().native_node(n); }, n, "native_node(N)");
    for (int k = 0; k < n; ++k) EXPECT_EQ(topology::get().at(k).id, k);
}

TEST(topology, bad_descriptions_are_invalid_placement) {
    expect_invalid([] { (void)topology::from_synthetic("this is not a topology"); }, "synthetic", "from_synthetic");
    expect_invalid([] { (void)topology::from_xml("/nonexistent/numaplace/topology.xml"); }, "XML", "from_xml");
}

// ---- Memory attributes and tiers (tiers.hpp, tested here: a new binary would cost a guest boot per
// layout). In the hmat guest layout the firmware's values are known exactly (tests/guests/numa-guest):
// from OS node 0, node 0 at 102400 MiB/s and 100 ns, the memory-only OS node 2 at 30720 MiB/s and 250 ns;
// OS node 1 has no value from node 0 (Linux exposes each node's best initiators only). Everywhere else
// (the host, the other layouts) the firmware gives none: unknown, strict refuses, degrading says so.

namespace {
const char* const guest_layout = std::getenv("NUMAPLACE_GUEST_LAYOUT");
bool hmat_layout() { return guest_layout && std::string(guest_layout) == "hmat"; }
} // namespace

TEST(tiers, attributes_are_the_firmwares_or_unknown_never_guessed) {
    const topology& topo = topology::get();
    const int first = topo.with_cpus()[0];
    if (!hmat_layout()) {
        EXPECT_FALSE(topo.capabilities().memory_attributes);
        for (const auto& to : topo.nodes())
            for (const auto& from : topo.nodes())
                if (from.has_cpus())
                    for (auto a : {numaplace::memory_attribute::bandwidth, numaplace::memory_attribute::latency,
                                   numaplace::memory_attribute::read_bandwidth, numaplace::memory_attribute::write_latency})
                        EXPECT_FALSE(topo.memory_attribute_value(a, to.id, from.id).has_value()) << to.id << " from " << from.id;
        const auto tiers = numaplace::memory_tiers::of(first);
        EXPECT_FALSE(tiers.known());
        EXPECT_TRUE(tiers.tiers().empty());
        EXPECT_EQ(tiers.unknown(), topo.all());
        try {
            (void)tiers.best();
            ADD_FAILURE() << "strict best() without attributes returned";
        } catch (const numaplace::memory_attributes_unknown& e) {
            EXPECT_EQ(e.initiator(), first);
            EXPECT_EQ(e.attribute(), numaplace::memory_attribute::bandwidth);
            EXPECT_NE(std::string(e.what()).find("no ACPI HMAT"), std::string::npos) << e.what();
        }
        const std::size_t before = numaplace::degradation_count();
        EXPECT_EQ(tiers.best(numaplace::fallback::degrade), numaplace::node_set{first});
        EXPECT_EQ(numaplace::degradation_count(), before + 1);
        EXPECT_NE(numaplace::degradations().back().find("memory tiers: no Bandwidth from node"), std::string::npos);
        return;
    }
    ASSERT_EQ(topo.size(), 3u) << "hmat layout: nodes OS 0, 1 (CPUs) and 2 (memory only)";
    EXPECT_TRUE(topo.capabilities().memory_attributes);
    const int dram0 = topo.from_os_index(0), dram1 = topo.from_os_index(1), far = topo.from_os_index(2);
    ASSERT_GE(dram0, 0);
    ASSERT_GE(dram1, 0);
    ASSERT_GE(far, 0);
    using numaplace::memory_attribute;
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::bandwidth, dram0, dram0), 102400u);
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::read_bandwidth, dram0, dram0), 102400u);
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::latency, dram0, dram0), 100u);
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::bandwidth, far, dram0), 30720u);
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::write_latency, far, dram0), 250u);
    EXPECT_EQ(topo.memory_attribute_value(memory_attribute::bandwidth, dram1, dram1), 102400u);
    EXPECT_FALSE(topo.memory_attribute_value(memory_attribute::bandwidth, dram1, dram0).has_value());
    expect_invalid([&] { (void)topo.memory_attribute_value(memory_attribute::bandwidth, dram0, far); }, "no CPUs",
                   "a memory-only initiator");
    expect_unknown_node([&] { (void)topo.memory_attribute_value(memory_attribute::bandwidth, 3, dram0); }, 3, "target");
    expect_unknown_node([&] { (void)topo.memory_attribute_value(memory_attribute::bandwidth, dram0, -1); }, -1, "initiator");

    const auto by_bandwidth = numaplace::memory_tiers::of(dram0);
    ASSERT_EQ(by_bandwidth.tiers().size(), 2u);
    EXPECT_EQ(by_bandwidth.tiers()[0].nodes, numaplace::node_set{dram0});
    EXPECT_EQ(by_bandwidth.tiers()[0].value, 102400u);
    EXPECT_EQ(by_bandwidth.tiers()[1].nodes, numaplace::node_set{far});
    EXPECT_EQ(by_bandwidth.tiers()[1].value, 30720u);
    EXPECT_EQ(by_bandwidth.unknown(), numaplace::node_set{dram1});
    EXPECT_EQ(by_bandwidth.best(), numaplace::node_set{dram0});
    const auto by_latency = numaplace::memory_tiers::of(dram0, memory_attribute::latency);
    ASSERT_EQ(by_latency.tiers().size(), 2u);
    EXPECT_EQ(by_latency.tiers()[0].value, 100u); // lowest first
    EXPECT_EQ(by_latency.tiers()[1].nodes, numaplace::node_set{far});
    EXPECT_EQ(by_latency.tiers()[1].value, 250u);
    const auto from1 = numaplace::memory_tiers::of(dram1);
    ASSERT_EQ(from1.tiers().size(), 1u);
    EXPECT_EQ(from1.tiers()[0].nodes, numaplace::node_set{dram1});
    EXPECT_EQ(from1.unknown(), (numaplace::node_set{dram0, far}));
    expect_invalid([&] { (void)numaplace::memory_tiers::of(far); }, "no CPUs", "tiers of a memory-only node");
    // the report says it
    std::ostringstream report;
    numaplace::print_report(report, topo);
    EXPECT_NE(report.str().find("memory attributes (HMAT):    yes"), std::string::npos) << report.str();
}

// A process at its file-descriptor limit when the topology is first read (ulimit -n reached): a
// std::system_error (EMFILE), nothing kept; once descriptors are free, the next call reads the same
// topology as a process with room (node count, each node's memory and CPUs), never one node without
// memory for the rest of the process.
TEST(topology, first_read_at_the_descriptor_limit_throws_and_the_next_reads_the_machine) {
    if (std::getenv("NUMAPLACE_TEST_AT_FD_LIMIT") == nullptr) {
        const topology& t = topology::get();
        std::string expected = std::to_string(t.size());
        for (const auto& n : t.nodes()) expected += " " + std::to_string(n.memory) + "/" + std::to_string(n.cores);
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_TEST_AT_FD_LIMIT", {{"NUMAPLACE_TEST_EXPECTED", expected}}), 0);
        return;
    }
    std::vector<int> fds;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fds.push_back(fd);
    ASSERT_EQ(errno, EMFILE);
    ASSERT_GE(fds.size(), 3u);
    for (int k = 0; k < 3; ++k) { // three free: fewer than the read needs (UBSan's checks need one themselves)
        ::close(fds.back());
        fds.pop_back();
    }
    expect_system_error([] { (void)topology::get(); }, EMFILE, "file descriptors", "read at the descriptor limit");
    for (int fd : fds) ::close(fd);
    const topology& t = topology::get();
    std::string got = std::to_string(t.size());
    for (const auto& n : t.nodes()) got += " " + std::to_string(n.memory) + "/" + std::to_string(n.cores);
    EXPECT_EQ(got, std::getenv("NUMAPLACE_TEST_EXPECTED"));
}

// A process started under a sandbox refusing sched_getaffinity: hwloc's discovery would retry it for ever
// (hwloc 2.9 doubles its set on every failure: the first version of this test hung there). A
// std::system_error naming the call instead, nothing kept: the next call throws the same.
TEST(topology_attack, affinity_refused_from_the_start_is_a_typed_error_not_a_hang) {
    if (numaplace_test::rerun_started_under_seccomp({SYS_sched_getaffinity})) return;
    for (int call = 0; call < 2; ++call)
        expect_system_error([] { (void)topology::get(); }, EPERM, "sched_getaffinity", "read with the affinity refused");
}
