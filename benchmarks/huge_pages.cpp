// What huge pages do to the partitioned loops: the same partitioned arrays with small-page block edges
// (the placement keeps THP off: MADV_NOHUGEPAGE) and with huge-page edges (in THP `madvise` mode the
// placement asks for huge pages: MADV_HUGEPAGE; in `always` mode they come anyway). A STREAM triad over
// three partitioned vectors and the DGEMV over a rows-partitioned matrix, each computed by
// numaplace::parallel_for. Counter huge_fraction: the share of the arrays backed by huge pages
// (/proc/self/smaps AnonHugePages). Run interleaved:
//   bench_huge_pages --benchmark_enable_random_interleaving=true --benchmark_repetitions=10
#include "dgemv_kernel.hpp"
#include "smaps.hpp" // tests/support: the smaps reader the unit tests use

#include <numaplace/numaplace.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>

namespace {
using numaplace::edge_alignment;
using numaplace::partition;

// Bytes of [p, p + bytes) mappings backed by anonymous huge pages (whole mappings that contain p).
double huge_fraction(const void* p, std::size_t bytes) {
    return static_cast<double>(numaplace_test::smaps_kb(p, "AnonHugePages")) * 1024.0 / static_cast<double>(bytes);
}

constexpr std::size_t stream_n = std::size_t(1) << 25; // 3 x 256 MiB
constexpr std::size_t dgemv_n = 8192;                  // 8192 x 8192 doubles: 512 MiB

template <edge_alignment Edges>
struct triad_arrays {
    partition<double> part{stream_n, numaplace::topology::get().with_cpus(), {}, Edges};
    numaplace::partitioned_vector<double> a, b, c;
    triad_arrays()
        : a(stream_n, numaplace::partitioned_allocator<double>(part)),
          b(stream_n, numaplace::partitioned_allocator<double>(part)),
          c(stream_n, numaplace::partitioned_allocator<double>(part)) {
        numaplace::parallel_for(a, [&](numaplace::subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) {
                a[i] = 0;
                b[i] = 1;
                c[i] = 2;
            }
        });
    }
    static triad_arrays& get() {
        static triad_arrays instance;
        return instance;
    }
};

template <edge_alignment Edges>
void BM_HugePages_triad(benchmark::State& state) {
    auto& x = triad_arrays<Edges>::get();
    double* a = x.a.data();
    const double *b = x.b.data(), *c = x.c.data();
    for (auto _ : state) {
        numaplace::parallel_for(x.a, [=](numaplace::subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0 * c[i];
        }, 8192);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * stream_n * sizeof(double)));
    state.counters["huge_fraction"] = huge_fraction(a, stream_n * sizeof(double));
    state.counters["alignment"] = static_cast<double>(x.part.alignment());
}

template <edge_alignment Edges>
struct matrix {
    numaplace::row_partition<double> rows = partition<double>::rows(dgemv_n, dgemv_n, numaplace::topology::get().with_cpus(), {}, Edges);
    numaplace::partitioned_vector<double> a{dgemv_n * dgemv_n, numaplace::partitioned_allocator<double>(rows)};
    std::vector<double> x = std::vector<double>(dgemv_n, 0.5), y = std::vector<double>(dgemv_n);
    matrix() {
        numaplace::parallel_for(rows, [&](numaplace::subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i)
                for (std::size_t j = 0; j < dgemv_n; ++j) a[i * dgemv_n + j] = static_cast<double>((i + j) % 7);
        });
    }
    static matrix& get() {
        static matrix instance;
        return instance;
    }
};

template <edge_alignment Edges>
void BM_HugePages_dgemv(benchmark::State& state) {
    auto& m = matrix<Edges>::get();
    const double* a = m.a.data();
    const double* x = m.x.data();
    double* y = m.y.data();
    for (auto _ : state) {
        numaplace::parallel_for(m.rows, [=](numaplace::subrange r) {
            numaplace::bench::dgemv_rows(a, dgemv_n, x, y, r.begin(), r.end(), dgemv_n);
        });
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * dgemv_n * dgemv_n * sizeof(double)));
    state.counters["huge_fraction"] = huge_fraction(a, dgemv_n * dgemv_n * sizeof(double));
    state.counters["alignment"] = static_cast<double>(m.rows.alignment());
}
} // namespace

BENCHMARK_TEMPLATE(BM_HugePages_triad, edge_alignment::page)->Name("BM_HugePages_triad/page_edges")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HugePages_triad, edge_alignment::huge)->Name("BM_HugePages_triad/huge_edges")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HugePages_dgemv, edge_alignment::page)->Name("BM_HugePages_dgemv/page_edges")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_HugePages_dgemv, edge_alignment::huge)->Name("BM_HugePages_dgemv/huge_edges")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
