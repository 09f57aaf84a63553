// oneTBB's own NUMA allocation beside numaplace's interleave: 1 GiB allocated, touched in parallel by
// oneTBB and freed, per iteration. oneTBB 2023.1 added a preview `tbb::allocate_numa_interleaved`
// (oneapi/tbb/numa_allocation.h, behind TBB_PREVIEW_NUMA_ALLOCATION); Debian 12's oneTBB 2021.8 has
// none, so this benchmark is built only where the header exists (the tbb2023 stage of scripts/test
// builds and runs it once against PyPI's oneTBB). Plain mmap + touch is the baseline in the same run.
#define TBB_PREVIEW_NUMA_ALLOCATION 1
#include <numaplace/allocator.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/where.hpp>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/numa_allocation.h>
#include <oneapi/tbb/parallel_for.h>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <vector>

namespace {
constexpr std::size_t gib = std::size_t(1) << 30;

void touch_by_tbb(void* p, std::size_t bytes) {
    auto* c = static_cast<char*>(p);
    const std::size_t page = numaplace::detail::page_size();
    tbb::parallel_for(std::size_t(0), bytes / page, [c, page](std::size_t i) { c[i * page] = 1; });
}

template <class Get, class Put>
void cycle(benchmark::State& state, Get get, Put put) {
    std::size_t touched = 0;
    for (auto _ : state) {
        void* p = get();
        if (!p) {
            state.SkipWithError("allocation failed");
            return;
        }
        touch_by_tbb(p, gib);
        touched = numaplace::where(p, gib).touched();
        put(p);
    }
    state.counters["pages_touched"] = static_cast<double>(touched);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(gib));
}

void BM_Large_mmap_touch(benchmark::State& state) {
    cycle(state, [] { return numaplace::memory::map(gib); }, [](void* p) { numaplace::memory::unmap(p, gib); });
}
void BM_Large_numaplace_interleaved(benchmark::State& state) {
    numaplace::interleaved_allocator<char> a{numaplace::interleaved(numaplace::topology::get().all())};
    cycle(state, [&] { return static_cast<void*>(a.allocate(gib)); },
          [&](void* p) { a.deallocate(static_cast<char*>(p), gib); });
}
void BM_Large_tbb_allocate_numa_interleaved(benchmark::State& state) {
    const std::vector<tbb::numa_node_id> nodes = tbb::info::numa_nodes();
    cycle(state, [&] { return tbb::allocate_numa_interleaved(gib, nodes); },
          [](void* p) { tbb::deallocate_numa_interleaved(p, gib); });
}
} // namespace

BENCHMARK(BM_Large_mmap_touch)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Large_numaplace_interleaved)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Large_tbb_allocate_numa_interleaved)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
