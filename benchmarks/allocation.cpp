// Allocation benchmarks.
//  Large: 1 GiB allocate + parallel first touch + free, for each numaplace allocator, against plain
//  mmap + touch (the floor), std::allocator, libnuma's numa_alloc_onnode and hwloc_alloc_membind.
//  Small: std::map<int,int> insert/erase and std::list push/pop with node_allocator (per-node pool)
//  against std::allocator and against one mapping per node (page_resource, what pooling avoids).
//  Threshold: allocate+free of sizes around one page, where node_allocator switches from pool to pages.
#include <numaplace/numaplace.hpp>

#include <benchmark/benchmark.h>

#include <hwloc.h>
#include <oneapi/tbb/parallel_for.h>

#include <list>
#include <map>
#include <memory>
#include <memory_resource>

#ifdef NUMAPLACE_HAVE_LIBNUMA
#include <numa.h>
#endif

namespace {
constexpr std::size_t gib = std::size_t(1) << 30;

// Touches every page of [p, p+bytes) from oneTBB's threads (what std::allocator users would do at best).
void parallel_touch(void* p, std::size_t bytes) {
    const std::size_t page = numaplace::detail::page_size();
    auto* c = static_cast<char*>(p);
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, bytes / page, 256), [c, page](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) c[i * page] = 1;
    });
}

// One cycle per iteration: get 1 GiB, touch every page in parallel, give it back.
template <class Get, class Touch, class Put>
void large_cycle(benchmark::State& state, Get get, Touch touch, Put put) {
    for (auto _ : state) {
        void* p = get();
        touch(p);
        benchmark::DoNotOptimize(p);
        put(p);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * gib));
}
void touch_by_tbb(void* p) { parallel_touch(p, gib); }

template <class A>
void large_allocator(benchmark::State& state, A a) {
    large_cycle(state, [&] { return static_cast<void*>(a.allocate(gib)); }, touch_by_tbb,
                [&](void* p) { a.deallocate(static_cast<char*>(p), gib); });
}

void BM_Large_mmap_touch(benchmark::State& state) {
    large_cycle(state, [] { return numaplace::memory::map(gib); }, touch_by_tbb,
                [](void* p) { numaplace::memory::unmap(p, gib); });
}
void BM_Large_std_allocator(benchmark::State& state) { large_allocator(state, std::allocator<char>()); }
void BM_Large_node_allocator(benchmark::State& state) { large_allocator(state, numaplace::node_allocator<char>(0)); }
void BM_Large_interleaved_allocator(benchmark::State& state) {
    large_allocator(state, numaplace::interleaved_allocator<char>(numaplace::topology::get().all()));
}
void BM_Large_partitioned_allocator_first_touch(benchmark::State& state) {
    numaplace::partition<char> part(gib);
    numaplace::partitioned_allocator<char> a(part);
    large_cycle(state, [&] { return static_cast<void*>(a.allocate(gib)); },
                [&](void* p) { numaplace::first_touch(static_cast<char*>(p), part); },
                [&](void* p) { a.deallocate(static_cast<char*>(p), gib); });
}

#ifdef NUMAPLACE_HAVE_LIBNUMA
void BM_Large_numa_alloc_onnode(benchmark::State& state) {
    if (numa_available() < 0) {
        state.SkipWithError("libnuma: numa_available() < 0");
        return;
    }
    const int os_node = static_cast<int>(numaplace::topology::get().at(0).os_index);
    large_cycle(state, [os_node] { return numa_alloc_onnode(gib, os_node); }, touch_by_tbb,
                [](void* p) { numa_free(p, gib); });
}
#endif

void BM_Large_hwloc_alloc_membind(benchmark::State& state) {
    const auto& topo = numaplace::topology::get();
    hwloc_obj_t node = topo.native_node(0);
    large_cycle(state,
                [&] { return hwloc_alloc_membind(topo.native(), gib, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET); },
                touch_by_tbb, [&](void* p) { hwloc_free(topo.native(), p, gib); });
}

constexpr int small_ops = 100000;

template <class Map>
void map_ops(benchmark::State& state, Map m) {
    for (auto _ : state) {
        for (int i = 0; i < small_ops; ++i) m.emplace(i * 7919 % small_ops, i);
        for (int i = 0; i < small_ops; ++i) m.erase(i);
        benchmark::DoNotOptimize(m.size());
    }
    state.SetItemsProcessed(state.iterations() * 2 * small_ops);
}
using kv = std::pair<const int, int>;
void BM_Small_map_std_allocator(benchmark::State& state) { map_ops(state, std::map<int, int>()); }
void BM_Small_map_node_allocator(benchmark::State& state) {
    map_ops(state, std::map<int, int, std::less<int>, numaplace::node_allocator<kv>>(numaplace::node_allocator<kv>(0)));
}
void BM_Small_map_mapping_per_node(benchmark::State& state) {
    numaplace::page_resource<numaplace::on_node> pages{numaplace::on_node(0)};
    map_ops(state, std::pmr::map<int, int>(&pages));
}

template <class List>
void list_ops(benchmark::State& state, List l) {
    for (auto _ : state) {
        for (int i = 0; i < small_ops; ++i) l.push_back(i);
        for (int i = 0; i < small_ops; ++i) l.pop_front();
        benchmark::DoNotOptimize(l.size());
    }
    state.SetItemsProcessed(state.iterations() * 2 * small_ops);
}
void BM_Small_list_std_allocator(benchmark::State& state) { list_ops(state, std::list<int>()); }
void BM_Small_list_node_allocator(benchmark::State& state) {
    list_ops(state, std::list<int, numaplace::node_allocator<int>>(numaplace::node_allocator<int>(0)));
}

// Around the pool/pages threshold (one page): allocate + free of one block.
void BM_Threshold_node_allocator(benchmark::State& state) {
    numaplace::node_allocator<char> a(0);
    const auto bytes = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        char* p = a.allocate(bytes);
        benchmark::DoNotOptimize(p);
        a.deallocate(p, bytes);
    }
    state.counters["pooled"] = bytes < numaplace::detail::page_size() ? 1 : 0;
}
void BM_Threshold_std_allocator(benchmark::State& state) {
    std::allocator<char> a;
    const auto bytes = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        char* p = a.allocate(bytes);
        benchmark::DoNotOptimize(p);
        a.deallocate(p, bytes);
    }
}
} // namespace

BENCHMARK(BM_Large_mmap_touch)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
BENCHMARK(BM_Large_std_allocator)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
BENCHMARK(BM_Large_node_allocator)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
BENCHMARK(BM_Large_interleaved_allocator)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
BENCHMARK(BM_Large_partitioned_allocator_first_touch)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
#ifdef NUMAPLACE_HAVE_LIBNUMA
BENCHMARK(BM_Large_numa_alloc_onnode)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
#endif
BENCHMARK(BM_Large_hwloc_alloc_membind)->Unit(benchmark::kMillisecond)->Iterations(4)->UseRealTime();
BENCHMARK(BM_Small_map_std_allocator)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Small_map_node_allocator)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Small_map_mapping_per_node)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Small_list_std_allocator)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Small_list_node_allocator)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Threshold_node_allocator)->Arg(64)->Arg(1024)->Arg(4095)->Arg(4096)->Arg(65536);
BENCHMARK(BM_Threshold_std_allocator)->Arg(64)->Arg(1024)->Arg(4095)->Arg(4096)->Arg(65536);
BENCHMARK_MAIN();
