// Consumer of numaplace::mpi: a shared window of 1000 doubles per rank, each rank's segment on its node;
// rank 0 writes every segment, each rank reads its own back. Exits 0 when every value arrived.
#include <numaplace/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 0, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    {
        numaplace::mpi::shared_window<double> w(MPI_COMM_WORLD, 1000);
        if (rank == 0)
            for (int r = 0; r < ranks; ++r)
                for (std::size_t i = 0; i < 1000; ++i) w.segment(r).first[i] = r + 0.5;
        MPI_Barrier(MPI_COMM_WORLD);
        for (std::size_t i = 0; i < 1000; ++i) bad += w.data()[i] != rank + 0.5;
        std::printf("numaplace::mpi: rank %d of %d, segment on node %d, %d wrong\n", rank, ranks, w.node(), bad);
    }
    MPI_Finalize();
    return bad == 0 ? 0 : 1;
}
