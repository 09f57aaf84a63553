#ifndef NUMAPLACE_MPI_HPP_INCLUDED
#define NUMAPLACE_MPI_HPP_INCLUDED

/// \file
/// MPI (target numaplace::mpi): the node of each rank of a communicator, read from the ranks' bindings;
/// shared windows (`MPI_Win_allocate_shared`) whose segment of rank r lives on rank r's node whoever
/// touches it first; the partition of one rank's work over the nodes its binding allows. On top of the
/// placement path (place.hpp), never the heap. Every constructor and function that takes a communicator
/// is collective over it, as MPI's own calls, and fails on every rank when it fails on one (nothing is
/// left allocated, no rank is left waiting). Design and measurements: docs/mpi.md.

#include "detail/linux.hpp"
#include "detail/mpi_collective.hpp"
#include "detail/shared_pages.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "mpi_errors.hpp"
#include "partition.hpp"
#include "place.hpp"
#include "topology.hpp"
#include "where.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {
namespace mpi {

namespace detail {
using numaplace::detail::page_size;

// The kernel's number of the node that holds every CPU this process's calling thread may run on, or -1.
inline int bound_os_node(const topology& topo, int& err) noexcept {
    cpu_set_t set;
    err = numaplace::detail::os_thread_affinity(set);
    if (err != 0) return -1;
    const int node = topo.node_of_cpus(set);
    return node < 0 ? -1 : static_cast<int>(topo.nodes()[static_cast<std::size_t>(node)].os_index);
}

// What each rank tells the others before a window is mapped: its segment's bytes, its node (the
// kernel's number, -1 for none), its alignment unit, and the nodes it may allocate on.
struct segment_share { // unsigned long long throughout: MPI's type for it, and never size_t's own type
    unsigned long long bytes = 0;
    long long os_node = -1;
    unsigned long long unit = 0;
    unsigned long long mems_known = 0;
    unsigned long long mems[numaplace::detail::node_mask_words] = {};

    bool may_allocate_on(long long os) const noexcept {
        return mems_known != 0 && os >= 0 && static_cast<unsigned long long>(os) < numaplace::detail::node_mask_words * 64 &&
               (mems[os / 64] >> (os % 64) & 1u) != 0;
    }
};
constexpr int segment_share_words = static_cast<int>(sizeof(segment_share) / sizeof(unsigned long long));
static_assert(sizeof(segment_share) == segment_share_words * sizeof(unsigned long long), "segment_share: 64-bit words only");
} // namespace detail

/// The node of each rank of a communicator whose ranks share one host, read from each rank's binding
/// (the CPUs its calling thread may run on) and exchanged as the kernel's node numbers, so ranks whose
/// cpusets number the nodes differently agree. A value.
class rank_nodes {
public:
    /// \effects collective over `comm`. \throws on every rank when it fails on one: invalid_communicator
    /// (MPI_COMM_NULL, an intercommunicator: before any communication); communicator_spans_hosts;
    /// std::system_error when a rank's affinity or topology cannot be read (e.g. EMFILE at the descriptor
    /// limit); rank_failed on the ranks that did not fail themselves; mpi_error.
    /// \returns each rank's node, read from its binding.
    static rank_nodes of(MPI_Comm comm) {
        detail::check_one_host(comm);
        rank_nodes r;
        int ranks = 0;
        detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
        detail::check(MPI_Comm_rank(comm, &r.rank_), "MPI_Comm_rank");
        const topology* topo = nullptr;
        int mine = -1;
        detail::locally(comm, [&] {
            topo = &topology::get();
            int err = 0;
            mine = detail::bound_os_node(*topo, err);
            if (err != 0)
                throw std::system_error(err, std::generic_category(), "numaplace::mpi: the affinity of rank " + std::to_string(r.rank_));
        });
        std::vector<int> os(static_cast<std::size_t>(ranks), -1);
        detail::check(MPI_Allgather(&mine, 1, MPI_INT, os.data(), 1, MPI_INT, comm), "MPI_Allgather");
        r.node_.resize(os.size(), -1);
        for (std::size_t k = 0; k < os.size(); ++k)
            r.node_[k] = os[k] < 0 ? -1 : topo->from_os_index(static_cast<unsigned>(os[k]));
        return r;
    }

