// mpi.hpp, run by mpirun (tests/CMakeLists.txt: 2 ranks on the host; in the 2- and 4-node guests one
// rank per node, --bind-to numa): each rank's node against its binding, a shared window's segments on
// their ranks' nodes when another rank first-touches them, failures on one rank reaching every rank
// (overflow, a seccomp filter refusing mbind after start-up), degrading, moved-from windows, and the
// partition of a rank's work. Every test is collective: each rank runs it.
#include <numaplace/diagnostics.hpp>
#include <numaplace/mpi.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <seccomp.hpp>

#include <mpi.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>
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

// The first numaplace call of the process fails on one rank alone (the topology cannot be read at the
// descriptor limit: EMFILE): every rank throws, the failed rank its own std::system_error, the others
// rank_failed naming it, for rank_nodes::of and then shared_window; no rank waits, and no innocent rank
// meets the failed rank's next collective (with 3+ ranks one did, and was told it failed itself). Once
// descriptors are free both work on every rank. First in this file: gtest runs it before any other
// test reads the topology.
TEST(mpi_first_call, a_first_call_failing_on_one_rank_fails_every_rank_and_the_next_call_works) {
    const int bad = world_size() - 1;
    std::vector<int> fds;
    if (world_rank() == bad) {
        for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fds.push_back(fd);
        ASSERT_EQ(errno, EMFILE);
        ASSERT_GE(fds.size(), 3u);
        for (int k = 0; k < 3; ++k) { // three free: fewer than the topology read needs (UBSan needs one)
            ::close(fds.back());
            fds.pop_back();
        }
    }
    const auto expect_failed_by_bad = [&](const char* what, auto&& call) {
        try {
            call();
            ADD_FAILURE() << what << ": no exception on rank " << world_rank();
        } catch (const mpi::rank_failed& e) {
            EXPECT_NE(world_rank(), bad) << what << ": " << e.what();
            EXPECT_EQ(e.rank(), bad) << what << ": " << e.what();
        } catch (const std::system_error& e) {
            EXPECT_EQ(world_rank(), bad) << what << ": " << e.what();
            EXPECT_EQ(e.code().value(), EMFILE) << what << ": " << e.what();
        }
    };
    for (int round = 0; round < 2; ++round) { // the failed rank goes on to its next call at once
        expect_failed_by_bad("rank_nodes::of", [] { (void)mpi::rank_nodes::of(MPI_COMM_WORLD); });
        expect_failed_by_bad("shared_window", [] { mpi::shared_window<double> w(MPI_COMM_WORLD, 1000); });
    }
    for (int fd : fds) ::close(fd);
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    EXPECT_EQ(nodes.size(), world_size());
    mpi::shared_window<double> w(MPI_COMM_WORLD, 1000);
    EXPECT_EQ(w.size(), 1000u);
}

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
                EXPECT_EQ(e.code(), MPI_ERR_RANK);
                EXPECT_NE(std::string(e.what()).find("is not a rank of the window"), std::string::npos) << e.what();
            }
            // MPI_PROC_NULL (MPI would answer with the first non-empty segment) and a negative rank
            for (const int r : {MPI_PROC_NULL, -1, INT_MIN}) {
                try {
                    (void)w.segment(r);
                    ADD_FAILURE() << "segment(" << r << ") returned";
                } catch (const mpi::mpi_error& e) {
                    EXPECT_EQ(e.code(), MPI_ERR_RANK) << e.what();
                }
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
    // segment starts on a page boundary of every process's mapping and on a unit (page or shared huge
    // page) of the file, holds at least what its rank asked and the whole of its last unit, and is
    // written by its owner without touching a neighbour.
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
            std::uint64_t offset = 0; // the segment starts on a unit of the shared file in every process
            ASSERT_TRUE(detail::mapped_file_offset(seg.first, offset));
            EXPECT_EQ(offset % w.unit(), 0u) << "rank " << r << " count " << count;
            const std::size_t asked = asked_by(r), per_unit = w.unit() / sizeof(long);
            EXPECT_EQ(seg.second, (asked + per_unit - 1) / per_unit * per_unit) << "rank " << r << " count " << count;
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
    // Admission is of each node's segments together: the ranks on `bad`'s node fail themselves.
    const int bad = world_size() - 1;
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    const bool with_bad = nodes.node_of(world_rank()) == nodes.node_of(bad);
    std::size_t total = 0;
    for (const auto& n : topology::get().nodes()) total += n.memory;
    for (const fallback fb : {fallback::strict, fallback::degrade}) {
        try {
            mpi::shared_window<char> w(MPI_COMM_WORLD, world_rank() == bad ? total + (std::size_t(1) << 40) : page, fb);
            ADD_FAILURE() << "no exception";
        } catch (const placement_error& e) {
            // the bad rank's node: more than it has; the others: the window is more than /dev/shm has
            EXPECT_EQ(e.error_number(), with_bad ? ENOMEM : ENOSPC) << e.what();
            EXPECT_NE(std::string(e.what()).find("mpi::shared_window: "), std::string::npos) << e.what();
        } catch (const mpi::rank_failed& e) {
            ADD_FAILURE() << "every rank fails itself (its node, or the whole window's room): " << e.what();
        }
    }
    mpi::shared_window<double> after(MPI_COMM_WORLD, 16);
    EXPECT_EQ(after.size(), 16u);
}

