// mpi.hpp, run by mpirun (tests/CMakeLists.txt: 2 ranks on the host; in the 2- and 4-node guests one
// rank per node, --bind-to numa): each rank's node against its binding, a shared window's segments on
// their ranks' nodes when another rank first-touches them, failures on one rank reaching every rank
// (overflow, a seccomp filter refusing mbind after start-up), degrading, moved-from windows, and the
// partition of a rank's work. Every test is collective: each rank runs it.
#include <numaplace/diagnostics.hpp>
#include <numaplace/mpi.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <seccomp.hpp>

#include <mpi.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
const std::size_t page = detail::page_size();
const char* const layout = std::getenv("NUMAPLACE_GUEST_LAYOUT"); // set in the guests

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int world_size() {
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}
// The node the calling thread runs on now (sched_getcpu): the oracle for a rank bound within a node.
int running_node() { return topology::get().current_node(); }
} // namespace

TEST(mpi, each_ranks_node_is_its_binding) {
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    ASSERT_EQ(nodes.size(), world_size());
    EXPECT_EQ(nodes.rank(), world_rank());
    EXPECT_EQ(nodes.node_of(nodes.rank()), running_node());
    if (layout) // mpirun --map-by numa --bind-to numa: rank r on node r
        for (int r = 0; r < nodes.size(); ++r) EXPECT_EQ(nodes.node_of(r), r) << "rank " << r;
    else if (topology::get().size() == 1)
        for (int r = 0; r < nodes.size(); ++r) EXPECT_EQ(nodes.node_of(r), 0);
    EXPECT_THROW(nodes.node_of(nodes.size()), std::out_of_range);
    EXPECT_THROW(nodes.node_of(-1), std::out_of_range);
}

TEST(mpi, a_shared_window_puts_each_segment_on_its_ranks_node_whoever_touches_first) {
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    const std::size_t count = 10 * page / sizeof(double) + 3; // 11 pages, the last one partly used
    mpi::shared_window<double> w(MPI_COMM_WORLD, count);
    ASSERT_NE(w.data(), nullptr);
    EXPECT_EQ(w.size(), count);
    EXPECT_EQ(w.node(), nodes.node_of(world_rank()));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w.data()) % page, 0u);
    if (world_rank() == 0) // rank 0 first-touches every rank's segment
        for (int r = 0; r < world_size(); ++r) {
            const auto seg = w.segment(r);
            ASSERT_GE(seg.second, count);
            for (std::size_t i = 0; i < count; ++i) seg.first[i] = r * 1e6 + static_cast<double>(i);
        }
    MPI_Barrier(MPI_COMM_WORLD);
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(w.data()[i], world_rank() * 1e6 + static_cast<double>(i));
    if (world_rank() == 0) // in the toucher's own mappings: every page of segment r on rank r's node
        for (int r = 0; r < world_size(); ++r) {
            const auto seg = w.segment(r);
            const page_histogram h = where(seg.first, count * sizeof(double));
            EXPECT_EQ(h.untouched, 0u) << "segment " << r;
            EXPECT_EQ(h.on(nodes.node_of(r)), 11u) << "segment " << r << " of rank on node " << nodes.node_of(r);
        }
    MPI_Barrier(MPI_COMM_WORLD);
}

TEST(mpi, a_window_of_zero_elements_and_a_moved_from_window) {
    mpi::shared_window<int> empty(MPI_COMM_WORLD, 0);
    EXPECT_EQ(empty.size(), 0u);
    EXPECT_NE(empty.window(), MPI_WIN_NULL);
    mpi::shared_window<int> w(MPI_COMM_WORLD, 5);
    int* const data = w.data();
    mpi::shared_window<int> moved(std::move(w));
    EXPECT_EQ(w.window(), MPI_WIN_NULL);
    EXPECT_EQ(w.data(), nullptr);
    EXPECT_EQ(w.size(), 0u);
    EXPECT_EQ(moved.data(), data);
    EXPECT_EQ(moved.size(), 5u);
    moved.data()[4] = 7;
    EXPECT_EQ(moved.segment(world_rank()).first[4], 7);
} // destroyed in reverse order on every rank: MPI_Win_free is collective, the moved-from one frees nothing

// The window's error handler follows the communicator's (a window gets MPI_ERRORS_ARE_FATAL by default,
// whatever its communicator has): with MPI_ERRORS_RETURN, or a handler of the user's, on the communicator,
// segment(r) of a rank outside the group throws mpi_error as documented instead of aborting the job (the
// outside tester's case: rc 6); a communicator whose errors are fatal keeps a fatal window.
namespace {
MPI_Errhandler window_handler(const mpi::shared_window<double>& w) {
    MPI_Errhandler h = MPI_ERRHANDLER_NULL;
    EXPECT_EQ(MPI_Win_get_errhandler(w.window(), &h), MPI_SUCCESS);
    return h;
}
void ignore_comm_errors(MPI_Comm*, int*, ...) {}
} // namespace

