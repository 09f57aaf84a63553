// A hybrid MPI + threads code as a launcher runs it: mpirun binds each rank (--bind-to core, numa,
// socket); each rank splits its own rows over the nodes of its binding (the default partition, which is
// `mpi::rank_partition`'s split), places them there, computes them in its node's arenas (workers within
// its CPUs only), and publishes its part of the result in a shared window whose segment is on its node,
// from which rank 0 checks the whole result against its closed form.
//
//   mpirun -np R [--map-by core --bind-to core | --map-by numa --bind-to numa] hybrid_mpi_threads
//          [--rows M] [--cols N] [--expect-binding]
//
// y = A x with A(i, j) = 1 + (i + j) mod 7 and x = 1: y(i) is known exactly. --expect-binding asserts what
// the launcher's binding promises: every loop body on a CPU of its rank's binding, no two ranks' bodies on
// one CPU where the launcher gave them disjoint CPUs, the rank's pages all on its nodes (`where`), its
// segment on its node; exit 1 otherwise.

#include <numaplace/mpi.hpp>
#include <numaplace/numaplace.hpp>

#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sched.h>

namespace {

constexpr int words = CPU_SETSIZE / 64; // a CPU set as 64-bit words, for MPI

std::vector<std::uint64_t> to_words(const std::set<unsigned>& cpus) {
    std::vector<std::uint64_t> w(words, 0);
    for (unsigned c : cpus)
        if (c < CPU_SETSIZE) w[c / 64] |= std::uint64_t(1) << (c % 64);
    return w;
}
/// The CPUs the launcher gave this rank: its binding as numaplace reads it.
std::set<unsigned> affinity() {
    const numaplace::cpu_binding b = numaplace::cpu_binding::current();
    std::set<unsigned> cpus;
    for (int k : b.nodes()) cpus.insert(b.cpus(k).begin(), b.cpus(k).end());
    return cpus;
}
bool overlap(const std::uint64_t* a, const std::uint64_t* b) {
    for (int i = 0; i < words; ++i)
        if (a[i] & b[i]) return true;
    return false;
}
std::string list(const std::set<unsigned>& cpus) {
    std::string s;
    for (unsigned c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
}

int run(int argc, char** argv) {
    std::size_t rows = 4001, cols = 1003; // odd, as real grids are
    bool expect = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--rows" && i + 1 < argc) rows = std::stoul(argv[++i]);
        else if (a == "--cols" && i + 1 < argc) cols = std::stoul(argv[++i]);
        else if (a == "--expect-binding") expect = true;
        else {
            std::cerr << "usage: hybrid_mpi_threads [--rows M] [--cols N] [--expect-binding]\n";
            return 2;
        }
    }
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    // This rank's rows: [first, first + mine), the remainder to the first ranks.
    const std::size_t base = rows / static_cast<std::size_t>(ranks), extra = rows % static_cast<std::size_t>(ranks);
    const auto r = static_cast<std::size_t>(rank);
    const std::size_t mine = base + (r < extra ? 1 : 0);
    const std::size_t first = r * base + (r < extra ? r : extra);

    // The rank's split: its binding's nodes weighted by its CPUs there (rank_partition says the same).
    const auto part = numaplace::partition<double>::rows(mine, cols);
    bool ok = part.nodes() == numaplace::mpi::rank_partition<double>(mine).nodes();
    numaplace::partitioned_vector<double> a(mine * cols, numaplace::partitioned_allocator<double>(part));
    const std::vector<double> x(cols, 1.0);

    // A parallel first touch, then y = A x, both over the same rows partition.
    std::mutex m;
    std::set<unsigned> used;
    auto note_cpu = [&] {
        const int cpu = ::sched_getcpu();
        std::lock_guard<std::mutex> lock(m);
        used.insert(static_cast<unsigned>(cpu));
    };
    numaplace::parallel_for(part, [&](numaplace::subrange s) {
        for (std::size_t i = s.begin(); i < s.end(); ++i)
            for (std::size_t j = 0; j < cols; ++j) a[i * cols + j] = 1.0 + double((first + i + j) % 7);
        note_cpu();
    });
    numaplace::mpi::shared_window<double> y(MPI_COMM_WORLD, mine);
    for (int round = 0; round < 4; ++round)
        numaplace::parallel_for(part, [&](numaplace::subrange s) {
            for (std::size_t i = s.begin(); i < s.end(); ++i) {
                double sum = 0;
                for (std::size_t j = 0; j < cols; ++j) sum += a[i * cols + j] * x[j];
                y.data()[i] = sum;
            }
            note_cpu();
        });
    const auto pages = numaplace::where(a.data(), part.elements());
    MPI_Barrier(MPI_COMM_WORLD); // every segment written

    // Rank 0 checks every row, reading the others' segments in place.
    std::size_t wrong = 0;
    if (rank == 0)
        for (int q = 0; q < ranks; ++q) {
            const auto qq = static_cast<std::size_t>(q);
            const std::size_t q_rows = base + (qq < extra ? 1 : 0), q_first = qq * base + (qq < extra ? qq : extra);
            const double* seg = y.segment(q).first;
            for (std::size_t i = 0; i < q_rows; ++i) {
                double want = 0;
                for (std::size_t j = 0; j < cols; ++j) want += 1.0 + double((q_first + i + j) % 7);
                wrong += seg[i] == want ? 0 : 1;
            }
        }
    MPI_Barrier(MPI_COMM_WORLD); // rank 0 done reading

    // What each rank was given and where its work ran, gathered.
    const std::set<unsigned> bound = affinity();
    std::vector<std::uint64_t> mine_words = to_words(used), bound_words = to_words(bound);
    std::vector<std::uint64_t> all_used(static_cast<std::size_t>(words * ranks)), all_bound(all_used.size());
    MPI_Allgather(mine_words.data(), words, MPI_UINT64_T, all_used.data(), words, MPI_UINT64_T, MPI_COMM_WORLD);
    MPI_Allgather(bound_words.data(), words, MPI_UINT64_T, all_bound.data(), words, MPI_UINT64_T, MPI_COMM_WORLD);
    for (unsigned c : used) ok = ok && bound.count(c) == 1;
    for (int q = 0; q < ranks; ++q)
        if (q != rank && !overlap(&all_bound[static_cast<std::size_t>(q * words)], bound_words.data()))
            ok = ok && !overlap(&all_used[static_cast<std::size_t>(q * words)], mine_words.data());
    ok = ok && pages.remote == 0 && pages.histogram.untouched == 0;
    ok = ok && (part.nodes().size() != 1 || y.node() == part.nodes()[0]);
    std::ostringstream line;
    line << "rank " << rank << ": bound to cpus " << list(bound) << ", rows " << first << ".." << first + mine
         << " on nodes";
    for (int k : part.nodes()) line << ' ' << k;
    line << ", bodies on cpus " << list(used) << ", pages " << pages.local << " local " << pages.shared << " shared "
         << pages.remote << " remote, segment on node " << y.node() << (ok ? "" : "  NOT WITHIN ITS BINDING") << '\n';
    std::cout << line.str() << std::flush;

    int good = ok ? 1 : 0, all_good = 0;
    MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        std::cout << "hybrid: " << rows << " x " << cols << " over " << ranks << " ranks, " << wrong << " wrong rows"
                  << (all_good ? ", every rank within its binding" : ", a rank OUTSIDE its binding") << '\n';
        if (wrong == 0 && (all_good || !expect)) std::cout << "hybrid: OK\n";
    }
    return wrong == 0 && (all_good || !expect) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); // MPI from the main thread only
    int code = 1;
    try {
        code = run(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "hybrid_mpi_threads: " << e.what() << '\n';
        code = 1;
    }
    int worst = 0;
    MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
