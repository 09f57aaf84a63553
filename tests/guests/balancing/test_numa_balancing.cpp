// Guest-only, 2node booted with `numa-guest --numa-balancing` (kernel.numa_balancing=1, scanner sped
// up): the seeds' observation as assertions. A serially initialised array read by threads pinned to
// both nodes gains locality through migration (numa_pages_migrated grows); a numaplace-partitioned one
// starts at 1.0, stays there, and is never migrated (bound ranges are not sampled); a range bound with
// bind_with_balancing (MPOL_BIND | MPOL_F_NUMA_BALANCING) over both nodes is migrated within them.
//
// Counting pages while balancing samples them: before Linux 6.5, move_pages reports a page that the
// scanner has just made PROT_NONE as absent (-ENOENT) until its next access; with the sped-up scanner
// most of the array is absent at any moment. So the counts before and after are taken with
// balancing switched off (kernel.numa_balancing=0, the guest runs as root) right after the pinned
// readers have read their halves once more (which maps every page again); while it runs, progress is
// read from /proc/vmstat. Progress checks in between count only present pages.
#include <numaplace/balancing.hpp>
#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <time_scale.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>

using namespace numaplace;

namespace {
// No transparent huge pages in this process, from before main: numa_pages_migrated is system-wide, and a
// reader thread reusing a cached 2 MiB-backed stack that another node's thread touched first would add
// 512 migrations of memory that is not the array's (seen: +523 during the partitioned test).
const int thp_disabled = ::prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);

void set_balancing(int on) {
    FILE* f = std::fopen("/proc/sys/kernel/numa_balancing", "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "%d\n", on);
    ASSERT_EQ(std::fclose(f), 0);
}
const std::size_t page = detail::page_size();
constexpr std::size_t pages = 2048; // 8 MiB
constexpr std::size_t bytes = pages * 4096; // (4 KiB pages: asserted below)

void pin(unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
}

// Pages of [p, p+bytes) on node 0 in the first half and node 1 in the second, over pages present.
struct count {
    std::size_t local = 0, present = 0, on1 = 0;
    double locality() const { return present ? double(local) / double(present) : 0.0; }
};
count count_pages(const char* p) {
    // one batched page query: the element index of a byte is its offset
    partition_locality r = locality(p, bytes, [](std::size_t i) { return i < bytes / 2 ? 0 : 1; });
    count c;
    c.present = r.histogram.touched();
    c.local = r.local;
    c.on1 = r.histogram.on(1);
    return c;
}

// Two readers per node (cpus 0,1 read the first half, 2,3 the second), until `stop` says so (the
// main thread asks every 100 ms); then balancing is switched off and each reader reads once more.
// \returns the count then.
template <class Stop>
count read_until(const char* p, Stop&& stop, bool count_each_check = true) {
    std::atomic<bool> done{false};
    std::vector<std::thread> readers;
    for (unsigned cpu = 0; cpu < 4; ++cpu)
        readers.emplace_back([&, cpu] {
            pin(cpu);
            const char* half = p + (cpu < 2 ? 0 : bytes / 2);
            volatile long sink = 0;
            while (!done.load(std::memory_order_relaxed))
                for (std::size_t i = 0; i < bytes / 2; i += 64) sink = sink + half[i];
            for (std::size_t i = 0; i < bytes / 2; i += page) sink = sink + half[i];
        });
    const auto start = std::chrono::steady_clock::now();
    do {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (!stop(count_each_check ? count_pages(p) : count(), std::chrono::steady_clock::now() - start));
    set_balancing(0);
    done = true;
    for (auto& t : readers) t.join();
    count c = count_pages(p);
    set_balancing(1);
    return c;
}

enum class bind { none, with_balancing, plain };

char* map_serially_initialised(bind how) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    EXPECT_EQ(::madvise(m, bytes, MADV_NOHUGEPAGE), 0); // 4 KiB pages: migrated and counted one by one
    if (how == bind::with_balancing) EXPECT_TRUE(bind_with_balancing(m, bytes, node_set{0, 1}));
    if (how == bind::plain) {
        detail::kernel_nodemask mask;
        mask.set(0);
        mask.set(1);
        EXPECT_EQ(detail::os_mbind(m, bytes, detail::mpol_bind, mask, 0), 0);
    }
    std::thread([m] {
        pin(0);
        std::memset(m, 1, bytes);
    }).join();
    return static_cast<char*>(m);
}

#define REQUIRE_BALANCING_GUEST()                                                                     \
    do {                                                                                              \
        ASSERT_EQ(page, 4096u);                                                                       \
        ASSERT_NE(std::getenv("NUMAPLACE_GUEST_NUMA_BALANCING"), nullptr)                             \
            << "run in `numa-guest --layout 2node --numa-balancing` (ctest guest.2node.test_numa_balancing)"; \
        ASSERT_EQ(topology::get().capabilities().numa_balancing, 1);                                  \
        ASSERT_EQ(topology::get().size(), 2u);                                                        \
        ASSERT_EQ(thp_disabled, 0);                                                                   \
    } while (0)

using seconds = std::chrono::duration<double>;
} // namespace