TEST(mpi_attack, a_window_returns_errors_when_its_communicator_does) {
    MPI_Comm comm = MPI_COMM_NULL;
    ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
    MPI_Errhandler user = MPI_ERRHANDLER_NULL;
    ASSERT_EQ(MPI_Comm_create_errhandler(ignore_comm_errors, &user), MPI_SUCCESS);
    for (const MPI_Errhandler on_comm : {MPI_ERRORS_RETURN, user}) {
        MPI_Comm_set_errhandler(comm, on_comm);
        mpi::shared_window<double> w(comm, 100);
        MPI_Errhandler h = window_handler(w);
        const bool returns = h == MPI_ERRORS_RETURN;
        MPI_Errhandler_free(&h);
        EXPECT_TRUE(returns) << "the window kept MPI's fatal handler: segment(size) would abort the job";
        if (returns) {
            try {
                (void)w.segment(world_size());
                ADD_FAILURE() << "segment(" << world_size() << ") of a group of " << world_size() << " returned";
            } catch (const mpi::mpi_error& e) {
                EXPECT_NE(e.code(), MPI_SUCCESS);
                EXPECT_NE(std::string(e.what()).find("MPI_Win_shared_query"), std::string::npos) << e.what();
            }
        }
        EXPECT_GE(w.segment(world_rank()).second, 100u) << "the window still works after the error";
    }
    MPI_Errhandler_free(&user);
    MPI_Comm_free(&comm);
    mpi::shared_window<double> fatal(MPI_COMM_WORLD, 1); // MPI_COMM_WORLD: MPI_ERRORS_ARE_FATAL
    MPI_Errhandler h = window_handler(fatal);
    EXPECT_TRUE(h == MPI_ERRORS_ARE_FATAL) << "a window on a communicator whose errors are fatal must stay fatal";
    MPI_Errhandler_free(&h);
}

TEST(mpi_attack, segments_at_page_boundaries_start_on_a_page_and_hold_what_was_asked) {
    // 1 element, a page of them - 1, a page, a page + 1, and a size differing between the ranks: every
    // segment starts on a page boundary of every process's mapping, holds at least what its rank asked
    // and the whole of its last page, and is written by its owner without touching a neighbour.
    const std::size_t per_page = page / sizeof(long);
    const std::size_t sizes[] = {1, per_page - 1, per_page, per_page + 1, 0}; // 0: rank r asks (r + 1) pages
    for (const std::size_t size : sizes) {
        const auto asked_by = [&](int r) { return size != 0 ? size : per_page * (1 + static_cast<std::size_t>(r)); };
        const std::size_t count = asked_by(world_rank());
        mpi::shared_window<long> w(MPI_COMM_WORLD, count);
        EXPECT_EQ(w.size(), count);
        for (std::size_t i = 0; i < count; ++i) w.data()[i] = world_rank() * 1000000L + static_cast<long>(i);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int r = 0; r < world_size(); ++r) {
            const auto seg = w.segment(r);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(seg.first) % page, 0u) << "rank " << r << " count " << count;
            const std::size_t asked = asked_by(r);
            EXPECT_EQ(seg.second, (asked + per_page - 1) / per_page * per_page) << "rank " << r << " count " << count;
            std::size_t wrong = 0; // counted, not asserted: every rank must reach the barrier below
            for (std::size_t i = 0; i < asked; ++i) wrong += seg.first[i] != r * 1000000L + static_cast<long>(i);
            EXPECT_EQ(wrong, 0u) << "rank " << r << " count " << count;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

TEST(mpi_attack, one_ranks_overflow_fails_every_rank_and_leaves_no_window) {
    const int bad = world_size() - 1;
    const std::size_t count = world_rank() == bad ? std::numeric_limits<std::size_t>::max() / sizeof(double) + 1 : 16;
    for (std::size_t attempt = 0; attempt < 2; ++attempt) {
        try {
            mpi::shared_window<double> w(MPI_COMM_WORLD, attempt == 0 ? count : (world_rank() == bad ? SIZE_MAX - 7 : 1));
            ADD_FAILURE() << "no exception";
        } catch (const std::bad_array_new_length&) {
            EXPECT_EQ(world_rank(), bad);
        } catch (const mpi::rank_failed& e) {
            EXPECT_NE(world_rank(), bad);
            EXPECT_EQ(e.rank(), bad);
            EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(bad) + " failed"), std::string::npos) << e.what();
        }
    }
    mpi::shared_window<double> after(MPI_COMM_WORLD, 16); // the communicator still works, nobody waits
    EXPECT_EQ(after.size(), 16u);
}

