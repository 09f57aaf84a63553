// Built by CTest once per NUMAPLACE_MPI_ELEMENT_* case: a shared_window of an element type mpi.hpp's
// rules refuse must fail to compile with the static_assert naming the rule (PASS_REGULAR_EXPRESSION).
#include <numaplace/mpi.hpp>

struct alignas(8192) over_aligned {
    char c;
};

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
#if defined(NUMAPLACE_MPI_ELEMENT_const)
    numaplace::mpi::shared_window<const double> w(MPI_COMM_WORLD, 1);
#elif defined(NUMAPLACE_MPI_ELEMENT_over_aligned)
    numaplace::mpi::shared_window<over_aligned> w(MPI_COMM_WORLD, 1);
#endif
    MPI_Finalize();
    return 0;
}
