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
#include "error.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "place.hpp"
#include "topology.hpp"

// The C API only: Open MPI's and MPICH's deprecated C++ bindings stay out (where mpi.h comes first).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

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

/// An MPI call returned an error (when the communicator's error handler returns errors at all).
class mpi_error : public std::runtime_error {
public:
    mpi_error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
    /// \returns the MPI error code.
    int code() const noexcept { return code_; }

private:
    int code_;
};

/// The ranks of a communicator do not all share this host's memory (a shared window or a node map
/// needs them to): `ranks()` ranks, `shared()` of them on this rank's host.
class communicator_spans_hosts : public std::invalid_argument {
public:
    communicator_spans_hosts(int ranks, int shared)
        : std::invalid_argument("numaplace::mpi: the communicator spans hosts: " + std::to_string(shared) + " of its " +
                                std::to_string(ranks) +
                                " ranks share this host's memory (split it with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) first)"),
          ranks_(ranks), shared_(shared) {}
    int ranks() const noexcept { return ranks_; }
    int shared() const noexcept { return shared_; }

private:
    int ranks_, shared_;
};

/// Another rank's part of a collective call failed (this rank's part did not): `rank()` says which, its
/// message is in `what()`.
class rank_failed : public std::runtime_error {
public:
    rank_failed(int rank, const std::string& what) : std::runtime_error(what), rank_(rank) {}
    int rank() const noexcept { return rank_; }

private:
    int rank_;
};

namespace detail {
using numaplace::detail::page_size;

inline void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
    throw mpi_error(rc, std::string("numaplace::mpi: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// The lowest rank whose `failed` is true, or -1 (collective).
inline int first_failed(MPI_Comm comm, bool failed) {
    int rank = 0;
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    int mine = failed ? rank : INT_MAX, lowest = INT_MAX;
    check(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    return lowest == INT_MAX ? -1 : lowest;
}

// \effects collective: when any rank's `error` is set, throws on every rank: this rank's own error
// where it has one, else rank_failed naming the lowest failed rank (its message sent to all).
inline void agree(MPI_Comm comm, const std::exception_ptr& error) {
    std::string text;
    if (error) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            text = e.what();
        } catch (...) {
            text = "unknown exception";
        }
    }
    const int failed = first_failed(comm, error != nullptr);
    if (failed < 0) return;
    int rank = 0;
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    unsigned long length = rank == failed ? text.size() : 0;
    check(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG, failed, comm), "MPI_Bcast");
    text.resize(length);
    if (length > 0) check(MPI_Bcast(&text[0], static_cast<int>(std::min<unsigned long>(length, INT_MAX)), MPI_CHAR, failed, comm), "MPI_Bcast");
    if (error) std::rethrow_exception(error);
    throw rank_failed(failed, "numaplace::mpi: rank " + std::to_string(failed) + " failed: " + text);
}

// \effects collective: throws communicator_spans_hosts on every rank unless all of comm's ranks share
// this host's memory.
inline void check_one_host(MPI_Comm comm) {
    int ranks = 0;
    check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
    MPI_Comm shared = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared), "MPI_Comm_split_type");
    int here = 0;
    const int rc = MPI_Comm_size(shared, &here);
    MPI_Comm_free(&shared);
    check(rc, "MPI_Comm_size");
    int fewest = 0;
    check(MPI_Allreduce(&here, &fewest, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
    if (fewest != ranks) throw communicator_spans_hosts(ranks, fewest);
}

// \effects `win` returns errors (MPI_ERRORS_RETURN) unless `comm`'s errors are fatal (MPI_ERRORS_ARE_FATAL,
// MPI_ERRORS_ABORT): a window starts with MPI_ERRORS_ARE_FATAL whatever its communicator has.
inline void follow_errhandler(MPI_Comm comm, MPI_Win win) {
    MPI_Errhandler h = MPI_ERRHANDLER_NULL;
    check(MPI_Comm_get_errhandler(comm, &h), "MPI_Comm_get_errhandler");
    bool fatal = h == MPI_ERRORS_ARE_FATAL;
#ifdef MPI_ERRORS_ABORT
    fatal = fatal || h == MPI_ERRORS_ABORT;
#endif
    MPI_Errhandler_free(&h);
    if (!fatal) check(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
}

// The first page boundary at or after p.
inline void* page_up(void* p) noexcept {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p), page = page_size();
    return reinterpret_cast<void*>((a + page - 1) / page * page);
}

// The kernel's number of the node that holds every CPU this process's calling thread may run on, or -1.
inline int bound_os_node(const topology& topo, int& err) noexcept {
    cpu_set_t set;
    err = numaplace::detail::os_thread_affinity(set);
    if (err != 0) return -1;
    const int node = topo.node_of_cpus(set);
    return node < 0 ? -1 : static_cast<int>(topo.nodes()[static_cast<std::size_t>(node)].os_index);
}
} // namespace detail

