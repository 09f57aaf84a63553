// observe.hpp: observation scopes. Suite observe (what a scope measures, exact lower bounds), observe_attack
// (misuse and refusals, each made on purpose), observe_nodes (the multi-node proof, in the 2- and 4-node guests).
#include <numaplace/memory.hpp>
#include <numaplace/observe.hpp>
#include <numaplace/report.hpp>

#include "child.hpp"
#include "seccomp.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

using namespace numaplace;

int open_descriptors() {
    int n = 0;
    DIR* d = opendir("/proc/self/fd");
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; // the directory's own
}

std::size_t page() { return detail::page_size(); }

// Maps `pages` pages without huge pages; touched by the caller.
struct region {
    explicit region(std::size_t pages) : bytes(pages * page()), p(memory::map(bytes)) { memory::forbid_huge_pages(p, bytes); }
    ~region() { memory::unmap(p, bytes); }
    std::size_t bytes;
    void* p;
};

bool software_available() { return observation_capabilities().status(counter_group::software).measured; }

TEST(observe, names) {
    EXPECT_STREQ(name(counter_group::numastat), "numastat");
    EXPECT_STREQ(name(counter_group::vmstat), "vmstat");
    EXPECT_STREQ(name(counter_group::software), "software");
    EXPECT_STREQ(name(counter_group::node_access), "node_access");
}

TEST(observe, numastat_of_every_node_of_the_topology_system_wide) {
    observation_scope scope;
    const observation o = scope.stop();
    ASSERT_TRUE(o.status(counter_group::numastat).measured) << o.status(counter_group::numastat).reason;
    EXPECT_TRUE(o.status(counter_group::numastat).system_wide);
    EXPECT_TRUE(o.status(counter_group::vmstat).system_wide);
    EXPECT_FALSE(o.status(counter_group::software).system_wide);
    const auto& nodes = topology::get().nodes();
    ASSERT_EQ(o.numastat().size(), nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        EXPECT_EQ(o.numastat()[i].node, nodes[i].id);
        EXPECT_EQ(o.numastat()[i].os_index, nodes[i].os_index);
    }
    const char* layout = std::getenv("NUMAPLACE_GUEST_LAYOUT");
    if (layout && std::string(layout) == "restricted") { // the cpuset hides node 0: node 1 only, as id 0
        ASSERT_EQ(o.numastat().size(), 1u);
        EXPECT_EQ(o.numastat()[0].node, 0);
        EXPECT_EQ(o.numastat()[0].os_index, 1u);
    }
    EXPECT_GE(o.seconds(), 0.0);
}

TEST(observe, first_touch_counts_page_faults_and_numastat_pages) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    const std::size_t pages = 2048;
    region r(pages);
    observation_scope scope;
    memory::touch(r.p, r.bytes);
    const observation o = scope.stop();
    ASSERT_TRUE(o.software().page_faults.has_value());
    EXPECT_GE(*o.software().page_faults, pages);
    std::uint64_t hits = 0;
    for (const auto& n : o.numastat()) hits += n.numa_hit;
    EXPECT_GE(hits, pages); // every page allocated counts one numa_hit on the node it came from
    EXPECT_TRUE(o.vmstat().numa_pages_migrated.has_value());
}

// Threads that existed before start(), threads started inside the scope, and threads those start: all counted.
TEST(observe, every_thread_existing_and_started_inside_the_scope) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    const std::size_t pages = 1024;
    region before(pages), inside(pages), grandchild(pages);
    std::atomic<int> go{0};
    std::thread existing([&] {
        while (go.load() == 0) std::this_thread::yield();
        memory::touch(before.p, before.bytes);
    });
    observation_scope scope;
    go = 1;
    std::thread started([&] {
        memory::touch(inside.p, inside.bytes);
        std::thread([&] { memory::touch(grandchild.p, grandchild.bytes); }).join();
    });
    started.join();
    existing.join();
    const observation o = scope.stop();
    ASSERT_TRUE(o.software().page_faults.has_value());
    EXPECT_GE(*o.software().page_faults, 3 * pages);
}

TEST(observe, a_thread_moved_between_two_cpus_counts_a_migration) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    cpu_set_t allowed;
    ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (cpus.size() < 2) GTEST_SKIP() << "one CPU allowed: nowhere to move a thread";
    observation_scope scope;
    bool moved = true;
    std::thread([&] {
        for (int c : cpus) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            moved = moved && sched_setaffinity(0, sizeof one, &one) == 0 && sched_getcpu() == c;
        }
    }).join();
    const observation o = scope.stop();
    ASSERT_TRUE(moved);
    ASSERT_TRUE(o.software().cpu_migrations.has_value());
    EXPECT_GE(*o.software().cpu_migrations, 1u);
}

