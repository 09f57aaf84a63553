// omp.hpp's arguments at their boundaries and an empty team's answers: static_share for 0, 1, T-1, T and
// SIZE_MAX-k threads or thread numbers; team::current for team sizes no runtime can make; node_of past
// the team; a default-constructed or moved-from team given to partitions and loops. Linked into test_omp
// (a binary of its own would cost a guest boot per layout).
#include <numaplace/omp.hpp>

#include <gtest/gtest.h>

#include <child.hpp>

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace omp = numaplace::omp;
using numaplace::invalid_placement;
using numaplace::partition;

namespace {
const bool in_child = std::getenv("NUMAPLACE_OMP_CONTRACT_CHILD") != nullptr;
// A team bound one thread per hardware thread, in CPU order (every thread within one node).
std::vector<std::pair<std::string, std::string>> bound_env(int threads) {
    return {{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "threads"}, {"OMP_NUM_THREADS", std::to_string(threads)}};
}
int cpus() {
    int n = 0;
    for (const auto& node : numaplace::topology::get().nodes()) n += static_cast<int>(node.cpus.size());
    return n;
}

// Runs `f`, which must throw invalid_placement whose message contains `words`.
template <class F>
void expect_invalid(F f, const std::string& words, const std::string& what) {
    SCOPED_TRACE(what);
    try {
        f();
        ADD_FAILURE() << "no exception";
    } catch (const invalid_placement& e) {
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
}
} // namespace

TEST(omp_contract, static_share_is_refused_for_no_thread_and_exact_at_every_boundary) {
    static_assert(!noexcept(omp::static_share(1, 1, 0)), "static_share throws: not noexcept");
    const std::size_t big = SIZE_MAX;
    // no thread at all (was SIGFPE), or a thread that is not in the team (was given a share)
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(5), big}) {
        expect_invalid([&] { (void)omp::static_share(n, 0, 0); }, "thread 0 of a team of 0 threads", "0 threads");
        expect_invalid([&] { (void)omp::static_share(n, 4, 4); }, "thread 4 of a team of 4 threads", "t == T");
        expect_invalid([&] { (void)omp::static_share(n, 4, big); }, "thread " + std::to_string(big), "t = SIZE_MAX");
        expect_invalid([&] { (void)omp::static_share(n, big - 1, big - 1); }, "of a team of " + std::to_string(big - 1),
                       "t == T = SIZE_MAX-1");
        EXPECT_EQ(omp::static_share(n, 1, 0), n);
    }
    // T-1, the last thread, and the sum over the team, for team sizes 1..9 and n around multiples of T
    for (std::size_t t = 1; t <= 9; ++t)
        for (std::size_t n = 0; n <= 3 * t + 1; ++n) {
            std::size_t sum = 0;
            for (std::size_t k = 0; k < t; ++k) sum += omp::static_share(n, t, k);
            EXPECT_EQ(sum, n) << n << " over " << t;
            EXPECT_EQ(omp::static_share(n, t, t - 1), n / t) << n << " over " << t; // the last never gets the +1
            EXPECT_EQ(omp::static_share(n, t, 0), n / t + (n % t != 0 ? 1 : 0)) << n << " over " << t;
        }
    // SIZE_MAX-k iterations and threads: no overflow
    EXPECT_EQ(omp::static_share(big, big, big - 1), 1u);
    EXPECT_EQ(omp::static_share(big - 1, big, big - 2), 1u);
    EXPECT_EQ(omp::static_share(big - 1, big, big - 1), 0u);
    EXPECT_EQ(omp::static_share(big, 2, 0), big / 2 + 1);
    EXPECT_EQ(omp::static_share(big, 2, 1), big / 2);
    EXPECT_EQ(omp::static_share(big, big - 1, 0), 2u);
    EXPECT_EQ(omp::static_share(big, big - 1, 1), 1u);
}

