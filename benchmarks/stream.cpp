// McCalpin's STREAM (Copy, Scale, Add, Triad; https://www.cs.virginia.edu/stream/ref.html, v5.10) on
// numaplace partitioned vectors and numaplace::parallel_for, beside a reference with STREAM's own
// structure: plain arrays (no placement, no madvise), filled and computed by one contiguous chunk per
// thread (OpenMP `schedule(static)`, here tbb::parallel_for with static_partitioner and a grain of n/T).
// The kernels are STREAM's loops, written once (`kernels` below) and called by both on [begin, end).
//
// Variants (all arrays live for the whole run, so repetitions of every variant interleave):
//   reference            the STREAM structure above
//   reference_hugepage   the same, arrays madvise(MADV_HUGEPAGE) before the parallel init
//   partitioned          numaplace::partitioned_vector + parallel_for over the vectors' partition, grain
//                        n / threads: one piece per thread, as STREAM's schedule(static)
//   partitioned_hugepage the same, the vectors madvise(MADV_HUGEPAGE) before the parallel init
//   partitioned_auto     partitioned with parallel_for's default grain (oneTBB's auto partitioner)
//
// Why the grain matters for Copy: GCC turns Copy into one memcpy (memmove) call per piece, and glibc
// 2.36 switches to non-temporal stores only for calls of at least x86_non_temporal_threshold bytes:
// 288 MiB on this VM (3/4 of a 384 MiB "shared cache" glibc derives from its CPUID; `ld.so
// --list-tunables`). STREAM's per-thread pieces (640 MB at 1 thread, 320 MB at 2) cross it and are
// stored non-temporally: 2 memory transfers per element. oneTBB's auto partitioner hands memcpy
// pieces of a few MiB (1319 calls < 16 MiB for 5 Copies of 80 M at 1-2 threads): ordinary stores, which
// first read every destination line (write-allocate): 3 transfers per element, so Copy was ~1/3 slower
// with the same memory placement. Scale, Add and Triad are compiled loops with ordinary stores in both.
// GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=<bytes> moves the switch (for diagnosis).
// Names: BM_Stream_<Copy|Scale|Add|Triad>_<variant>/threads:T. Bytes counted as STREAM counts them
// (Copy, Scale: 2 words per element; Add, Triad: 3), so GB/s are comparable with STREAM's output.
// Size: NUMAPLACE_STREAM_N elements per array (default 80 000 000, STREAM_ARRAY_SIZE of the report).
//
// Run: bench_stream --benchmark_enable_random_interleaving=true --benchmark_repetitions=10
//        --benchmark_report_aggregates_only=true   (mean, median, stddev, cv per benchmark)
// After the run every array is checked as STREAM's checkSTREAMresults does (relative error < 1e-13).
#include <numaplace/numaplace.hpp>

#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <sys/mman.h>

