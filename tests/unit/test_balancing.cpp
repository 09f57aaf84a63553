// balancing.hpp: /proc/vmstat counters of NUMA balancing, bind_with_balancing, and the
// MPOL_F_NUMA_BALANCING capability. Where balancing actually migrates pages: tests/guests/balancing/.
#include <numaplace/balancing.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/report.hpp>
#include <numaplace/where.hpp>

#include "seccomp.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include <sys/mman.h>
#include <sys/utsname.h>

namespace np = numaplace;
using namespace numaplace;

namespace {
constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();

bool kernel_at_least(int major, int minor) {
    utsname u{};
    if (::uname(&u) != 0) return false;
    int a = 0, b = 0;
    if (std::sscanf(u.release, "%d.%d", &a, &b) != 2) return false;
    return a > major || (a == major && b >= minor);
}
struct mapping {
    explicit mapping(std::size_t length) : bytes(length) {
        p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    ~mapping() { ::munmap(p, bytes); }
    std::size_t bytes;
    void* p;
};
} // namespace

TEST(balancing, counters_read_proc_vmstat) {
    balancing_counters a = balancing_counters::read();
    ASSERT_TRUE(a.available) << "this kernel has CONFIG_NUMA_BALANCING (Debian's has)";
    EXPECT_GE(a.hint_faults, a.hint_faults_local);
    balancing_counters b = balancing_counters::read();
    balancing_counters d = b.since(a);
    EXPECT_TRUE(d.available);
    EXPECT_EQ(d.pages_migrated, b.pages_migrated - a.pages_migrated);
    // a counter that went down (not possible in the kernel) gives 0, not a wrapped value
    balancing_counters big = a;
    big.pages_migrated += 5;
    EXPECT_EQ(a.since(big).pages_migrated, 0u);
    EXPECT_EQ(big.since(a).pages_migrated, 5u);
    EXPECT_FALSE(a.since(balancing_counters()).available);
}

TEST(balancing, capability_matches_the_kernel) {
    const auto& caps = topology::get().capabilities();
    // the flag exists since 5.12; where mbind works at all it must work with the flag
    if (kernel_at_least(5, 12)) EXPECT_EQ(caps.numa_balancing_bind, caps.memory_binding);
    else EXPECT_FALSE(caps.numa_balancing_bind);
    std::ostringstream report;
    print_report(report);
    EXPECT_NE(report.str().find(std::string("MPOL_F_NUMA_BALANCING:       ") +
                                (caps.numa_balancing_bind ? "yes" : "NO")),
              std::string::npos);
}

TEST(balancing, bind_with_balancing_sets_the_flag) {
    if (!topology::get().capabilities().numa_balancing_bind) GTEST_SKIP() << "no MPOL_F_NUMA_BALANCING here";
    const std::size_t page = detail::page_size();
    mapping m(4 * page);
    const auto all = topology::get().all();
    EXPECT_TRUE(bind_with_balancing(m.p, m.bytes, all));
    int mode = -1;
    unsigned long mask[16] = {};
    ASSERT_EQ(::syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, m.p, 2 /*MPOL_F_ADDR*/), 0);
    EXPECT_EQ(mode, detail::mpol_bind | detail::mpol_f_numa_balancing);
    for (int id : all) {
        const unsigned os = topology::get().at(id).os_index;
        EXPECT_TRUE((mask[os / 64] >> (os % 64)) & 1ul) << "node " << id;
    }
    // pages come from the bound nodes
    static_cast<char*>(m.p)[0] = 1;
    // bad input
    EXPECT_THROW(bind_with_balancing(m.p, m.bytes, node_set{}), invalid_placement);
    EXPECT_THROW(bind_with_balancing(m.p, m.bytes, node_set{static_cast<int>(topology::get().size())}), unknown_node);
    EXPECT_THROW(bind_with_balancing(static_cast<char*>(m.p) + 1, page, all), invalid_placement);
    EXPECT_TRUE(bind_with_balancing(m.p, 0, all));
}

