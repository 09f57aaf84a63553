// Allocation benchmarks.
//  Large: 1 GiB allocate + parallel first touch + free, for each numaplace allocator, against plain
//  mmap + touch (the floor), std::allocator, libnuma's numa_alloc_onnode and hwloc_alloc_membind.
//  Small: std::map<int,int> insert/erase and std::list push/pop with node_allocator (per-node pool)
//  against std::allocator and against one mapping per node (page_resource, what pooling avoids).
//  Cycle: allocate, write first and last byte, free, per size 16 B..1 MiB: node_allocator against glibc
//  malloc, jemalloc, mimalloc and oneTBB's scalable_malloc. Mixed: random sizes 16 B..1 MiB with
//  cross-thread frees, with peak and final resident memory.
#include <numaplace/numaplace.hpp>

#include <benchmark/benchmark.h>

#include <hwloc.h>
#include <oneapi/tbb/parallel_for.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <random>
#include <string>

#include <dlfcn.h>
#include <unistd.h>
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

// --- Allocate + free per size class, and a mixed workload, against four general-purpose allocators.
// Peers are loaded with dlopen(RTLD_LOCAL) and called through their own entry points (jemalloc's
// mallocx/dallocx, mimalloc's mi_malloc/mi_free, oneTBB's scalable_malloc/scalable_free), so none of
// them replaces the process's malloc. A missing peer is reported as an error, not measured.
struct peer {
    void* (*alloc)(std::size_t) = nullptr;
    void (*free)(void*) = nullptr;
    const char* missing = nullptr;
};
peer load_peer(const char* lib, const char* alloc_sym, const char* free_sym) {
    peer p;
    void* h = ::dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        p.missing = lib;
        return p;
    }
    p.alloc = reinterpret_cast<void* (*)(std::size_t)>(::dlsym(h, alloc_sym));
    p.free = reinterpret_cast<void (*)(void*)>(::dlsym(h, free_sym));
    if (!p.alloc || !p.free) p.missing = alloc_sym;
    return p;
}
void* je_alloc(std::size_t n) {
    static auto f = reinterpret_cast<void* (*)(std::size_t, int)>(::dlsym(::dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL), "mallocx"));
    return f(n, 0);
}
void je_free(void* p) {
    static auto f = reinterpret_cast<void (*)(void*, int)>(::dlsym(::dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_LOCAL), "dallocx"));
    f(p, 0);
}
const peer& jemalloc_peer() {
    static const peer p = [] {
        peer q = load_peer("libjemalloc.so.2", "mallocx", "dallocx");
        if (!q.missing) q.alloc = je_alloc, q.free = je_free;
        return q;
    }();
    return p;
}
const peer& mimalloc_peer() {
    static const peer p = load_peer("libmimalloc.so.2", "mi_malloc", "mi_free");
    return p;
}
const peer& tbbmalloc_peer() {
    static const peer p = load_peer("libtbbmalloc.so.2", "scalable_malloc", "scalable_free");
    return p;
}

struct glibc_malloc {
    static void release() {}
    static bool ready(benchmark::State&) { return true; }
    static void* get(std::size_t n) { return std::malloc(n); }
    static void put(void* p, std::size_t) { std::free(p); }
};
template <const peer& (*Peer)()>
struct peer_malloc {
    static void release() {}
    static bool ready(benchmark::State& state) {
        if (Peer().missing) state.SkipWithError((std::string("not installed: ") + Peer().missing).c_str());
        return !Peer().missing;
    }
    static void* get(std::size_t n) { return Peer().alloc(n); }
    static void put(void* p, std::size_t) { Peer().free(p); }
};
using jemalloc = peer_malloc<jemalloc_peer>;
using mimalloc = peer_malloc<mimalloc_peer>;
using tbbmalloc = peer_malloc<tbbmalloc_peer>;
struct node_alloc { // one allocator object, as a container keeps one (not one per call)
    static const numaplace::node_allocator<char>& a() {
        static const numaplace::node_allocator<char> alloc(0);
        return alloc;
    }
    static void release() { numaplace::release_cached_memory(); }
    static bool ready(benchmark::State&) { return true; }
    static void* get(std::size_t n) { return numaplace::node_allocator<char>(a()).allocate(n); }
    static void put(void* p, std::size_t n) { numaplace::node_allocator<char>(a()).deallocate(static_cast<char*>(p), n); }
};