/// The node of each rank of a communicator whose ranks share one host, read from each rank's binding
/// (the CPUs its calling thread may run on) and exchanged as the kernel's node numbers, so ranks whose
/// cpusets number the nodes differently agree. A value.
class rank_nodes {
public:
    /// \effects collective over `comm`. \throws communicator_spans_hosts (on every rank); mpi_error;
    /// std::system_error when a rank's affinity cannot be read (rank_failed on the others).
    static rank_nodes of(MPI_Comm comm) {
        detail::check_one_host(comm);
        rank_nodes r;
        int ranks = 0;
        detail::check(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
        detail::check(MPI_Comm_rank(comm, &r.rank_), "MPI_Comm_rank");
        const topology& topo = topology::get();
        int err = 0;
        const int mine = detail::bound_os_node(topo, err);
        std::exception_ptr error;
        if (err != 0)
            error = std::make_exception_ptr(std::system_error(err, std::generic_category(), "numaplace::mpi: the affinity of rank " + std::to_string(r.rank_)));
        detail::agree(comm, error);
        std::vector<int> os(static_cast<std::size_t>(ranks), -1);
        detail::check(MPI_Allgather(&mine, 1, MPI_INT, os.data(), 1, MPI_INT, comm), "MPI_Allgather");
        r.node_.resize(os.size(), -1);
        for (std::size_t k = 0; k < os.size(); ++k)
            r.node_[k] = os[k] < 0 ? -1 : topo.from_os_index(static_cast<unsigned>(os[k]));
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
/// whoever touches it first: each rank binds its own segment (whole pages) before any rank may touch
/// it; the policy lives in the shared memory, so every process's faults obey it. Move-only; the
/// destructor is collective (`MPI_Win_free`), as the window's. T must be trivially copyable.
/// The window's error handler follows the communicator's (MPI gives a new window MPI_ERRORS_ARE_FATAL
/// whatever its communicator has): where the communicator's errors are fatal (MPI_ERRORS_ARE_FATAL,
/// MPI_ERRORS_ABORT) the window's are; with any other handler (MPI_ERRORS_RETURN, the user's) the
/// window returns errors, which the calls here throw as mpi_error. Set on `window()` to change it.
template <class T>
class shared_window {
    static_assert(std::is_trivially_copyable<T>::value, "shared_window<T>: T must be trivially copyable (it lives in shared memory)");

public:
    /// \effects collective over `comm`, all of whose ranks share this host: `count` T's for this rank (0
    /// allowed), rounded up to whole pages starting on a page boundary (MPI is asked for one page more),
    /// each bound to its rank's node through the placement path (admitted first).
    /// \throws on every rank when it fails on one (the window freed): communicator_spans_hosts;
    /// std::bad_array_new_length (count × sizeof(T) overflows); when `fb` is strict: placement_error
    /// (mbind refused, e.g. EPERM under a seccomp filter) and
    /// invalid_placement (this rank's binding spans
    /// nodes: no node to bind to); whatever `fb`: placement_error ENOMEM when `count` T's are more than
    /// this rank's node has free (more than all nodes have, for a rank bound to none), before MPI maps
    /// anything; rank_failed on the ranks that did not fail themselves; mpi_error.
    /// Degrading, a refused or unbound segment is left to first touch and recorded in `degradations()`.
    shared_window(MPI_Comm comm, std::size_t count, fallback fb = fallback::strict) : count_(count) {
        detail::check_one_host(comm);
        const topology& topo = topology::get();
        std::exception_ptr error;
        std::size_t bytes = 0;
        int err = 0, os = -1;
        try {
            if (count > std::numeric_limits<std::size_t>::max() / sizeof(T) ||
                count * sizeof(T) > static_cast<std::size_t>(std::numeric_limits<MPI_Aint>::max()) - detail::page_size())
                numaplace::detail::throw_bad_length();
            bytes = numaplace::memory::page_round(count * sizeof(T));
            os = detail::bound_os_node(topo, err);
            if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace::mpi::shared_window: the affinity");
            // admitted before MPI maps anything: on its node, or anywhere for a rank bound to none
            if (os >= 0)
                numaplace::detail::admit_or_throw(nullptr, bytes, numaplace::memory::policy_mode::bind,
                                                  node_set{topo.from_os_index(static_cast<unsigned>(os))}, "mpi::shared_window: ",
                                                  numaplace::detail::range_origin::foreign);
            else
                numaplace::detail::admit_or_throw(nullptr, bytes, numaplace::memory::policy_mode::preferred_many, topo.all(),
                                                  "mpi::shared_window: ", numaplace::detail::range_origin::foreign);
        } catch (...) {
            error = std::current_exception();
        }
        detail::agree(comm, error);
        // MPI puts a segment where it likes (Open MPI 4.1: 264 bytes past a page, after its header): one
        // page more than the page-rounded size, and the segment starts at the first page boundary in it.
        MPI_Info info = MPI_INFO_NULL;
        detail::check(MPI_Info_create(&info), "MPI_Info_create");
        MPI_Info_set(info, "alloc_shared_noncontig", "true");
        void* base = nullptr;
        const std::size_t asked = bytes == 0 ? 0 : bytes + detail::page_size();
        const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(asked), static_cast<int>(sizeof(T)), info, comm, &base, &win_);
        MPI_Info_free(&info);
        detail::check(rc, "MPI_Win_allocate_shared");
        data_ = bytes == 0 ? nullptr : static_cast<T*>(detail::page_up(base));
        try {
            detail::follow_errhandler(comm, win_);
            node_ = os < 0 ? -1 : topo.from_os_index(static_cast<unsigned>(os));
            if (bytes > 0) bind(bytes, fb);
        } catch (...) {
            error = std::current_exception();
        }
        try {
            detail::agree(comm, error);
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
          count_(std::exchange(o.count_, 0)), node_(o.node_), placed_(o.placed_) {}
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
    /// \returns the window (`MPI_WIN_NULL` when empty).
    MPI_Win window() const noexcept { return win_; }
    /// \returns rank `r`'s segment as this process maps it (from its first page boundary: a mapping
    /// starts on a page in every process) and its size in T's (`MPI_Win_shared_query`): at least what
    /// rank r asked for, the rest of its last page included.
    /// \throws mpi_error (e.g. `r` is not a rank of the window's group).
    std::pair<T*, std::size_t> segment(int r) const {
        MPI_Aint bytes = 0;
        int unit = 0;
        void* base = nullptr;
        detail::check(MPI_Win_shared_query(win_, r, &bytes, &unit, &base), "MPI_Win_shared_query");
        if (bytes == 0) return {nullptr, 0};
        return {static_cast<T*>(detail::page_up(base)), (static_cast<std::size_t>(bytes) - detail::page_size()) / sizeof(T)};
    }

private:
    void bind(std::size_t bytes, fallback fb) {
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
    }

    MPI_Win win_ = MPI_WIN_NULL;
    T* data_ = nullptr;
    std::size_t count_ = 0;
    int node_ = -1;
    bool placed_ = false;
};

} // namespace mpi
} // namespace numaplace

#endif