TEST(balancing, strict_throws_and_degrading_records_under_seccomp) {
    const std::size_t page = detail::page_size();
    int code = numaplace_test::run_denied(numaplace_test::memory_policy_syscalls(), [&] {
        mapping m(page);
        try {
            bind_with_balancing(m.p, m.bytes, node_set{0});
            return 10;
        } catch (const placement_error& e) {
            if (e.error_number() != EPERM || e.node() != 0 || e.bytes() != page) return 11;
        }
        const std::size_t before = degradation_count();
        if (bind_with_balancing(m.p, m.bytes, node_set{0}, fallback::degrade)) return 12;
        if (degradation_count() != before + 1) return 13;
        bool found = false;
        for (const auto& msg : degradations())
            found |= msg == "bind_with_balancing: mbind bind (with NUMA balancing) to node 0 refused (Operation not permitted): left to first touch";
        return found ? 0 : 14;
    });
    EXPECT_EQ(code, 0);
}

TEST(balancing, capability_is_false_when_started_under_seccomp) {
    // Re-runs this test in a child started (exec) under the filter, so the probe itself runs under it.
    if (numaplace_test::rerun_started_under_seccomp()) return;
    const auto& caps = topology::get().capabilities();
    EXPECT_FALSE(caps.memory_binding);
    EXPECT_FALSE(caps.numa_balancing_bind);
    std::ostringstream report;
    print_report(report);
    EXPECT_NE(report.str().find("MPOL_F_NUMA_BALANCING:       NO"), std::string::npos);
}

// The placement form: any placement (a user-written one through place_pages) can bind with
// MPOL_F_NUMA_BALANCING. Bound to the last node only: every page must land there (exact count in the
// guests); where the kernel lacks the flag, strict throws EINVAL and degrading binds plainly, recorded.
TEST(balancing, place_pages_bind_balancing_places_on_the_nodes_and_sets_the_flag) {
    const auto& topo = topology::get();
    if (!topo.capabilities().memory_binding) GTEST_SKIP() << "mbind refused here: the seccomp tests cover it";
    const std::size_t page = detail::page_size(), pages = 8;
    const int last = static_cast<int>(topo.size()) - 1;
    const bool has = topo.capabilities().numa_balancing_bind;
    void* p = memory::map(pages * page);
    const std::size_t before = degradation_count();
    EXPECT_TRUE(place_pages(p, pages * page, memory::policy_mode::bind_balancing, node_set{last}, fallback::degrade));
    int mode = -1;
    unsigned long mask[16] = {};
    ASSERT_EQ(::syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, p, 2 /*MPOL_F_ADDR*/), 0);
    EXPECT_EQ(mode, has ? (detail::mpol_bind | detail::mpol_f_numa_balancing) : detail::mpol_bind);
    EXPECT_EQ(degradation_count(), before + (has ? 0u : 1u));
    std::memset(p, 1, pages * page);
    const page_histogram h = where(p, pages * page);
    EXPECT_EQ(h.on(last), pages) << "every page on node " << last;
    memory::unmap(p, pages * page);

    void* q = memory::map(page);
    if (has) {
        EXPECT_TRUE(place_pages(q, page, memory::policy_mode::bind_balancing, topo.all(), fallback::strict));
    } else {
        try {
            place_pages(q, page, memory::policy_mode::bind_balancing, topo.all(), fallback::strict);
            ADD_FAILURE() << "strict bind_balancing without kernel support must throw";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), EINVAL);
        }
    }
    memory::unmap(q, page);
    EXPECT_STREQ(memory::name(memory::policy_mode::bind_balancing), "bind (with NUMA balancing)");
}

// --- attacks -----------------------------------------------------------------------------------------

TEST(balancing_attack, bad_ranges) {
    const std::size_t page = np::detail::page_size();
    const np::node_set all = np::topology::get().all();
    std::vector<char> buf(3 * page);
    char* aligned = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(buf.data()) + page - 1) / page * page);
    EXPECT_THROW(np::bind_with_balancing(aligned + 1, page, all), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, max_size, all), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, max_size - page, all, np::fallback::degrade), np::invalid_placement);
    EXPECT_THROW(np::bind_with_balancing(aligned, page, np::node_set{}), np::invalid_placement);
    EXPECT_TRUE(np::bind_with_balancing(aligned, 0, all));
}