// Ranks that share a node each ask for 0.6 of what the node admits: each fits alone, together they do
// not. Before, each rank admitted its own segment, Open MPI then failed the allocation on one rank and
// the other waited in MPI_Win_allocate_shared for ever (or the OOM killer ended the job at first touch).
// The ranks on that node now fail with placement_error ENOMEM, the others rank_failed, before MPI maps
// anything. Where each node holds one rank (the guests), the same window is made, unless all the
// ranks' segments together are more than /dev/shm has free: then every rank fails with ENOSPC.
TEST(mpi_attack, segments_that_fit_alone_but_not_together_fail_every_rank_before_mpi_maps_them) {
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    const int node = nodes.node_of(world_rank());
    const node_set where_mine = node >= 0 ? node_set{node} : topology::get().all();
    const auto mode = node >= 0 ? memory::policy_mode::bind : memory::policy_mode::preferred_many;
    std::size_t lo = 0, hi = std::size_t(1) << 46; // the most this rank's node admits, to 1 MiB
    while (hi - lo > (std::size_t(1) << 20)) {
        const std::size_t mid = lo + (hi - lo) / 2;
        (memory::admit(mid, mode, where_mine) == 0 ? lo : hi) = mid;
    }
    const std::size_t unit = detail::shared_segment_unit();
    const std::size_t ask = lo / 10 * 6 / unit * unit; // whole units: what is admitted is what was asked
    ASSERT_GT(ask, 0u);
    std::vector<unsigned long> asks(static_cast<std::size_t>(world_size()));
    unsigned long mine = ask;
    MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG, asks.data(), 1, MPI_UNSIGNED_LONG, MPI_COMM_WORLD);
    std::size_t together = 0, window = 0; // the oracle: this node's ranks, then the whole window
    for (int r = 0; r < world_size(); ++r) {
        if (nodes.node_of(r) == node) together += asks[static_cast<std::size_t>(r)];
        window += asks[static_cast<std::size_t>(r)] + unit;
    }
    unsigned long long room = 0;
    const bool shm = detail::directory_free_bytes(detail::shared_window_directory(), room);
    const int expected = together > lo ? ENOMEM : (shm && window + page > room ? ENOSPC : 0);
    int expect_any = expected, any = 0;
    MPI_Allreduce(&expect_any, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (nodes.ranks_on(node) >= 2 && node >= 0) EXPECT_EQ(expected, ENOMEM) << "ranks sharing node " << node;
    try {
        mpi::shared_window<char> w(MPI_COMM_WORLD, ask, fallback::degrade);
        EXPECT_EQ(any, 0) << "made although rank(s) expected error " << any;
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), expected) << e.what();
        EXPECT_NE(std::string(e.what()).find("mpi::shared_window: "), std::string::npos) << e.what();
    } catch (const mpi::rank_failed& e) {
        EXPECT_EQ(expected, 0) << e.what();
        EXPECT_NE(any, 0) << e.what();
    }
    mpi::shared_window<double> after(MPI_COMM_WORLD, 16); // nothing left behind, nobody waits
    EXPECT_EQ(after.size(), 16u);
}