namespace {
using numaplace::subrange;

std::size_t env_size(const char* name, std::size_t fallback) {
    const char* v = std::getenv(name);
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}
const std::size_t stream_n = env_size("NUMAPLACE_STREAM_N", 80'000'000);
constexpr double scalar = 3.0;

// STREAM's four loops over [i0, i1). STREAM's arrays are distinct globals, so the compiler knows they
// do not overlap and turns Copy into a memcpy call; __restrict parameters say the same here (GCC -O2/-O3
// then calls memcpy for Copy, as it does in STREAM).
void stream_copy(const double* __restrict a, double* __restrict c, std::size_t i0, std::size_t i1) {
    for (std::size_t j = i0; j < i1; ++j) c[j] = a[j];
}
void stream_scale(const double* __restrict c, double* __restrict b, std::size_t i0, std::size_t i1) {
    for (std::size_t j = i0; j < i1; ++j) b[j] = scalar * c[j];
}
void stream_add(const double* __restrict a, const double* __restrict b, double* __restrict c, std::size_t i0,
                std::size_t i1) {
    for (std::size_t j = i0; j < i1; ++j) c[j] = a[j] + b[j];
}
void stream_triad(double* __restrict a, const double* __restrict b, const double* __restrict c, std::size_t i0,
                  std::size_t i1) {
    for (std::size_t j = i0; j < i1; ++j) a[j] = b[j] + scalar * c[j];
}

struct kernels {
    double* a;
    double* b;
    double* c;
    void copy(std::size_t i0, std::size_t i1) const { stream_copy(a, c, i0, i1); }
    void scale(std::size_t i0, std::size_t i1) const { stream_scale(c, b, i0, i1); }
    void add(std::size_t i0, std::size_t i1) const { stream_add(a, b, c, i0, i1); }
    void triad(std::size_t i0, std::size_t i1) const { stream_triad(a, b, c, i0, i1); }
    // STREAM's initialisation, then its `a[j] = 2.0E0 * a[j]` timing-granularity pass.
    void init(std::size_t i0, std::size_t i1) const {
        for (std::size_t j = i0; j < i1; ++j) {
            a[j] = 1.0;
            b[j] = 2.0;
            c[j] = 0.0;
        }
        for (std::size_t j = i0; j < i1; ++j) a[j] = 2.0 * a[j];
    }
};

enum class kernel { copy, scale, add, triad };
const char* const kernel_names[] = {"Copy", "Scale", "Add", "Triad"};
constexpr double words[] = {2, 2, 3, 3};

void run_kernel(const kernels& k, kernel which, std::size_t i0, std::size_t i1) {
    switch (which) {
    case kernel::copy: k.copy(i0, i1); break;
    case kernel::scale: k.scale(i0, i1); break;
    case kernel::add: k.add(i0, i1); break;
    case kernel::triad: k.triad(i0, i1); break;
    }
}

// One set of three arrays and the loop that runs over them.
class variant {
public:
    virtual ~variant() = default;
    virtual const char* name() const = 0;
    virtual void run(kernel which, int threads) = 0;
    const kernels& arrays() const { return k_; }

    // \returns true when the arrays hold what STREAM's sequence of kernels gives, in the order run
    // (checked per element, every element; checkSTREAMresults checks the average error).
    bool check(std::string& why) const {
        // Replay the scalar recurrence in the same order the kernels ran; runs were interleaved, so
        // keep a log of the order instead of counts.
        double aj = 2.0, bj = 2.0, cj = 0.0;
        for (kernel w : log_) {
            switch (w) {
            case kernel::copy: cj = aj; break;
            case kernel::scale: bj = scalar * cj; break;
            case kernel::add: cj = aj + bj; break;
            case kernel::triad: aj = bj + scalar * cj; break;
            }
        }
        const double expect[3] = {aj, bj, cj};
        const double* arr[3] = {k_.a, k_.b, k_.c};
        for (int x = 0; x < 3; ++x)
            for (std::size_t j = 0; j < stream_n; ++j)
                if (std::fabs(arr[x][j] - expect[x]) > 1e-13 * std::fabs(expect[x])) {
                    why = std::string(name()) + ": array " + "abc"[x] + "[" + std::to_string(j) + "] = " +
                          std::to_string(arr[x][j]) + ", expected " + std::to_string(expect[x]);
                    return false;
                }
        return true;
    }

protected:
    kernels k_{};
    std::vector<kernel> log_;
};

void huge(double* p, bool on) {
    if (on) ::madvise(p, stream_n * sizeof(double), MADV_HUGEPAGE);
}

class reference_variant : public variant {
public:
    explicit reference_variant(bool hugepage) : hugepage_(hugepage) {
        const std::size_t bytes = stream_n * sizeof(double);
        for (double** p : {&k_.a, &k_.b, &k_.c}) {
            *p = static_cast<double*>(numaplace::memory::map(bytes, numaplace::detail::huge_page_size()));
            huge(*p, hugepage);
        }
        for_chunks(tbb::info::default_concurrency(), [this](std::size_t b, std::size_t e) { k_.init(b, e); });
    }
    ~reference_variant() override {
        for (double* p : {k_.a, k_.b, k_.c}) numaplace::memory::unmap(p, stream_n * sizeof(double));
    }
    const char* name() const override { return hugepage_ ? "reference_hugepage" : "reference"; }
    void run(kernel which, int threads) override {
        for_chunks(threads, [this, which](std::size_t b, std::size_t e) { run_kernel(k_, which, b, e); });
        log_.push_back(which);
    }

private:
    // One contiguous chunk per thread, as OpenMP schedule(static) gives.
    template <class F>
    static void for_chunks(int threads, F&& f) {
        const auto t = static_cast<std::size_t>(threads);
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, stream_n, (stream_n + t - 1) / t),
                          [&f](const tbb::blocked_range<std::size_t>& r) { f(r.begin(), r.end()); },
                          tbb::static_partitioner());
    }
    bool hugepage_;
};