    /// \returns the number of ranks.
    int size() const noexcept { return static_cast<int>(node_.size()); }
    /// \returns this process's rank.
    int rank() const noexcept { return rank_; }
    /// \returns the node of rank `r`: -1 when its binding spans nodes, or its node is not one this
    /// process may use. \throws std::out_of_range for a rank outside [0, size()).
    int node_of(int r) const { return node_.at(static_cast<std::size_t>(r)); }
    /// \returns how many ranks are bound to `node`.
    int ranks_on(int node) const noexcept { return static_cast<int>(std::count(node_.begin(), node_.end(), node)); }

private:
    int rank_ = 0;
    std::vector<int> node_;
};

/// \returns the partition of `n` elements of T over the nodes whose CPUs this process's calling thread
/// may run on (its binding), weighted by those CPUs: a rank bound to one node gets one block on it, a
/// rank bound to a socket of two nodes two blocks. The partition of a rank's own work: it never covers
/// a node the rank's binding leaves out.
/// \throws std::system_error (affinity unreadable); invalid_placement (no node of this process holds
/// any of its CPUs; see partition).
template <class T>
partition<T> rank_partition(std::size_t n) {
    const topology& topo = topology::get();
    cpu_set_t set;
    const int err = numaplace::detail::os_thread_affinity(set);
    if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace::mpi::rank_partition: the affinity");
    std::vector<int> ids;
    std::vector<std::size_t> weights;
    for (const auto& node : topo.nodes()) {
        std::size_t cpus = 0;
        for (unsigned cpu : node.cpus) cpus += cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set) ? 1 : 0;
        if (cpus == 0) continue;
        ids.push_back(node.id);
        weights.push_back(cpus);
    }
    if (ids.empty()) numaplace::detail::throw_invalid("mpi::rank_partition: no node holds a CPU this rank may run on");
    return partition<T>(n, node_set(ids), std::move(weights));
}