TEST(observe, node_access_unavailable_without_a_pmu) {
    if (detail::os_core_pmu_present()) GTEST_SKIP() << "this machine exposes a core PMU: the node events may be there";
    observation_scope scope;
    const observation o = scope.stop();
    const group_status& s = o.status(counter_group::node_access);
    EXPECT_FALSE(s.measured);
    EXPECT_EQ(s.error, ENOENT);
    EXPECT_EQ(s.reason, "no PMU: this processor/VM exposes no hardware cache events (ENOENT)");
    EXPECT_FALSE(o.node_access().local || o.node_access().remote || o.node_access().accesses || o.remote_to_local());
    EXPECT_NE(to_string(o).find("node_access:                 NOT measured: no PMU"), std::string::npos) << to_string(o);
    EXPECT_EQ(observation_capabilities().status(counter_group::node_access).reason, s.reason);
}

TEST(observe, every_descriptor_closed_at_stop_and_destruction) {
    const int before = open_descriptors();
    {
        observation_scope scope;
        if (software_available()) EXPECT_GE(open_descriptors(), before + 3); // 3 events per thread
        scope.stop();
        EXPECT_EQ(open_descriptors(), before);
        scope.start();
    } // destroyed started
    EXPECT_EQ(open_descriptors(), before);
    observation_scope deferred(observe_options{}, std::defer_lock);
    EXPECT_EQ(open_descriptors(), before);
    EXPECT_FALSE(deferred.started());
}

TEST(observe, what_the_report_says) {
    std::ostringstream text;
    print_report(text);
    for (const char* g : {"numastat", "vmstat", "software", "node_access"}) {
        const group_status& s = observation_capabilities().status(
            g[0] == 'n' ? (g[1] == 'u' ? counter_group::numastat : counter_group::node_access)
                        : g[0] == 'v' ? counter_group::vmstat : counter_group::software);
        std::string line = std::string("observation ") + g + ":";
        line.resize(29, ' ');
        line += s.measured ? "yes" : "NO (" + s.reason + ")";
        EXPECT_NE(text.str().find(line), std::string::npos) << line << "\n" << text.str();
    }
}

TEST(observe_attack, starting_twice_and_stopping_unstarted_throw) {
    observation_scope scope(observe_options{}, std::defer_lock);
    EXPECT_THROW(scope.stop(), observation_state_error);
    scope.start();
    EXPECT_TRUE(scope.started());
    EXPECT_THROW(scope.start(), observation_state_error);
    scope.stop();
    EXPECT_THROW(scope.stop(), std::logic_error);
    observation_scope moved_from;
    observation_scope moved(std::move(moved_from));
    EXPECT_FALSE(moved_from.started()); // NOLINT(bugprone-use-after-move): valid, not started
    EXPECT_THROW(moved_from.stop(), observation_state_error);
    EXPECT_TRUE(moved.started());
    moved.stop();
}

TEST(observe_attack, nested_and_overlapping_scopes_on_several_threads) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    const int before = open_descriptors();
    const std::size_t pages = 256;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            region a(pages), b(pages);
            observation_scope outer;
            memory::touch(a.p, a.bytes);
            observation_scope inner;
            observation_scope overlapping;
            memory::touch(b.p, b.bytes);
            const observation i = inner.stop();
            const observation o = outer.stop(); // stopped before `overlapping`, started after it
            const observation v = overlapping.stop();
            failures += !(i.software().page_faults && *i.software().page_faults >= pages);
            failures += !(o.software().page_faults && *o.software().page_faults >= 2 * pages);
            failures += !(v.software().page_faults && *v.software().page_faults >= pages);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(open_descriptors(), before);
}

TEST(observe_attack, fork_inside_a_scope) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    observation_scope scope;
    const int code = numaplace_test::run_child([&] {
        const observation o = scope.stop();
        const group_status& s = o.status(counter_group::software);
        if (s.measured || o.software().page_faults || s.reason != "forked inside the scope: its perf events count the parent's threads")
            return 1;
        if (o.status(counter_group::node_access).measured) return 2;
        if (!o.status(counter_group::numastat).measured) return 3; // system-wide: still right in the child
        return 0;
    });
    EXPECT_EQ(code, 0);
    const observation o = scope.stop();
    EXPECT_TRUE(o.status(counter_group::software).measured);
}