TEST(mpi_attack, more_than_a_nodes_memory_on_one_rank_fails_every_rank_before_mpi_maps_it) {
    // Rank `bad` asks for 1 TiB more than all the nodes hold: refused with ENOMEM by its admission,
    // strict or degrading (a fallback cannot make memory), before MPI is asked for a window (MPI would
    // fail to back it, and its default error handler aborts); the others get rank_failed, and the
    // communicator still works.
    const int bad = world_size() - 1;
    std::size_t total = 0;
    for (const auto& n : topology::get().nodes()) total += n.memory;
    for (const fallback fb : {fallback::strict, fallback::degrade}) {
        try {
            mpi::shared_window<char> w(MPI_COMM_WORLD, world_rank() == bad ? total + (std::size_t(1) << 40) : page, fb);
            ADD_FAILURE() << "no exception";
        } catch (const placement_error& e) {
            EXPECT_EQ(world_rank(), bad);
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_NE(std::string(e.what()).find("mpi::shared_window: "), std::string::npos) << e.what();
        } catch (const mpi::rank_failed& e) {
            EXPECT_NE(world_rank(), bad);
            EXPECT_EQ(e.rank(), bad);
        }
    }
    mpi::shared_window<double> after(MPI_COMM_WORLD, 16);
    EXPECT_EQ(after.size(), 16u);
}

TEST(mpi_attack, mbind_refused_after_start_up_on_one_rank_strict_fails_every_rank_degrade_records_it) {
    // Rank `bad` installs a filter that refuses mbind with EPERM (a container's seccomp profile, here
    // after MPI and the topology started), on this thread only: MPI's own threads keep theirs.
    const int bad = world_size() - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    // Each rank in a forked child would leave MPI behind: the filter is installed in the rank itself,
    // last in this binary (the test runs last: gtest runs suites in order of definition).
    if (world_rank() == bad) ASSERT_TRUE(numaplace_test::deny_syscalls_with_eperm({SYS_mbind}));
    try {
        mpi::shared_window<char> w(MPI_COMM_WORLD, 3 * page);
        ADD_FAILURE() << "strict: no exception";
    } catch (const placement_error& e) {
        EXPECT_EQ(world_rank(), bad);
        EXPECT_EQ(e.error_number(), EPERM);
    } catch (const mpi::rank_failed& e) {
        EXPECT_NE(world_rank(), bad);
        EXPECT_EQ(e.rank(), bad);
    }
    const std::size_t before = degradations().size();
    mpi::shared_window<char> w(MPI_COMM_WORLD, 3 * page, fallback::degrade);
    if (world_rank() == bad) {
        EXPECT_EQ(w.node(), -1);
        ASSERT_EQ(degradations().size(), before + 1);
        EXPECT_NE(degradations().back().find("mpi::shared_window: mbind"), std::string::npos) << degradations().back();
    } else {
        EXPECT_EQ(w.node(), running_node());
        EXPECT_EQ(degradations().size(), before);
    }
    std::memset(w.data(), 1, 3 * page); // usable either way
}

TEST(mpi, a_ranks_partition_covers_only_the_nodes_of_its_binding) {
    const partition<double> part = mpi::rank_partition<double>(1000003);
    EXPECT_EQ(part.size(), 1000003u);
    std::size_t covered = 0;
    for (const block& b : part.untyped().blocks()) {
        covered += b.size();
        if (layout) EXPECT_EQ(b.node, world_rank()) << "bound to node " << world_rank(); // --bind-to numa
        else EXPECT_EQ(b.node, running_node());
    }
    EXPECT_EQ(covered, 1000003u);
    EXPECT_EQ(mpi::rank_partition<double>(0).size(), 0u);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    int failed = RUN_ALL_TESTS();
#if defined(__SANITIZE_ADDRESS__)
    // The leak check runs here, before MPI_Finalize, while Open MPI's components are loaded and its state
    // is referenced: at exit they are dlclosed and LeakSanitizer reports their allocations from unknown
    // modules, which no narrow suppression can match. tests/CMakeLists.txt turns the exit check off for
    // this binary only (leak_check_at_exit=0).
    if (__lsan_do_recoverable_leak_check() != 0) failed = 1;
#endif
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