// One cycle: allocate, write the first and the last byte (as a user does), free.
template <class A>
void cycles(benchmark::State& state) {
    const auto bytes = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        auto* p = static_cast<char*>(A::get(bytes));
        p[0] = 1;
        p[bytes - 1] = 1;
        benchmark::DoNotOptimize(p);
        A::put(p, bytes);
    }
    state.SetItemsProcessed(state.iterations());
}
template <class A>
void BM_Cycle(benchmark::State& state) {
    if (A::ready(state)) cycles<A>(state);
}

// The node_allocator cycle while a 1 MiB block that replace() moved is kept in use (an array placed
// after its initialisation): the mark must cost other runs' frees nothing (docs/replace.md).
void BM_Cycle_with_a_replaced_block_kept(benchmark::State& state) {
    const std::size_t kept_bytes = std::size_t(1) << 20;
    char* kept = static_cast<char*>(node_alloc::get(kept_bytes));
    for (std::size_t i = 0; i < kept_bytes; i += 4096) kept[i] = 1;
    if (!numaplace::replace(kept, kept_bytes, numaplace::on_node(numaplace::topology::get().all()[0])).complete()) {
        state.SkipWithError("replace failed");
        node_alloc::put(kept, kept_bytes);
        return;
    }
    cycles<node_alloc>(state);
    node_alloc::put(kept, kept_bytes);
}

std::size_t resident_bytes() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return resident * numaplace::detail::page_size();
}
std::size_t peak_resident_bytes() { // VmHWM
    std::FILE* f = std::fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;
    while (f && std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %lu kB", &kb) == 1) break;
    if (f) std::fclose(f);
    return kb * 1024;
}
void reset_peak_resident() { // "5" to clear_refs resets VmHWM (Linux >= 4.0)
    if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        std::fputs("5", f);
        std::fclose(f);
    }
}