// A process started under a seccomp filter that refuses perf_event_open (EPERM), probe included.
TEST(observe_attack, seccomp_eperm_from_start_up) {
    if (numaplace_test::rerun_started_under_seccomp({SYS_perf_event_open})) return;
    for (const group_status* s : {&observation_capabilities().status(counter_group::software),
                                  &observation_capabilities().status(counter_group::node_access)}) {
        EXPECT_FALSE(s->measured);
        EXPECT_EQ(s->error, EPERM);
        EXPECT_EQ(s->reason, "seccomp: perf_event_open EPERM (EPERM)");
    }
    observation_scope scope;
    const observation o = scope.stop();
    EXPECT_EQ(o.status(counter_group::software).error, EPERM);
    EXPECT_FALSE(o.software().cpu_migrations || o.software().page_faults || o.software().context_switches);
    EXPECT_TRUE(o.status(counter_group::numastat).measured);
}

// A filter applied to every thread after scopes worked (ENOSYS): the next scope says so.
TEST(observe_attack, seccomp_enosys_after_start_up) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    const int code = numaplace_test::run_child([] {
        if (!observation_scope().stop().status(counter_group::software).measured) return 1;
        if (!numaplace_test::deny_syscalls_with({SYS_perf_event_open}, ENOSYS, true)) return 2;
        const observation o = observation_scope().stop();
        const group_status& s = o.status(counter_group::software);
        if (s.measured || s.error != ENOSYS || s.reason != "seccomp: perf_event_open ENOSYS (ENOSYS)") return 3;
        return o.software().page_faults ? 4 : 0;
    });
    EXPECT_EQ(code, 0);
}

// An unprivileged process under perf_event_paranoid >= 2 may not count in the kernel: EACCES, for real.
TEST(observe_attack, paranoia_refuses_an_unprivileged_process) {
    int level = 0;
    if (!detail::os_perf_event_paranoid(level) || level < 2) GTEST_SKIP() << "perf_event_paranoid < 2 here";
    if (getuid() == 0 && !detail::os_perf_privileged()) GTEST_SKIP() << "root without CAP_PERFMON";
    const int code = numaplace_test::run_child([level] {
        if (getuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)) return 1;
        if (detail::os_perf_privileged()) return 2;
        const observation o = observation_scope().stop();
        const group_status& s = o.status(counter_group::software);
        const std::string expected = "perf_event_paranoid = " + std::to_string(level) +
                                     " and no CAP_PERFMON: events that count in the kernel are refused (EACCES)";
        if (s.measured || s.error != EACCES || s.reason != expected) return 3;
        return o.software().cpu_migrations ? 4 : 0;
    });
    EXPECT_EQ(code, 0);
}

// Each refusal of the hardware group, made on purpose through the test seam; the software group still counts.
int refusal = 0;
int refuse_hardware(const detail::perf_event_spec& spec, int pid, int cpu) noexcept {
    if (spec.type == PERF_TYPE_HW_CACHE) return -refusal;
    detail::perf_open_override.store(nullptr);
    const int fd = detail::os_perf_event_open(spec, pid, cpu, pid >= 0);
    detail::perf_open_override.store(&refuse_hardware);
    return fd;
}
TEST(observe_attack, each_refusal_of_the_node_events_is_reported) {
    const std::pair<int, const char*> cases[] = {
        {EACCES, nullptr}, // the paranoia text, with the level read
        {ENOENT, detail::os_core_pmu_present() ? "the processor's PMU has no generic node events (PERF_COUNT_HW_CACHE_NODE) (ENOENT)"
                                               : "no PMU: this processor/VM exposes no hardware cache events (ENOENT)"},
        {EOPNOTSUPP, detail::os_core_pmu_present() ? "the processor's PMU has no generic node events (PERF_COUNT_HW_CACHE_NODE) (EOPNOTSUPP)"
                                                   : "no PMU: this processor/VM exposes no hardware cache events (EOPNOTSUPP)"},
        {EPERM, "perf_event_open refused by a security policy (EPERM)"},
        {ENOSYS, "no perf events in this kernel (CONFIG_PERF_EVENTS off) (ENOSYS)"},
        {EMFILE, "no file descriptor free: the descriptor limit (RLIMIT_NOFILE, ulimit -n) is reached (EMFILE)"}};
    for (const auto& c : cases) {
        refusal = c.first;
        detail::perf_open_override.store(&refuse_hardware);
        const observation o = observation_scope().stop();
        detail::perf_open_override.store(nullptr);
        const group_status& s = o.status(counter_group::node_access);
        EXPECT_FALSE(s.measured);
        EXPECT_EQ(s.error, c.first);
        if (c.second) EXPECT_EQ(s.reason, c.second);
        else EXPECT_EQ(s.reason.rfind("perf_event_paranoid = ", 0), 0u) << s.reason;
        EXPECT_FALSE(o.node_access().local || o.node_access().remote || o.node_access().misses || o.remote_to_local());
        EXPECT_EQ(o.status(counter_group::software).measured, software_available());
    }
}