TEST(omp_contract, an_empty_team_answers_zero_and_partitions_and_loops_refuse_it) {
    const auto expect_empty = [](const omp::team& tm, const std::string& what) {
        SCOPED_TRACE(what);
        EXPECT_EQ(tm.size(), 0);
        EXPECT_TRUE(tm.nodes().empty());
        EXPECT_EQ(tm.threads_on(0), 0u);
        EXPECT_EQ(tm.threads_on(-1), 0u);
        for (int t : {0, -1, INT_MAX}) expect_invalid([&] { (void)tm.node_of(t); }, "of a team of 0 threads", "node_of");
        for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(4096)}) {
            expect_invalid([&] { (void)omp::static_partition<double>(n, tm); }, "omp::static_partition: an empty team", "partition");
            expect_invalid([&] { (void)omp::static_rows<double>(n, 3, tm); }, "omp::static_rows: an empty team", "rows");
        }
        for (std::size_t n : {std::size_t(0), std::size_t(100)}) {
            int calls = 0;
            const partition<double> part(n, numaplace::topology::get().with_cpus());
            expect_invalid([&] { omp::parallel_for(part, [&](std::size_t) { ++calls; }, tm); }, "omp::parallel_for: an empty team",
                           "parallel_for");
            EXPECT_EQ(calls, 0);
        }
    };
    expect_empty(omp::team(), "default-constructed");
    if (!in_child) {
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_OMP_CONTRACT_CHILD", bound_env(cpus())), 0);
        return;
    }
    omp::team source = omp::team::current();
    const int size = source.size();
    ASSERT_GE(size, 1);
    omp::team moved(std::move(source));
    expect_empty(source, "moved-from (construction)");
    EXPECT_EQ(moved.size(), size);
    omp::team assigned;
    assigned = std::move(moved);
    expect_empty(moved, "moved-from (assignment)");
    EXPECT_EQ(assigned.size(), size);
    // node_of at the team's edges
    EXPECT_EQ(assigned.node_of(0), assigned.nodes()[0]);
    EXPECT_EQ(assigned.node_of(size - 1), assigned.nodes()[assigned.nodes().size() - 1]);
    for (int t : {-1, size, INT_MAX, INT_MIN})
        expect_invalid([&] { (void)assigned.node_of(t); }, "thread " + std::to_string(t) + " of a team of " + std::to_string(size),
                       "node_of " + std::to_string(t));
}

// A team of fewer than one thread is refused; above OMP_THREAD_LIMIT, `num_threads(T)` makes the smaller
// team (OpenMP caps it; libgomp neither refuses nor ends the process), and team::current(T) is that team.
TEST(omp_contract, team_sizes_below_one_are_refused_above_the_thread_limit_the_smaller_team) {
    if (!in_child) {
        auto env = bound_env(2);
        env.emplace_back("OMP_THREAD_LIMIT", "2");
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_OMP_CONTRACT_CHILD", env), 0);
        return;
    }
    ASSERT_EQ(omp_get_thread_limit(), 2);
    for (int threads : {0, -1, INT_MIN})
        expect_invalid([&] { (void)omp::team::current(threads); }, "a team of " + std::to_string(threads) + " threads (at least 1)",
                       std::to_string(threads));
    static_assert(std::is_base_of<std::invalid_argument, invalid_placement>::value, "");
    for (int threads : {1, 2, 3, 1 << 30, INT_MAX - 1, INT_MAX}) {
        int made = 0;
#pragma omp parallel num_threads(threads)
        {
            if (omp_get_thread_num() == 0) made = omp_get_num_threads();
        }
        EXPECT_EQ(made, std::min(threads, 2)) << threads << ": what OpenMP itself makes";
        EXPECT_EQ(omp::team::current(threads).size(), made) << threads;
    }
}