// Communicators a collective cannot take are refused on every rank before any communication:
// MPI_COMM_NULL, and an intercommunicator (Open MPI crashed in MPI_Comm_split_type on one).
TEST(mpi_attack, a_null_communicator_and_an_intercommunicator_are_refused_up_front) {
    EXPECT_THROW((void)mpi::rank_nodes::of(MPI_COMM_NULL), mpi::invalid_communicator);
    EXPECT_THROW(mpi::shared_window<int>(MPI_COMM_NULL, 1), mpi::invalid_communicator);
    if (world_size() < 2) return;
    const int half = world_rank() < world_size() / 2 ? 0 : 1;
    MPI_Comm local = MPI_COMM_NULL, inter = MPI_COMM_NULL;
    ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, half, world_rank(), &local), MPI_SUCCESS);
    const int remote_leader = half == 0 ? world_size() / 2 : 0;
    ASSERT_EQ(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, remote_leader, 7, &inter), MPI_SUCCESS);
    EXPECT_THROW((void)mpi::rank_nodes::of(inter), mpi::invalid_communicator);
    try {
        mpi::shared_window<int> w(inter, 1);
        ADD_FAILURE() << "a window on an intercommunicator";
    } catch (const mpi::invalid_communicator& e) {
        EXPECT_NE(std::string(e.what()).find("intercommunicator"), std::string::npos) << e.what();
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
    MPI_Barrier(MPI_COMM_WORLD);
}

namespace {
// Writes `value` to a file of the guest's /sys (root there); \returns false when it cannot.
bool write_file(const std::string& path, const std::string& value) {
    std::ofstream out(path);
    out << value;
    out.flush();
    return static_cast<bool>(out);
}
std::string read_first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}
std::uint64_t meminfo_kib(const char* key) {
    std::ifstream in("/proc/meminfo");
    std::string k;
    std::uint64_t v = 0;
    while (in >> k) {
        if (k == key && (in >> v)) return v;
        in.ignore(1 << 10, '\n');
    }
    return 0;
}
// Rank 0 writes every rank's segment first (11 pages each); then every rank checks, in rank 0's
// mappings and its own, that each segment's pages are all on its rank's node. \returns pages off their node.
std::size_t misplaced_after_rank0_writes_all(const mpi::shared_window<double>& w, const mpi::rank_nodes& nodes, std::size_t count) {
    if (world_rank() == 0)
        for (int r = 0; r < world_size(); ++r) {
            const auto seg = w.segment(r);
            for (std::size_t i = 0; i < count; ++i) seg.first[i] = r * 1e6 + static_cast<double>(i);
        }
    MPI_Barrier(MPI_COMM_WORLD);
    std::size_t off = 0;
    for (int r = 0; r < world_size(); ++r) {
        const auto seg = w.segment(r);
        for (std::size_t i = 0; i < count; ++i) off += seg.first[i] != r * 1e6 + static_cast<double>(i); // maps it here too
        const page_histogram h = where(seg.first, count * sizeof(double));
        off += h.pages - h.on(nodes.node_of(r));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return off;
}
} // namespace