// Mixed: 1024 live blocks of random sizes, log-uniform 16 B..1 MiB; each operation frees a random
// slot's block and puts a new one there. With 2 threads the slots are shared, so about half the frees
// are of the other thread's blocks. Counters: peak and final resident MiB above the start, and after
// release_cached_memory() (numaplace; the peers' figure is their final one).
// A fixed iteration count (one run, no calibration runs) and, for the RSS counters, one allocator per
// process (benchmarks/run_allocation.sh): an allocator that keeps what an earlier run freed (glibc keeps
// its heap) otherwise starts the next run with those pages resident and shows a peak of a few MiB.
constexpr std::size_t mixed_slots = 1024;
struct mixed_state {
    std::atomic<char*> block[mixed_slots];
    std::atomic<std::size_t> size[mixed_slots];
    std::size_t start = 0;
};
mixed_state& mixed() {
    static mixed_state* s = new mixed_state;
    return *s;
}
std::size_t mixed_size(std::mt19937_64& rng) {
    const double lg = std::uniform_real_distribution<double>(4.0, 20.0)(rng);
    return static_cast<std::size_t>(std::exp2(lg));
}
// How a block is used: its first and last byte (`sparse`: the allocator's bookkeeping dominates, and
// resident memory counts mostly pages an allocator re-used rather than took fresh), or one write per
// page (`every_page`: as a program that fills its buffers; resident memory is the allocator's footprint).
enum class use { sparse, every_page };
template <use U>
void write_block(char* p, std::size_t n) {
    p[0] = p[n - 1] = 1;
    if (U == use::every_page)
        for (std::size_t i = 4096; i < n; i += 4096) p[i] = 1;
}
template <class A, use U = use::sparse>
void BM_Mixed(benchmark::State& state) {
    if (!A::ready(state)) return;
    mixed_state& m = mixed();
    std::mt19937_64 rng(static_cast<std::uint64_t>(state.thread_index()) * 7919 + 1);
    if (state.thread_index() == 0) {
        m.start = resident_bytes();
        reset_peak_resident();
        for (std::size_t i = 0; i < mixed_slots; ++i) {
            const std::size_t n = mixed_size(rng);
            auto* p = static_cast<char*>(A::get(n));
            write_block<U>(p, n);
            m.size[i] = n;
            m.block[i] = p;
        }
    }
    for (auto _ : state) {
        const std::size_t n = mixed_size(rng);
        auto* p = static_cast<char*>(A::get(n));
        write_block<U>(p, n);
        const std::size_t i = rng() % mixed_slots;
        // the slot's block and size go together: take the block (nullptr marks it busy), then the size
        char* old = m.block[i].exchange(nullptr);
        while (!old) old = m.block[i].exchange(nullptr);
        const std::size_t old_n = m.size[i].exchange(n);
        m.block[i].store(p);
        A::put(old, old_n);
    }
    if (state.thread_index() == 0) {
        const std::size_t peak = peak_resident_bytes();
        for (std::size_t i = 0; i < mixed_slots; ++i) A::put(m.block[i].load(), m.size[i].load());
        const double mib = 1024.0 * 1024.0;
        state.counters["peak_rss_mib"] = (static_cast<double>(peak) - static_cast<double>(m.start)) / mib;
        state.counters["final_rss_mib"] = (static_cast<double>(resident_bytes()) - static_cast<double>(m.start)) / mib;
        A::release(); // numaplace::release_cached_memory(); the peers have no such call: the same figure
        state.counters["released_rss_mib"] = (static_cast<double>(resident_bytes()) - static_cast<double>(m.start)) / mib;
    }
    state.SetItemsProcessed(state.iterations());
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
#define NUMAPLACE_CYCLE(A)                                                                                   \
    BENCHMARK_TEMPLATE(BM_Cycle, A)->RangeMultiplier(4)->Range(16, 1 << 20)->Arg(48)->Arg(3000)->Arg(5000)->Arg(100000)
NUMAPLACE_CYCLE(node_alloc);
BENCHMARK(BM_Cycle_with_a_replaced_block_kept)->Arg(16384)->Arg(262144);
NUMAPLACE_CYCLE(glibc_malloc);
NUMAPLACE_CYCLE(jemalloc);
NUMAPLACE_CYCLE(mimalloc);
NUMAPLACE_CYCLE(tbbmalloc);
#define NUMAPLACE_MIXED(A) BENCHMARK_TEMPLATE(BM_Mixed, A)->Threads(1)->Threads(2)->UseRealTime()->Iterations(1000000)
NUMAPLACE_MIXED(node_alloc);
NUMAPLACE_MIXED(glibc_malloc);
NUMAPLACE_MIXED(jemalloc);
NUMAPLACE_MIXED(mimalloc);
NUMAPLACE_MIXED(tbbmalloc);
#define NUMAPLACE_MIXED_PAGES(A)                                                                              \
    BENCHMARK_TEMPLATE(BM_Mixed, A, use::every_page)->Name("BM_MixedEveryPage<" #A ">")->Threads(1)->Threads(2)->UseRealTime()->Iterations(300000)
NUMAPLACE_MIXED_PAGES(node_alloc);
NUMAPLACE_MIXED_PAGES(glibc_malloc);
NUMAPLACE_MIXED_PAGES(jemalloc);
NUMAPLACE_MIXED_PAGES(mimalloc);
NUMAPLACE_MIXED_PAGES(tbbmalloc);
// jemalloc uses initial-exec TLS, which dlopen can only serve from glibc's static TLS surplus: the
// benchmark re-executes itself once with a larger surplus (glibc.rtld.optional_static_tls).
int main(int argc, char** argv) {
    if (!std::getenv("NUMAPLACE_BENCH_STATIC_TLS")) {
        ::setenv("NUMAPLACE_BENCH_STATIC_TLS", "1", 1);
        std::string tunables = "glibc.rtld.optional_static_tls=1048576";
        if (const char* old = std::getenv("GLIBC_TUNABLES")) tunables = std::string(old) + ":" + tunables;
        ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
        ::execv("/proc/self/exe", argv); // on failure: run without jemalloc
    }
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