/// A shared-memory window (`MPI_Win_allocate_shared`) of T's, each rank's segment on that rank's node
/// whoever touches it first: each rank binds its own segment before any rank may touch it; the policy
/// lives in the shared memory, so every process's faults obey it. Where the kernel would not let that
/// policy decide — a rank whose cpuset (cpuset.mems) leaves out another rank's node allocates on its own
/// nodes whatever the policy says — the owner faults its segment in itself before any rank may touch
/// it, and checks every page. Each segment is aligned and sized to whole shared huge pages where the
/// kernel may back shared memory with them (a huge page is placed by its first small page and would
/// carry a neighbour's pages with it). Move-only; the destructor is collective (`MPI_Win_free`), as the
/// window's. T must be trivially copyable, not const, and aligned to at most 4096 bytes (the smallest
/// page: the only alignment every process's mapping of the segment shares).
/// The window's error handler follows the communicator's (MPI gives a new window MPI_ERRORS_ARE_FATAL
/// whatever its communicator has): where the communicator's errors are fatal (MPI_ERRORS_ARE_FATAL,
/// MPI_ERRORS_ABORT) the window's are; with any other handler (MPI_ERRORS_RETURN, the user's) the
/// window returns errors, which the calls here throw as mpi_error. Set on `window()` to change it.
template <class T>
class shared_window {
    static_assert(std::is_trivially_copyable<T>::value, "shared_window<T>: T must be trivially copyable (it lives in shared memory)");
    static_assert(!std::is_const<T>::value && !std::is_volatile<T>::value,
                  "shared_window<T>: T must not be const or volatile (each rank's segment is written through data(); "
                  "take a const T* from it where a rank only reads)");
    static_assert(alignof(T) <= 4096, "shared_window<T>: alignof(T) must be at most 4096 (a segment starts on a page in "
                                      "every process's mapping, and no larger alignment holds in all of them)");

public:
    /// \effects collective over `comm`, all of whose ranks share this host: `count` T's for this rank (0
    /// allowed), rounded up to whole units (pages, or shared huge pages where the kernel may use them)
    /// starting on a unit of the shared file (MPI is asked for one unit more), each bound to its rank's
    /// node through the placement path. Admitted before MPI maps anything, per node: the segments of
    /// all ranks bound to a node together against that node's free memory (all unbound ranks' together
    /// against every node's), and all segments together against the free room of the file system MPI
    /// makes the window's file in (/dev/shm, or Open MPI's OMPI_MCA_osc_sm_backing_directory).
    /// \throws on every rank when it fails on one (the window freed, nothing left mapped): invalid_communicator
    /// (MPI_COMM_NULL, an intercommunicator); communicator_spans_hosts; std::bad_array_new_length (count ×
    /// sizeof(T) overflows); std::system_error (the affinity or the topology cannot be read, e.g. EMFILE);
    /// whatever `fb`: placement_error ENOMEM when a node's segments together are more than it has free,
    /// ENOSPC when the window is more than its file system has free;
    /// when `fb` is strict: placement_error (mbind refused, e.g. EPERM under a seccomp filter or EINVAL for
    /// a node outside the rank's cpuset; pages found off the node after the owner faulted them in) and
    /// invalid_placement (this rank's binding spans nodes: no node to bind to); rank_failed on the ranks
    /// that did not fail themselves; mpi_error. Degrading, a refused, unbound or misplaced segment is left
    /// to first touch, `node()` is -1 and it is recorded in `degradations()`.
    shared_window(MPI_Comm comm, std::size_t count, fallback fb = fallback::strict) : count_(count) {
        detail::check_one_host(comm);
        int ranks = 0;
        detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
        const topology* topo = nullptr;
        detail::segment_share mine;
        detail::locally(comm, [&] {
            topo = &topology::get();
            if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) ||
                count * sizeof(T) > static_cast<std::size_t>(std::numeric_limits<MPI_Aint>::max()) / 2)
                numaplace::detail::throw_bad_length();
            mine.bytes = numaplace::memory::page_round(count * sizeof(T));
            int err = 0;
            mine.os_node = detail::bound_os_node(*topo, err);
            if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace::mpi::shared_window: the affinity");
            mine.unit = numaplace::detail::shared_segment_unit();
            mine.mems_known = numaplace::detail::allowed_memory_nodes(mine.mems) ? 1 : 0;
        });
        std::vector<detail::segment_share> all(static_cast<std::size_t>(ranks));
        detail::check(MPI_Allgather(&mine, detail::segment_share_words, MPI_UNSIGNED_LONG_LONG, all.data(), detail::segment_share_words,
                                    MPI_UNSIGNED_LONG_LONG, comm),
                      "MPI_Allgather");
        for (const auto& r : all) unit_ = std::max<std::size_t>(unit_, static_cast<std::size_t>(r.unit));
        const std::size_t bytes = numaplace::detail::round_up(static_cast<std::size_t>(mine.bytes), unit_);
        detail::locally(comm, [&] { admit(all, mine, *topo); });
        void* base = nullptr;
        MPI_Info info = MPI_INFO_NULL;
        detail::check(MPI_Info_create(&info), "MPI_Info_create");
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        const std::size_t asked = bytes == 0 ? 0 : bytes + unit_;
        const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(asked), static_cast<int>(sizeof(T)), info, comm, &base, &win_);
        MPI_Info_free(&info);
        detail::check(rc, "MPI_Win_allocate_shared");
        try {
            detail::locally(comm, [&] {
                detail::follow_errhandler(comm, win_);
                data_ = bytes == 0 ? nullptr : static_cast<T*>(numaplace::detail::shared_unit_start(base, unit_));
                node_ = mine.os_node < 0 ? -1 : topo->from_os_index(static_cast<unsigned>(mine.os_node));
                if (bytes > 0) bind(bytes, fb, all, *topo);
            });
            detail::check(MPI_Barrier(comm), "MPI_Barrier"); // every segment bound before any is touched
        } catch (...) {
            MPI_Win_free(&win_);
            throw;
        }
    }
    shared_window(const shared_window&) = delete;
    shared_window& operator=(const shared_window&) = delete;
    /// \effects takes `o`'s window; `o` is left empty (no window: its destructor does nothing).
    shared_window(shared_window&& o) noexcept
        : win_(std::exchange(o.win_, MPI_WIN_NULL)), data_(std::exchange(o.data_, nullptr)),
          count_(std::exchange(o.count_, 0)), unit_(o.unit_), node_(o.node_), placed_(o.placed_), populated_(o.populated_) {}
    shared_window& operator=(shared_window&&) = delete;
    /// \effects `MPI_Win_free` (collective) unless empty.
    ~shared_window() {
        if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
    }

    /// \returns this rank's segment (null when empty or count 0 and MPI gave none).
    T* data() const noexcept { return data_; }
    /// \returns the T's of this rank's segment.
    std::size_t size() const noexcept { return count_; }
    /// \returns the node this rank's segment is bound to (-1 when degraded to first touch).
    int node() const noexcept { return placed_ ? node_ : -1; }
    /// \returns the bytes each segment is aligned and rounded to: the page size, or the shared huge
    /// page size where the kernel may back shared memory with huge pages.
    std::size_t unit() const noexcept { return unit_; }
    /// \returns true when this rank faulted its own segment in at construction (another rank of the window
    /// may not allocate on its node: a cpuset).
    bool populated() const noexcept { return populated_; }
    /// \returns the window (`MPI_WIN_NULL` when empty).
    MPI_Win window() const noexcept { return win_; }
    /// \returns rank `r`'s segment as this process maps it (from its first unit of the shared file, the
    /// same bytes in every process) and its size in T's (`MPI_Win_shared_query`): at least what rank r
    /// asked for, the rest of its last unit included.
    /// \throws mpi_error for `r` outside [0, ranks) — `MPI_PROC_NULL` included, which MPI would answer
    /// with the first non-empty segment — after the window's error handler was called with MPI_ERR_RANK
    /// (a fatal handler ends the job there); mpi_error from MPI; std::logic_error for an empty window.
    std::pair<T*, std::size_t> segment(int r) const {
        if (win_ == MPI_WIN_NULL) throw std::logic_error("numaplace::mpi::shared_window::segment: an empty (moved-from) window");
        MPI_Group group = MPI_GROUP_NULL;
        detail::check(MPI_Win_get_group(win_, &group), "MPI_Win_get_group");
        int ranks = 0;
        const int rc = MPI_Group_size(group, &ranks);
        MPI_Group_free(&group);
        detail::check(rc, "MPI_Group_size");
        if (r < 0 || r >= ranks) {
            MPI_Win_call_errhandler(win_, MPI_ERR_RANK);
            throw mpi_error(MPI_ERR_RANK, "numaplace::mpi::shared_window::segment: rank " + std::to_string(r) +
                                              " is not a rank of the window (0.." + std::to_string(ranks - 1) + ")");
        }
        MPI_Aint bytes = 0;
        int unit = 0;
        void* base = nullptr;
        detail::check(MPI_Win_shared_query(win_, r, &bytes, &unit, &base), "MPI_Win_shared_query");
        if (bytes == 0) return {nullptr, 0};
        return {static_cast<T*>(numaplace::detail::shared_unit_start(base, unit_)), (static_cast<std::size_t>(bytes) - unit_) / sizeof(T)};
    }