// /dev/shm backed by shared huge pages (shmem_enabled=force, or the mount's huge=always): a 2 MiB page
// is placed by its first small page, whoever faults it, and took the neighbour's segment with it (rank
// 1's segment followed rank 0's first touch: 0 of 11 pages on its node). Segments are now whole huge
// pages of the file. In the guests only (root there, and the machine is the test's own).
TEST(mpi_attack, shared_huge_pages_never_carry_a_segment_onto_another_ranks_node) {
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    const std::string shmem = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    const std::size_t count = 10 * page / sizeof(double) + 3;
    if (!layout) { // the host: the unit says whether huge pages may back shared memory here
        mpi::shared_window<double> w(MPI_COMM_WORLD, count);
        const std::string mode = read_first_line(shmem);
        EXPECT_EQ(w.unit(), mode.find("[deny]") != std::string::npos ? page : detail::huge_page_size()) << mode;
        return;
    }
    const std::string before = read_first_line(shmem);
    ASSERT_FALSE(before.empty());
    struct way { const char* name; std::string sysfs; const char* remount; const char* restore; };
    const way ways[] = {{"shmem_enabled=force", "force", nullptr, nullptr},
                        {"/dev/shm huge=always", "never", "mount -o remount,huge=always /dev/shm", "mount -o remount,huge=never /dev/shm"}};
    for (const way& w : ways) {
        if (world_rank() == 0) {
            ASSERT_TRUE(write_file(shmem, w.sysfs)) << w.name;
            if (w.remount) ASSERT_EQ(std::system(w.remount), 0) << w.name;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        const std::uint64_t huge_before = meminfo_kib("ShmemHugePages:");
        std::size_t off = 0;
        {
            mpi::shared_window<double> win(MPI_COMM_WORLD, count);
            EXPECT_EQ(win.unit(), detail::huge_page_size()) << w.name;
            off = misplaced_after_rank0_writes_all(win, nodes, count);
            // the case is real: the kernel did back the segments with huge pages
            if (world_rank() == 0) EXPECT_GT(meminfo_kib("ShmemHugePages:"), huge_before) << w.name;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        EXPECT_EQ(off, 0u) << w.name << ": pages of segments off their ranks' nodes";
        if (world_rank() == 0) {
            if (w.restore) EXPECT_EQ(std::system(w.restore), 0);
            EXPECT_TRUE(write_file(shmem, detail::bracketed(before)));
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

// Ranks in different cpusets (Slurm with cgroups): a rank whose cpuset.mems leaves out another rank's
// node puts the pages it faults first on its own nodes, whatever the segment's binding (64 MiB: 0 of
// 16384 pages on the owner's node). Each owner now faults its segment in itself when some rank may not
// allocate on its node, and checks it: every page on its node. A rank whose own cpuset leaves out the
// node of its CPUs cannot place its segment: strict refuses on every rank, degrading records it and the
// window claims no node for it. In the guests only (cpusets, root).
TEST(mpi_attack, ranks_in_different_cpusets_get_every_page_of_their_segments_on_their_nodes) {
    const mpi::rank_nodes nodes = mpi::rank_nodes::of(MPI_COMM_WORLD);
    if (!layout) { // the host: one cpuset for all; nobody populates
        mpi::shared_window<double> w(MPI_COMM_WORLD, 1000);
        EXPECT_FALSE(w.populated());
        return;
    }
    // A cgroup v1 cpuset hierarchy: a task moved in keeps its pages where they are (cpuset.memory_migrate
    // is 0; cgroup v2 migrates the whole process, minutes under TCG).
    const std::string root = "/tmp/numaplace-cpuset";
    if (world_rank() == 0) {
        ::mkdir(root.c_str(), 0755);
        ASSERT_EQ(std::system(("mount -t cgroup -o cpuset numaplace-cpuset " + root).c_str()), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const topology& topo = topology::get();
    const auto& mine = topo.nodes()[static_cast<std::size_t>(nodes.node_of(world_rank()))];
    std::string cpus;
    for (unsigned c : mine.cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
    const std::string group = root + "/numaplace-rank" + std::to_string(world_rank());
    const auto enter = [&](unsigned mems) {
        ::mkdir(group.c_str(), 0755);
        ASSERT_TRUE(write_file(group + "/cpuset.cpus", cpus));
        ASSERT_TRUE(write_file(group + "/cpuset.mems", std::to_string(mems)));
        ASSERT_TRUE(write_file(group + "/cgroup.procs", std::to_string(::getpid())));
    };
    cpu_set_t bound; // leaving a cpuset widens the affinity to the parent's CPUs: restored at the end
    ASSERT_EQ(::sched_getaffinity(0, sizeof bound, &bound), 0);
    enter(mine.os_index); // each rank may allocate on its own node only
    MPI_Barrier(MPI_COMM_WORLD);
    const std::size_t count = 16 * page / sizeof(double);
    {
        mpi::shared_window<double> w(MPI_COMM_WORLD, count);
        EXPECT_TRUE(w.populated());
        EXPECT_EQ(w.node(), nodes.node_of(world_rank()));
        EXPECT_EQ(misplaced_after_rank0_writes_all(w, nodes, count), 0u);
    }
    // the last rank's cpuset leaves out its own node: mbind to it is refused (EINVAL)
    const int bad = world_size() - 1;
    if (world_rank() == bad) enter(topo.nodes()[0].os_index);
    MPI_Barrier(MPI_COMM_WORLD);
    try {
        mpi::shared_window<double> w(MPI_COMM_WORLD, count);
        ADD_FAILURE() << "strict: no exception";
    } catch (const placement_error& e) {
        EXPECT_EQ(world_rank(), bad) << e.what();
    } catch (const mpi::rank_failed& e) {
        EXPECT_NE(world_rank(), bad);
        EXPECT_EQ(e.rank(), bad);
    }
    {
        const std::size_t before = degradations().size();
        mpi::shared_window<double> w(MPI_COMM_WORLD, count, fallback::degrade);
        EXPECT_EQ(w.node(), world_rank() == bad ? -1 : nodes.node_of(world_rank()));
        EXPECT_EQ(degradations().size(), before + (world_rank() == bad ? 1u : 0u));
        MPI_Barrier(MPI_COMM_WORLD);
    }
    EXPECT_TRUE(write_file(root + "/cgroup.procs", std::to_string(::getpid())));
    EXPECT_EQ(::sched_setaffinity(0, sizeof bound, &bound), 0) << std::strerror(errno);
    EXPECT_EQ(::rmdir(group.c_str()), 0) << std::strerror(errno);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) EXPECT_EQ(std::system(("umount " + root).c_str()), 0);
    MPI_Barrier(MPI_COMM_WORLD);
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