// One contract for binding with NUMA balancing (bind_with_balancing and place_pages(bind_balancing)), on
// a simulated kernel older than 5.12 (mbind with MPOL_F_NUMA_BALANCING fails with EINVAL): admitted
// once, strict throws EINVAL, degrading binds plainly and says so.
TEST(balancing, one_contract_on_a_kernel_without_the_flag) {
    if (!topology::get().capabilities().memory_binding) GTEST_SKIP() << "mbind refused here";
    const std::size_t page = detail::page_size();
    // More than half of what node 0 can take: a second admission of the same request would refuse it.
    std::uint64_t free_kb = 0;
    {
        std::FILE* f = std::fopen(("/sys/devices/system/node/node" + std::to_string(topology::get().at(0).os_index) + "/meminfo").c_str(), "r");
        ASSERT_NE(f, nullptr);
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (const char* at = std::strstr(line, "MemFree:")) std::sscanf(at + 8, "%llu", reinterpret_cast<unsigned long long*>(&free_kb));
        std::fclose(f);
    }
    const std::size_t bytes = static_cast<std::size_t>(free_kb * 1024 / 10 * 6) / page * page;
    pid_t pid = fork();
    if (pid == 0) {
        if (!numaplace_test::refuse_mbind_mode_flags_with_einval(detail::mpol_f_numa_balancing)) _exit(90);
        int code = 0;
        try {
            for (int way = 0; way < 2 && code == 0; ++way) {
                void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                if (p == MAP_FAILED) _exit(91);
                auto bind = [&](fallback fb) {
                    return way == 0 ? bind_with_balancing(p, bytes, node_set{0}, fb)
                                    : place_pages(p, bytes, memory::policy_mode::bind_balancing, node_set{0}, fb);
                };
                try {
                    bind(fallback::strict);
                    code = 10;
                } catch (const placement_error& e) {
                    if (e.error_number() != EINVAL) code = 11;
                }
                const std::size_t before = degradation_count();
                if (code == 0 && bind(fallback::degrade)) code = 12;
                if (code == 0 && degradation_count() != before + 1) code = 13;
                bool said = false;
                for (const auto& m : degradations()) said |= m.find("without NUMA balancing") != std::string::npos;
                if (code == 0 && !said) code = 14;
                int mode = -1;
                unsigned long mask[16] = {};
                if (code == 0 && (::syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, p, 2 /*MPOL_F_ADDR*/) != 0 ||
                                  mode != detail::mpol_bind))
                    code = 15; // bound plainly: MPOL_BIND, no flag
                ::munmap(p, bytes);
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "child: %s\n", e.what());
            code = 92; // e.g. ENOMEM: admitted twice
        }
        _exit(code);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

// /proc/vmstat, line by line: an unparsable line (a new kernel's format, a value too large) before the
// numa_* keys hides none of them; a value too large for 64 bits is that line only.
TEST(balancing, counters_parse_past_lines_that_do_not_parse) {
    std::istringstream in("nr_free_pages 12\n"
                          "a line without a number\n"
                          "nr_weird 99999999999999999999999\n"
                          "\n"
                          "numa_pte_updates 7\n"
                          "numa_hint_faults 5\n"
                          "numa_hint_faults_local 3\n"
                          "numa_pages_migrated 2\n");
    const balancing_counters c = balancing_counters::parse(in);
    EXPECT_TRUE(c.available);
    EXPECT_EQ(c.pte_updates, 7u);
    EXPECT_EQ(c.hint_faults, 5u);
    EXPECT_EQ(c.hint_faults_local, 3u);
    EXPECT_EQ(c.pages_migrated, 2u);
    std::istringstream none("nr_free_pages 12\n");
    EXPECT_FALSE(balancing_counters::parse(none).available);
}