private:
    // \effects admits the segments bound to this rank's node, all ranks' together (for a rank bound to
    // none: all unbound ranks' segments over every node), then the whole window against the free room of
    // the file system MPI makes its file in. \throws placement_error ENOMEM, ENOSPC.
    void admit(const std::vector<detail::segment_share>& all, const detail::segment_share& mine, const topology& topo) const {
        const auto add = [](unsigned long long a, unsigned long long b) { return b > ULLONG_MAX - a ? ULLONG_MAX : a + b; };
        unsigned long long total = 0, window = 0; // this node's segments; every rank's ask (one unit more each)
        std::size_t sharing = 0;
        for (const auto& r : all) {
            if (r.bytes == 0) continue;
            const unsigned long long b = numaplace::detail::round_up(static_cast<std::size_t>(r.bytes), unit_);
            window = add(window, add(b, unit_));
            if (r.os_node != mine.os_node) continue;
            total = add(total, b);
            ++sharing;
        }
        const std::string who = "mpi::shared_window: the segments of " + std::to_string(sharing) + " ranks together: ";
        const std::size_t need = total > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(total);
        if (need > 0 && mine.os_node >= 0)
            numaplace::detail::admit_or_throw(nullptr, need, numaplace::memory::policy_mode::bind,
                                              node_set{topo.from_os_index(static_cast<unsigned>(mine.os_node))}, who.c_str(),
                                              numaplace::detail::range_origin::foreign);
        else if (need > 0)
            numaplace::detail::admit_or_throw(nullptr, need, numaplace::memory::policy_mode::preferred_many, topo.all(), who.c_str(),
                                              numaplace::detail::range_origin::foreign);
        unsigned long long room = 0;
        const std::string dir = numaplace::detail::shared_window_directory();
        if (window > 0 && numaplace::detail::directory_free_bytes(dir, room) && add(window, detail::page_size()) > room)
            numaplace::detail::throw_placement(-1, window > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(window), ENOSPC,
                                               "mpi::shared_window: the window's " + std::to_string(window) + " bytes (all ranks) are more than " +
                                                   dir + " has free (" + std::to_string(room) + " bytes), where MPI makes its file");
    }

    void bind(std::size_t bytes, fallback fb, const std::vector<detail::segment_share>& all, const topology& topo) {
        const char* who = "mpi::shared_window: ";
        if (node_ < 0) {
            placed_ = false;
            if (fb == fallback::strict)
                numaplace::detail::throw_invalid("mpi::shared_window: this rank's binding spans nodes (bind ranks to a node or a core: "
                                                 "mpirun --bind-to core or numa); no node to place its segment on");
            numaplace::detail::refused(EINVAL, -1, bytes, fb, std::string(who) + "an unbound rank's segment");
            return;
        }
        placed_ = numaplace::detail::place(data_, bytes, numaplace::memory::policy_mode::bind, node_set{node_}, fb, who,
                                           numaplace::detail::range_origin::foreign);
        if (!placed_) return;
        // A rank that may not allocate on this node would put the pages it faults first on its own
        // nodes, whatever the segment's policy: fault them all in here, before the barrier, and check.
        const long long os = topo.nodes()[static_cast<std::size_t>(node_)].os_index;
        bool all_may = true;
        for (const auto& r : all) all_may = all_may && r.may_allocate_on(os);
        if (all_may) return;
        populated_ = true;
        numaplace::memory::touch(data_, bytes);
        const page_histogram h = where(data_, bytes, topo);
        const std::size_t on = h.on(node_), pages = bytes / detail::page_size();
        if (on == pages) return;
        placed_ = false;
        const std::string what = std::string(who) + std::to_string(pages - on) + " of " + std::to_string(pages) +
                                 " pages of this rank's segment faulted in off node " + std::to_string(node_) +
                                 " (its cpuset.mems?), though bound there";
        if (fb == fallback::strict) numaplace::detail::throw_placement(node_, bytes, EXDEV, what);
        numaplace::detail::degradation_log::instance().record(what + ": left where they are");
    }

    MPI_Win win_ = MPI_WIN_NULL;
    T* data_ = nullptr;
    std::size_t count_ = 0;
    std::size_t unit_ = 0;
    int node_ = -1;
    bool placed_ = false;
    bool populated_ = false;
};

} // namespace mpi
} // namespace numaplace

#endif
