// numaplace::parallel_for against raw tbb::parallel_for: a streaming loop (a = b + s*c over arrays far
// larger than the caches) and an empty body (pure scheduling overhead). Target: <= 1.05x.
#include <numaplace/numaplace.hpp>

#include <benchmark/benchmark.h>

#include <oneapi/tbb/parallel_for.h>

#include <vector>

namespace {
constexpr std::size_t stream_n = std::size_t(1) << 25; // 3 arrays x 256 MiB

struct arrays {
    numaplace::partition<double> part{stream_n};
    numaplace::partitioned_vector<double> a, b, c;
    arrays()
        : a(stream_n, numaplace::partitioned_allocator<double>(part)),
          b(stream_n, numaplace::partitioned_allocator<double>(part)),
          c(stream_n, numaplace::partitioned_allocator<double>(part)) {
        numaplace::parallel_for(part, [&](numaplace::subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) {
                a[i] = 0;
                b[i] = 1;
                c[i] = 2;
            }
        });
    }
    static arrays& get() {
        static arrays instance;
        return instance;
    }
};

void set_stream_counters(benchmark::State& state) {
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * stream_n * sizeof(double)));
}

void BM_Stream_numaplace(benchmark::State& state) {
    auto& x = arrays::get();
    double* a = x.a.data();
    const double *b = x.b.data(), *c = x.c.data();
    for (auto _ : state) {
        numaplace::parallel_for(x.part, [=](numaplace::subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0 * c[i];
        }, 8192);
        benchmark::ClobberMemory();
    }
    set_stream_counters(state);
}

void BM_Stream_tbb(benchmark::State& state) {
    auto& x = arrays::get();
    double* a = x.a.data();
    const double *b = x.b.data(), *c = x.c.data();
    for (auto _ : state) {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, stream_n, 8192), [=](const tbb::blocked_range<std::size_t>& r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i) a[i] = b[i] + 3.0 * c[i];
        });
        benchmark::ClobberMemory();
    }
    set_stream_counters(state);
}

void BM_Empty_numaplace(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    numaplace::partition<double> part(n);
    for (auto _ : state) numaplace::parallel_for(part, [](numaplace::subrange r) { benchmark::DoNotOptimize(r.begin()); });
    state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_Empty_tbb(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    for (auto _ : state)
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n), [](const tbb::blocked_range<std::size_t>& r) {
            benchmark::DoNotOptimize(r.begin());
        });
    state.SetItemsProcessed(state.iterations() * state.range(0));
}
} // namespace

// Interleaved repetitions so both variants see the same machine state.
BENCHMARK(BM_Stream_numaplace)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5);
BENCHMARK(BM_Stream_tbb)->Unit(benchmark::kMillisecond)->UseRealTime()->Repetitions(5);
BENCHMARK(BM_Empty_numaplace)->Arg(1 << 10)->Arg(1 << 20)->UseRealTime()->Repetitions(5);
BENCHMARK(BM_Empty_tbb)->Arg(1 << 10)->Arg(1 << 20)->UseRealTime()->Repetitions(5);
BENCHMARK_MAIN();