TEST(observe_attack, descriptor_limit_reached) {
    if (!software_available()) GTEST_SKIP() << observation_capabilities().status(counter_group::software).reason;
    const int code = numaplace_test::run_child([] {
        rlimit limit{1024, 1024};
        if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur > 4096) limit.rlim_cur = 4096;
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 1;
        std::vector<int> fillers; // every descriptor taken, then two given back: 3 are needed per thread
        for (int fd; (fd = dup(0)) >= 0;) fillers.push_back(fd);
        for (int k = 0; k < 2; ++k, fillers.pop_back()) close(fillers.back());
        const int open = open_descriptors();
        const observation o = observation_scope().stop();
        const group_status& s = o.status(counter_group::software);
        if (s.measured || s.error != EMFILE ||
            s.reason != "no file descriptor free: the descriptor limit (RLIMIT_NOFILE, ulimit -n) is reached (EMFILE)") {
            std::cerr << "software: " << s.reason << '\n';
            return 2;
        }
        return open_descriptors() == open ? 0 : 3;
    });
    EXPECT_EQ(code, 0);
}

TEST(observe_attack, topology_of_another_machine_reads_this_machines_counters) {
    const auto other = topology::from_synthetic("pack:4 numa:1 core:1 pu:1");
    observe_options options;
    options.of_topology = other.get();
    const observation o = observation_scope(options).stop();
    const group_status& s = o.status(counter_group::numastat);
    ASSERT_TRUE(s.measured) << s.reason;
    EXPECT_EQ(s.reason, "the topology is not this system's (XML or synthetic): the counters are this machine's kernel "
                        "nodes, node ids unknown (-1)");
    const auto online = detail::parse_id_list(detail::read_line("/sys/devices/system/node/online"));
    ASSERT_EQ(o.numastat().size(), online.size());
    for (std::size_t i = 0; i < online.size(); ++i) {
        EXPECT_EQ(o.numastat()[i].node, -1);
        EXPECT_EQ(o.numastat()[i].os_index, online[i]);
    }
}

TEST(observe_attack, sys_node_hidden) {
    const unsigned os = topology::get().nodes().front().os_index;
    const int code = numaplace_test::run_child([os] {
        if (unshare(CLONE_NEWNS) != 0) return 77;
        if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            mount("none", "/sys/devices/system/node", "tmpfs", 0, nullptr) != 0)
            return 77;
        const observation o = observation_scope().stop();
        const group_status& s = o.status(counter_group::numastat);
        const std::string expected = "/sys/devices/system/node/node" + std::to_string(os) +
                                     "/numastat missing: /sys/devices/system/node hidden: No such file or directory (errno 2)";
        if (s.measured || s.error != ENOENT || s.reason != expected || !o.numastat().empty()) return 1;
        return o.status(counter_group::vmstat).measured ? 0 : 2;
    });
    if (code == 77) GTEST_SKIP() << "no mount namespace here (needs CAP_SYS_ADMIN)";
    EXPECT_EQ(code, 0);
}

// 64 MiB bound to node 1, first touched from a thread on node 0: node 1's numa_hit and other_node rise by
// at least its pages, node 0's local_node by fewer.
TEST(observe_nodes, first_touch_bound_to_node_1_from_node_0) {
    const topology& topo = topology::get();
    if (topo.size() < 2 || !topo.at(0).has_cpus()) GTEST_SKIP() << "one node: no two nodes to tell apart";
    const std::size_t bytes = std::size_t(64) << 20, pages = bytes / page();
    region r(pages);
    ASSERT_EQ(memory::bind(r.p, r.bytes, memory::policy_mode::bind, node_set{1}), 0);
    observation_scope scope;
    std::thread([&] {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (unsigned c : topo.at(0).cpus) CPU_SET(c, &set);
        ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0);
        memory::touch(r.p, r.bytes);
    }).join();
    const observation o = scope.stop();
    ASSERT_TRUE(o.status(counter_group::numastat).measured) << o.status(counter_group::numastat).reason;
    const numastat_delta &n0 = o.numastat()[0], &n1 = o.numastat()[1];
    EXPECT_GE(n1.numa_hit, pages);
    EXPECT_GE(n1.other_node, pages);
    EXPECT_LT(n0.local_node, pages);
    std::cout << to_string(o);
}

} // namespace