// `piece_per_thread`: parallel_for's grain is n / threads, so each thread gets one contiguous piece of
// its node's block, as STREAM's OpenMP static schedule gives; otherwise the default grain (oneTBB's
// auto partitioner cuts blocks into pieces of a few MiB).
class partitioned_variant : public variant {
public:
    partitioned_variant(bool hugepage, bool piece_per_thread)
        : a_(stream_n, alloc()), b_(stream_n, alloc()), c_(stream_n, alloc()), hugepage_(hugepage),
          piece_per_thread_(piece_per_thread) {
        for (auto* v : {&a_, &b_, &c_}) huge(v->data(), hugepage);
        k_ = kernels{a_.data(), b_.data(), c_.data()};
        const kernels k = k_;
        numaplace::parallel_for(a_, [k](subrange r) { k.init(r.begin(), r.end()); });
    }
    const char* name() const override {
        return hugepage_ ? (piece_per_thread_ ? "partitioned_hugepage" : "partitioned_hugepage_auto")
                         : (piece_per_thread_ ? "partitioned" : "partitioned_auto");
    }
    void run(kernel which, int threads) override {
        const kernels k = k_;
        const auto t = static_cast<std::size_t>(threads);
        const std::size_t grain = piece_per_thread_ ? (stream_n + t - 1) / t : 1;
        numaplace::parallel_for(a_, [k, which](subrange r) { run_kernel(k, which, r.begin(), r.end()); }, grain);
        log_.push_back(which);
    }

private:
    static numaplace::partitioned_allocator<double> alloc() {
        return numaplace::partitioned_allocator<double>(numaplace::partition<double>(stream_n));
    }
    numaplace::partitioned_vector<double> a_, b_, c_;
    bool hugepage_, piece_per_thread_;
};

std::vector<std::unique_ptr<variant>>& variants() {
    static std::vector<std::unique_ptr<variant>> all;
    return all;
}

void BM_Stream(benchmark::State& state, variant* v, kernel which) {
    const int threads = static_cast<int>(state.range(0));
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    for (auto _ : state) {
        v->run(which, threads);
        benchmark::ClobberMemory();
    }
    const double bytes = words[static_cast<int>(which)] * sizeof(double) * static_cast<double>(stream_n);
    state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
    state.counters["GBps"] = benchmark::Counter(bytes / 1e9 * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
}
} // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    variants().push_back(std::make_unique<reference_variant>(false));
    variants().push_back(std::make_unique<reference_variant>(true));
    variants().push_back(std::make_unique<partitioned_variant>(false, true));
    variants().push_back(std::make_unique<partitioned_variant>(true, true));
    variants().push_back(std::make_unique<partitioned_variant>(false, false));
    const int all = tbb::info::default_concurrency();
    for (auto& v : variants())
        for (int w = 0; w < 4; ++w) {
            auto* b = benchmark::RegisterBenchmark(
                (std::string("BM_Stream_") + kernel_names[w] + "_" + v->name()).c_str(),
                [p = v.get(), w](benchmark::State& s) { BM_Stream(s, p, static_cast<kernel>(w)); });
            for (int t = 1; t <= all; ++t) b->Arg(t);
            b->ArgName("threads")->Unit(benchmark::kMillisecond)->Iterations(5)->UseRealTime();
        }
    benchmark::AddCustomContext("stream_n", std::to_string(stream_n));
    benchmark::AddCustomContext("thp", numaplace::topology::get().capabilities().thp);
    benchmark::RunSpecifiedBenchmarks();
    int failed = 0;
    for (auto& v : variants()) {
        std::string why;
        if (!v->check(why)) {
            std::fprintf(stderr, "STREAM validation failed: %s\n", why.c_str());
            failed = 1;
        }
    }
    if (!failed) std::fprintf(stderr, "STREAM validation: all arrays as expected\n");
    benchmark::Shutdown();
    return failed;
}