TEST(numa_balancing, serial_init_gains_locality_through_migration) {
    REQUIRE_BALANCING_GUEST();
    for (bool cooperative : {false, true}) {
        set_balancing(0);
        char* p = map_serially_initialised(cooperative ? bind::with_balancing : bind::none);
        count before = count_pages(p);
        EXPECT_EQ(before.present, pages);
        EXPECT_EQ(before.on1, 0u);
        EXPECT_EQ(before.local, pages / 2) << "every page on node 0: locality 0.5";
        set_balancing(1);
        balancing_counters start = balancing_counters::read();
        count after = read_until(p, [&](const count&, auto elapsed) {
            return balancing_counters::read().since(start).pages_migrated >= pages / 2 * 95 / 100 ||
                   elapsed > numaplace_test::scaled(seconds(60)); // about 1 s on a quiet host
        });
        balancing_counters d = balancing_counters::read().since(start);
        std::printf("%s: locality %.3f -> %.3f (%zu of %zu pages present), numa_pages_migrated +%llu, "
                    "numa_hint_faults +%llu (+%llu local)\n",
                    cooperative ? "bind_with_balancing {0,1}" : "serial init", before.locality(),
                    after.locality(), after.present, pages, (unsigned long long)d.pages_migrated,
                    (unsigned long long)d.hint_faults, (unsigned long long)d.hint_faults_local);
        EXPECT_EQ(after.present, pages);
        EXPECT_GE(after.locality(), 0.95);
        EXPECT_GE(after.on1, pages / 2 * 95 / 100);
        EXPECT_GE(d.pages_migrated, after.on1) << "every page on node 1 was migrated there";
        EXPECT_GT(d.hint_faults, 0u);
        ::munmap(p, bytes);
    }
}

TEST(numa_balancing, partitioned_array_starts_local_and_is_never_migrated) {
    REQUIRE_BALANCING_GUEST();
    constexpr std::size_t n = bytes / sizeof(double);
    const partition<double> whole(n);
    partitioned_vector<double> v(n, partitioned_allocator<double>(whole));
    first_touch(v);
    const partition<double> part = partition_of(v);
    ASSERT_EQ(part.block_count(), 2u);
    const char* p = reinterpret_cast<const char*>(v.data());
    ASSERT_EQ(part.block(0).size() * sizeof(double), bytes / 2) << "equal cores per node: halves";
    count before = count_pages(p);
    EXPECT_EQ(before.present, pages);
    EXPECT_EQ(before.local, pages);
    balancing_counters start = balancing_counters::read();
    // a bound range is not sampled: every page stays present and local at every check
    std::size_t checks = 0;
    count after = read_until(p, [&](const count& c, auto elapsed) {
        EXPECT_EQ(c.present, pages);
        EXPECT_EQ(c.local, pages);
        (void)elapsed;
        return ++checks == 5; // 5 checks, 100 ms apart at least
    });
    balancing_counters d = balancing_counters::read().since(start);
    std::printf("partitioned: locality %.3f -> %.3f, numa_pages_migrated +%llu, numa_hint_faults +%llu\n",
                before.locality(), after.locality(), (unsigned long long)d.pages_migrated,
                (unsigned long long)d.hint_faults);
    EXPECT_EQ(after.present, pages);
    EXPECT_EQ(after.local, pages);
    // numa_pages_migrated is system-wide: the test's own stacks, heap and libraries may move a few
    // pages (12-40 seen); the array's pages did not move (above); half the serial array's did.
    EXPECT_LT(d.pages_migrated, pages / 20);
}

