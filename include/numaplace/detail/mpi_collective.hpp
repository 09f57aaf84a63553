#ifndef NUMAPLACE_DETAIL_MPI_COLLECTIVE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_MPI_COLLECTIVE_HPP_INCLUDED

// How numaplace's collectives fail together (docs/mpi.md, "Collective, and failing together"): every
// collective of mpi.hpp is a fixed sequence of MPI calls that every rank makes whatever happened to it;
// a rank's local failure is caught, carried to the next agreement point (`agree`), and thrown there on
// every rank at once. A rank never leaves a collective early, so no other rank waits for it and no rank
// meets another's next collective.

#include "../mpi_errors.hpp"

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
#include <exception>
#include <string>

namespace numaplace {
namespace mpi {
namespace detail {

inline void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
    throw mpi_error(rc, std::string("numaplace::mpi: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// \effects throws invalid_communicator for MPI_COMM_NULL or an intercommunicator. Local: every rank of
// `comm` decides the same, before any communication (Open MPI 4.1 crashes in MPI_Comm_split_type on an
// intercommunicator).
inline void check_intra(MPI_Comm comm) {
    if (comm == MPI_COMM_NULL) throw invalid_communicator("numaplace::mpi: MPI_COMM_NULL is not a communicator of ranks");
    int inter = 0;
    check(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
    if (inter != 0)
        throw invalid_communicator("numaplace::mpi: an intercommunicator (two groups) is refused: shared windows and node "
                                   "maps need one group (MPI_Intercomm_merge it first)");
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

// \effects runs `local` (this rank's part, which may throw anything), then agrees (collective): every
// rank throws when one failed. Any local failure, the first call of the process included (topology
// unreadable at the descriptor limit), reaches the agreement.
template <class F>
void locally(MPI_Comm comm, F&& local) {
    std::exception_ptr error;
    try {
        local();
    } catch (...) {
        error = std::current_exception();
    }
    agree(comm, error);
}

// \effects collective: throws invalid_communicator (local, first) and communicator_spans_hosts on every
// rank unless all of comm's ranks share this host's memory.
inline void check_one_host(MPI_Comm comm) {
    check_intra(comm);
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

} // namespace detail
} // namespace mpi
} // namespace numaplace

#endif
