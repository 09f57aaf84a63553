#ifndef NUMAPLACE_MPI_ERRORS_HPP_INCLUDED
#define NUMAPLACE_MPI_ERRORS_HPP_INCLUDED

/// \file
/// The errors of `mpi.hpp` (target numaplace::mpi). Needs no MPI header: a program may catch them
/// where mpi.h is not included.

#include <iterator> // before <stdexcept>/<string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <stdexcept>
#include <string>

namespace numaplace {
namespace mpi {

/// An MPI call returned an error (when the communicator's error handler returns errors at all).
class mpi_error : public std::runtime_error {
public:
    /// \effects records the MPI error code; `what()` says what failed.
    mpi_error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
    /// \returns the MPI error code.
    int code() const noexcept { return code_; }

private:
    int code_;
};

/// A communicator that a collective of numaplace cannot take: `MPI_COMM_NULL`, or an
/// intercommunicator (two groups: no shared window, no node map across them). Thrown on every rank
/// before any communication: each rank decides it alone and all decide the same.
class invalid_communicator : public std::invalid_argument {
public:
    /// \effects `what()` says why the communicator was refused.
    explicit invalid_communicator(const std::string& what) : std::invalid_argument(what) {}
};

/// The ranks of a communicator do not all share this host's memory (a shared window or a node map
/// needs them to): `ranks()` ranks, `shared()` of them on this rank's host.
class communicator_spans_hosts : public std::invalid_argument {
public:
    /// \effects records the ranks of the communicator and how many share this host.
    communicator_spans_hosts(int ranks, int shared)
        : std::invalid_argument("numaplace::mpi: the communicator spans hosts: " + std::to_string(shared) + " of its " +
                                std::to_string(ranks) +
                                " ranks share this host's memory (split it with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) first)"),
          ranks_(ranks), shared_(shared) {}
    /// \returns the number of ranks of the communicator.
    int ranks() const noexcept { return ranks_; }
    /// \returns the number of ranks that share this rank's host.
    int shared() const noexcept { return shared_; }

private:
    int ranks_, shared_;
};

/// Another rank's part of a collective call failed (this rank's part did not): `rank()` says which, its
/// message is in `what()`.
class rank_failed : public std::runtime_error {
public:
    /// \effects names the rank whose part of a collective call failed.
    rank_failed(int rank, const std::string& what) : std::runtime_error(what), rank_(rank) {}
    /// \returns the rank that failed.
    int rank() const noexcept { return rank_; }

private:
    int rank_;
};

} // namespace mpi
} // namespace numaplace

#endif