// The contrast for bind_with_balancing: the same range bound with plain MPOL_BIND over both nodes is
// not sampled, so its pages stay on node 0 however the readers use them.
TEST(numa_balancing, plain_bind_over_both_nodes_is_never_migrated) {
    REQUIRE_BALANCING_GUEST();
    set_balancing(0);
    char* p = map_serially_initialised(bind::plain);
    count before = count_pages(p);
    EXPECT_EQ(before.present, pages);
    EXPECT_EQ(before.on1, 0u);
    set_balancing(1);
    balancing_counters start = balancing_counters::read();
    std::size_t checks = 0;
    count after = read_until(p, [&](const count& c, auto elapsed) {
        EXPECT_EQ(c.present, pages);
        EXPECT_EQ(c.on1, 0u);
        (void)elapsed;
        return ++checks == 5;
    });
    balancing_counters d = balancing_counters::read().since(start);
    std::printf("plain MPOL_BIND {0,1}: locality %.3f -> %.3f, numa_pages_migrated +%llu\n", before.locality(),
                after.locality(), (unsigned long long)d.pages_migrated);
    EXPECT_EQ(after.present, pages);
    EXPECT_EQ(after.on1, 0u);
    EXPECT_EQ(after.local, pages / 2);
    EXPECT_LT(d.pages_migrated, pages / 20); // system-wide: see the partitioned test
    ::munmap(p, bytes);
}

// bind_with_balancing over a single node: the pages cannot leave it (migration stays within the
// bound nodes), but the range is sampled, so the kernel sees which nodes use it (hint faults) and can
// move unpinned tasks towards it. Plain MPOL_BIND ranges give it nothing (see above).
TEST(numa_balancing, single_node_bind_with_balancing_is_sampled_but_stays) {
    REQUIRE_BALANCING_GUEST();
    set_balancing(0);
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    ASSERT_EQ(::madvise(m, bytes, MADV_NOHUGEPAGE), 0);
    ASSERT_TRUE(bind_with_balancing(m, bytes, node_set{0}));
    std::thread([m] {
        pin(2); // node 1's cpu: the bind wins over first touch
        std::memset(m, 1, bytes);
    }).join();
    char* p = static_cast<char*>(m);
    count before = count_pages(p);
    EXPECT_EQ(before.present, pages);
    EXPECT_EQ(before.on1, 0u);
    set_balancing(1);
    balancing_counters start = balancing_counters::read();
    // (no page counts while it runs: every access of a range that is sampled but cannot move faults
    // again, which makes page queries slow under TCG)
    count after = read_until(
        p,
        [&](const count&, auto elapsed) {
            return balancing_counters::read().since(start).hint_faults >= 2 * pages || elapsed > numaplace_test::scaled(seconds(60));
        },
        false);
    balancing_counters d = balancing_counters::read().since(start);
    std::printf("bind_with_balancing {0}: locality %.3f -> %.3f, numa_pages_migrated +%llu, numa_hint_faults +%llu "
                "(+%llu local)\n",
                before.locality(), after.locality(), (unsigned long long)d.pages_migrated,
                (unsigned long long)d.hint_faults, (unsigned long long)d.hint_faults_local);
    EXPECT_EQ(after.present, pages);
    EXPECT_EQ(after.on1, 0u);
    EXPECT_EQ(after.local, pages / 2);
    EXPECT_GE(d.hint_faults, 2 * pages) << "the range is sampled (plain MPOL_BIND: ~100 faults, none of its own)";
    EXPECT_LT(d.pages_migrated, pages / 20);
    ::munmap(m, bytes);
}