// Without a thread limit a team no runtime can start is refused before a region opens (libgomp ends the
// process on num_threads(1 << 30): "Out of memory allocating ..."), naming kernel.threads-max (at most
// 2^30 - 1 on Linux, so 1 << 30 and INT_MAX are above it on every machine).
TEST(omp_contract, a_team_above_kernel_threads_max_is_refused_before_a_region_opens) {
    if (!in_child) {
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_OMP_CONTRACT_CHILD", bound_env(2)), 0);
        return;
    }
    std::FILE* f = std::fopen("/proc/sys/kernel/threads-max", "r");
    long threads_max = 0;
    if (f) {
        if (std::fscanf(f, "%ld", &threads_max) != 1) threads_max = 0;
        std::fclose(f);
    }
    ASSERT_GT(threads_max, 0);
    if (omp_get_thread_limit() <= threads_max) // LLVM's libomp caps teams at a limit of its own
        GTEST_SKIP() << "the runtime's thread limit (" << omp_get_thread_limit() << ") is below kernel.threads-max";
    for (int threads : {1 << 30, INT_MAX - 1, INT_MAX})
        expect_invalid([&] { (void)omp::team::current(threads); },
                       "a team of " + std::to_string(threads) + " threads, more than the system may have (kernel.threads-max ",
                       std::to_string(threads));
    EXPECT_EQ(omp::team::current(1).size(), 1);
}

// More threads than places (README, docs/omp.md): the team is accepted exactly when the runtime's
// placement keeps nodes ascending with the thread numbers, and refused naming the first thread that
// goes back. GCC's libgomp puts T / P consecutive threads on each place, then the last T % P threads one
// per place from the first place: accepted when P divides T (8 threads on 4 cores), refused on two or
// more nodes otherwise. In the host's one node everything is accepted; the 2- and 4-node guests refuse.
TEST(omp_contract, more_threads_than_places_are_accepted_exactly_when_their_nodes_ascend) {
    if (!in_child) {
        EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_OMP_CONTRACT_CHILD",
                                                     {{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "threads"}}),
                  0);
        return;
    }
    const numaplace::topology& topo = numaplace::topology::get();
    const int places = omp_get_num_places();
    ASSERT_GE(places, 1);
    for (int threads : {places, places + 1, 2 * places - 1, 2 * places, 2 * places + 1, 3 * places}) {
        SCOPED_TRACE(std::to_string(threads) + " threads on " + std::to_string(places) + " places");
        std::vector<int> place(static_cast<std::size_t>(threads), -1);
        // twice: libgomp may place the threads a region adds to its pool otherwise the first time (a team
        // of 4 on 2 places right after one of 3: places 0 0 1 0, then 0 0 1 1; docs/omp.md)
        for (int run = 0; run < 2; ++run) {
#pragma omp parallel num_threads(threads)
            place[static_cast<std::size_t>(omp_get_thread_num())] = omp_get_place_num();
        }
        int back = -1; // the first thread on a node before its predecessor's
        std::vector<int> node(place.size(), -1);
        for (std::size_t t = 0; t < place.size(); ++t) {
            ASSERT_GE(place[t], 0);
            int cpu = -1;
            omp_get_place_proc_ids(place[t], &cpu); // OMP_PLACES=threads: one CPU per place
            node[t] = topo.node_of_cpu(static_cast<unsigned>(cpu));
            if (t > 0 && back < 0 && node[t] < node[t - 1]) back = static_cast<int>(t);
        }
#if defined(__GNUC__) && !defined(__clang__) // libgomp: T / P per place in order, then the rest round robin
        const int each = threads / places;
        for (int t = 0; t < threads; ++t)
            EXPECT_EQ(place[static_cast<std::size_t>(t)], t < each * places ? t / each : t - each * places) << "thread " << t;
        if (threads % places == 0) EXPECT_EQ(back, -1);
        if (threads % places != 0 && topo.with_cpus().size() > 1) EXPECT_EQ(back, each * places);
#endif
        try {
            const omp::team tm = omp::team::current(threads);
            EXPECT_EQ(back, -1) << "accepted, but thread " << back << " runs on a node before its predecessor's";
            EXPECT_EQ(tm.size(), threads);
            for (int t = 0; t < threads; ++t) EXPECT_EQ(tm.node_of(t), node[static_cast<std::size_t>(t)]) << "thread " << t;
        } catch (const omp::unbound_team& e) {
            EXPECT_EQ(e.thread(), back) << e.what();
            EXPECT_NE(std::string(e.what()).find("after thread " + std::to_string(back - 1)), std::string::npos) << e.what();
        }
    }
}
