// Workloads shaped like programs (issue 20), not like one allocate/free cycle. Every workload is a
// template over an allocator family, so one binary measures every allocator:
//   <workload>/std        std::allocator<T>: operator new, i.e. malloc — glibc, or jemalloc, mimalloc,
//                         tbbmalloc when benchmarks/run_workloads.sh puts them in LD_PRELOAD
//   <workload>/numaplace  numaplace::node_allocator<T>(0) (raw buffers: node_allocator<char>(0))
//   <workload>/memkind, /tbb_pool, /libnuma  the NUMA-aware allocators a NUMA user would pick instead,
//                         each bound to node 0 (benchmarks/numa_aware_allocators.hpp)
// Workloads (counts at WORKLOADS_SCALE=1; a smaller scale shrinks the outer count, or the element count
// where the outer count would drop below 1):
//   work_buffers         per iteration 4 buffers of 16 KiB..4 MiB (log-uniform), every byte written,
//                        freed; 1500 iterations x 2 threads
//   vector_growth        std::vector<double> grown by push_back to 1 Mi elements, 100x
//   map                  std::map<int,int>: insert 1 Mi random keys, erase them in another random order, 3x
//   producer_consumer    2 threads, every free cross-thread: 4 Mi blocks of 16 B..8 KiB (log-uniform)
//                        through a lock-free ring of pointers
//   producer_consumer_oversubscribed  the same with 8 producer/consumer pairs (16 threads)
//   fragmentation        2 Mi small blocks (16..256 B), 90 % freed at random, then 100k live blocks of
//                        2..64 KiB (log-uniform, every page written), then everything freed
//   larson               larson-style server: 2 threads replace random slots of an array of 1000 blocks of
//                        16 B..4 KiB (uniform); 20 rounds of 200k replacements per thread, each round on
//                        new threads that take over the other thread's array (blocks freed by a thread
//                        other than the one that allocated them, and thread caches born and dying)
// One benchmark iteration is one whole workload (Iterations(1), manual time = the workload's wall time).
// Counters, in MiB above the process's resident memory at the workload's start (VmRSS; VmHWM reset by
// writing "5" to /proc/self/clear_refs): peak_rss_mib (VmHWM), final_rss_mib (VmRSS after everything is
// freed), decayed_rss_mib (after sleeping WORKLOADS_DECAY_MS, if set; numaplace then runs with
// background_release(100 ms) from the workload's start, the decay without further operations), released_rss_mib (after
// numaplace::release_cached_memory() where that function exists, for the numaplace family; else = the
// previous), live_peak_mib (producer/consumer only: the most bytes the program held at once, sampled by
// each producer every 256 blocks; peak_rss_mib minus it is what the allocator kept beyond the program's
// needs), pairs_co_located (producer/consumer only: the share of a consumer's samples, every 256
// blocks, that found it on the CPU its producer last reported: where the scheduler put each pair, which
// decides the cross-CPU traffic of every block in this VM's slow phase: docs/heap.md, "Where the pairs
// run"), plus ops, items_per_second, scale. Run one allocator per process (run_workloads.sh): an
// allocator that keeps what an earlier workload freed would otherwise start the next one warm.
// Flags: --quick (scale 0.1); the environment variable WORKLOADS_SCALE wins over it.
// WORKLOADS_PIN_PAIRS=together|apart (producer/consumer only): each pair's two threads pinned to one CPU
// (pair k on the k-th allowed CPU, in turn), or to two neighbouring ones; unset: the scheduler places them.
#include <numaplace/numaplace.hpp>

#include "numa_aware_allocators.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NUMAPLACE_WL_PAUSE() _mm_pause()
#else
#define NUMAPLACE_WL_PAUSE() ((void)0)
#endif

// numaplace::release_cached_memory(), if the library has it (issue 20: "a call that returns everything
// now"). Found by overload resolution, so this compiles with or without it: both namespaces' names are
// visible in the probe, and a real (non-template) function callable with no arguments beats the
// template fallback. Define NUMAPLACE_WORKLOADS_NO_RELEASE to measure without it.
namespace numaplace_workloads_fallback {
struct not_found {};
template <class... A>
not_found release_cached_memory(A...) {
    return {};
}
} // namespace numaplace_workloads_fallback
namespace numaplace_workloads_release_probe {
using namespace numaplace;
using namespace numaplace_workloads_fallback;
inline auto call_release() -> decltype(release_cached_memory()) { return release_cached_memory(); }
} // namespace numaplace_workloads_release_probe

namespace {

#if defined(NUMAPLACE_WORKLOADS_NO_RELEASE)
constexpr bool have_release = false;
#else
constexpr bool have_release =
    !std::is_same<decltype(numaplace_workloads_release_probe::call_release()), numaplace_workloads_fallback::not_found>::value;
#endif

void release_cached() {
    if constexpr (have_release) (void)numaplace_workloads_release_probe::call_release();
}

// --- Allocator families --------------------------------------------------------------------------
struct std_family {
    template <class T>
    using alloc = std::allocator<T>;
    template <class T>
    static alloc<T> make() { return alloc<T>(); }
    static constexpr bool is_numaplace = false;
    static constexpr bool bound_node0 = false;
};
struct numaplace_family {
    template <class T>
    using alloc = numaplace::node_allocator<T>;
    template <class T>
    static alloc<T> make() { return alloc<T>(0); }
    static constexpr bool is_numaplace = true;
    static constexpr bool bound_node0 = true;
};

// --- Scale -----------------------------------------------------------------------------------------
double g_scale = 1.0;
double g_decay_ms = 0.0;
enum class pair_pinning { none, together, apart };
pair_pinning g_pin_pairs = pair_pinning::none;

// `n` scaled, at least `lo`.
std::size_t scaled(std::size_t n, double s, std::size_t lo = 1) {
    return std::max(lo, static_cast<std::size_t>(std::llround(static_cast<double>(n) * s)));
}
// Outer count `reps` and element count `elems`: the scale shrinks reps first, then elems.
std::pair<std::size_t, std::size_t> scaled2(std::size_t reps, std::size_t elems, double s) {
    const double r = static_cast<double>(reps) * s;
    if (r >= 1.0) return {scaled(reps, s), elems};
    return {1, scaled(elems, r, 1024)};
}

// --- Resident memory -------------------------------------------------------------------------------
double status_mib(const char* key) { // VmRSS / VmHWM from /proc/self/status, in MiB
    std::FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double mib = -1;
    const std::size_t len = std::strlen(key);
    while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, key, len) == 0 && line[len] == ':') {
            unsigned long kb = 0;
            if (std::sscanf(line + len + 1, "%lu", &kb) == 1) mib = static_cast<double>(kb) / 1024.0;
            break;
        }
    }
    std::fclose(f);
    return mib;
}
double rss_mib() { return status_mib("VmRSS"); }
double hwm_mib() { return status_mib("VmHWM"); }
bool reset_hwm() { // "5" to clear_refs resets VmHWM to VmRSS (Linux >= 4.0)
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    const bool ok = std::fputs("5", f) >= 0;
    return std::fclose(f) == 0 && ok;
}

// --- Helpers -----------------------------------------------------------------------------------------
double log_uniform(std::mt19937_64& rng, double lo, double hi) {
    return std::exp2(std::uniform_real_distribution<double>(std::log2(lo), std::log2(hi))(rng));
}
std::size_t log_uniform_size(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
    return std::min(hi, std::max(lo, static_cast<std::size_t>(log_uniform(rng, static_cast<double>(lo), static_cast<double>(hi)))));
}
void touch_pages(char* p, std::size_t n, char v) { // one write per 4 KiB and the last byte
    for (std::size_t i = 0; i < n; i += 4096) p[i] = v;
    p[n - 1] = v;
}
template <class Fn>
void run_threads(int n, Fn fn) {
    std::vector<std::thread> ts;
    ts.reserve(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) ts.emplace_back(fn, t);
    for (auto& t : ts) t.join();
}

// Setup work (inputs) happens in a workload's constructor, before the start is measured; run() is the
// timed part and returns the number of operations; everything it allocates is freed before it returns.

// 1. Work buffers.
template <class F>
struct work_buffers {
    static constexpr int threads = 2;
    std::size_t iterations = scaled(1500, g_scale);
    double run() {
        std::atomic<std::uint64_t> check{0};
        run_threads(threads, [&](int t) {
            std::mt19937_64 rng(20240 + static_cast<std::uint64_t>(t));
            auto a = F::template make<char>();
            std::uint64_t sum = 0;
            for (std::size_t it = 0; it < iterations; ++it) {
                char* p[4];
                std::size_t n[4];
                for (int k = 0; k < 4; ++k) {
                    n[k] = log_uniform_size(rng, std::size_t(16) << 10, std::size_t(4) << 20);
                    p[k] = a.allocate(n[k]);
                }
                for (int k = 0; k < 4; ++k) {
                    std::memset(p[k], static_cast<int>((it + static_cast<std::size_t>(k)) & 0x7f), n[k]);
                    benchmark::DoNotOptimize(p[k]);
                }
                benchmark::ClobberMemory();
                for (int k = 0; k < 4; ++k) {
                    sum += static_cast<unsigned char>(p[k][n[k] / 2]);
                    a.deallocate(p[k], n[k]);
                }
            }
            check += sum;
        });
        benchmark::DoNotOptimize(check.load());
        return static_cast<double>(iterations * threads * 4);
    }
};

// 2. Vector growth by push_back.
template <class F>
struct vector_growth {
    std::pair<std::size_t, std::size_t> re = scaled2(100, std::size_t(1) << 20, g_scale);
    double run() {
        double sum = 0;
        for (std::size_t r = 0; r < re.first; ++r) {
            std::vector<double, typename F::template alloc<double>> v(F::template make<double>());
            for (std::size_t i = 0; i < re.second; ++i) v.push_back(static_cast<double>(i));
            benchmark::DoNotOptimize(v.data());
            sum += v[r % v.size()];
        }
        benchmark::DoNotOptimize(sum);
        return static_cast<double>(re.first * re.second);
    }
};

// 3. std::map insert/erase of random keys.
template <class F>
struct map_workload {
    std::pair<std::size_t, std::size_t> re = scaled2(3, std::size_t(1) << 20, g_scale);
    std::vector<int> keys, erase_order;
    map_workload() {
        std::mt19937_64 rng(7);
        keys.resize(re.second);
        for (auto& k : keys) k = static_cast<int>(rng());
        erase_order = keys;
        std::shuffle(erase_order.begin(), erase_order.end(), rng);
    }
    double run() {
        using kv = std::pair<const int, int>;
        std::size_t total = 0;
        for (std::size_t r = 0; r < re.first; ++r) {
            std::map<int, int, std::less<int>, typename F::template alloc<kv>> m(F::template make<kv>());
            for (std::size_t i = 0; i < keys.size(); ++i) m.emplace(keys[i], static_cast<int>(i));
            total += m.size();
            for (int k : erase_order) m.erase(k);
            benchmark::DoNotOptimize(m.size());
        }
        benchmark::DoNotOptimize(total);
        return static_cast<double>(re.first * keys.size() * 2);
    }
};

// 4. Producer/consumer: a single-producer single-consumer ring of pointers per pair; the consumer frees.
struct spsc_ring {
    static constexpr std::size_t capacity = 1024; // a power of two
    alignas(64) std::atomic<std::size_t> head{0}; // next to pop (consumer)
    alignas(64) std::atomic<std::size_t> tail{0}; // next to push (producer)
    alignas(64) void* slot[capacity];
    alignas(64) std::atomic<std::size_t> made{0};  // bytes allocated by the producer (its stores only)
    alignas(64) std::atomic<std::size_t> freed{0}; // bytes freed by the consumer (its stores only)
    alignas(64) std::atomic<int> producer_cpu{-1}; // the producer's CPU at its latest sample
};
// \returns the CPUs the calling thread may run on, in order (empty if the kernel refuses to say).
std::vector<int> allowed_cpus() {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    std::vector<int> cpus;
    if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &mine)) cpus.push_back(c);
    return cpus;
}
// \returns whether the calling thread is now pinned to CPU `cpu` alone.
bool pin_this_thread(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
}
// A benchmark setting the run cannot honour (the run then fails by name; other errors are not caught).
struct setting_refused : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Pins the calling thread, thread `t` of the producer/consumer workloads (even: producers, t + 1 its
// consumer), as WORKLOADS_PIN_PAIRS says, among `cpus` (allowed_cpus() before the threads started).
// \returns false if the pinning was asked for and refused (`apart` needs two CPUs).
bool pin_pair_thread(int t, const std::vector<int>& cpus) {
    if (g_pin_pairs == pair_pinning::none) return true;
    if (cpus.empty() || (g_pin_pairs == pair_pinning::apart && cpus.size() < 2)) return false;
    const std::size_t pair = static_cast<std::size_t>(t / 2), side = g_pin_pairs == pair_pinning::apart ? static_cast<std::size_t>(t % 2) : 0;
    return pin_this_thread(cpus[(pair + side) % cpus.size()]);
}
inline void backoff(unsigned& spins) {
    if (++spins < 32) {
        NUMAPLACE_WL_PAUSE();
    } else {
        spins = 0;
        std::this_thread::yield(); // oversubscribed: let the other side run
    }
}
template <class F, int Pairs>
struct producer_consumer {
    std::size_t blocks = scaled(std::size_t(4) << 20, g_scale, Pairs);
    std::vector<std::unique_ptr<spsc_ring>> rings;
    producer_consumer() {
        for (int i = 0; i < Pairs; ++i) rings.emplace_back(new spsc_ring);
    }
    std::atomic<std::size_t> live_peak{0}; // the most bytes the program held at once, sampled
    void sample_live() {
        std::size_t live = 0;
        for (auto& r : rings) live += r->made.load(std::memory_order_relaxed) - r->freed.load(std::memory_order_relaxed);
        std::size_t seen = live_peak.load(std::memory_order_relaxed);
        while (live > seen && !live_peak.compare_exchange_weak(seen, live, std::memory_order_relaxed)) {
        }
    }
    double live_peak_mib() const { return static_cast<double>(live_peak.load()) / (1024.0 * 1024.0); }
    std::atomic<std::size_t> samples{0}, co_located{0}; // consumers' samples; of them, on the producer's CPU
    double pairs_co_located() const {
        return samples.load() ? static_cast<double>(co_located.load()) / static_cast<double>(samples.load()) : -1;
    }
    double run() {
        const std::size_t per = blocks / Pairs;
        std::atomic<std::uint64_t> bad{0}, unpinned{0};
        const std::vector<int> cpus = g_pin_pairs == pair_pinning::none ? std::vector<int>() : allowed_cpus();
        run_threads(2 * Pairs, [&](int t) {
            if (!pin_pair_thread(t, cpus)) ++unpinned;
            spsc_ring& q = *rings[static_cast<std::size_t>(t / 2)];
            auto a = F::template make<char>();
            unsigned spins = 0;
            if (t % 2 == 0) { // producer
                std::mt19937_64 rng(99 + static_cast<std::uint64_t>(t));
                std::size_t tail = 0;
                for (std::size_t i = 0; i < per; ++i) {
                    const std::size_t n = log_uniform_size(rng, 16, 8192);
                    char* p = a.allocate(n);
                    std::memcpy(p, &n, sizeof n); // a header the consumer reads
                    p[n - 1] = static_cast<char>(n);
                    while (tail - q.head.load(std::memory_order_acquire) == spsc_ring::capacity) backoff(spins);
                    q.slot[tail % spsc_ring::capacity] = p;
                    q.tail.store(++tail, std::memory_order_release);
                    q.made.store(q.made.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
                    if ((i & 255) == 0) {
                        sample_live();
                        q.producer_cpu.store(::sched_getcpu(), std::memory_order_relaxed);
                    }
                }
            } else { // consumer
                std::size_t head = 0;
                std::uint64_t wrong = 0;
                std::size_t seen = 0, same = 0;
                for (std::size_t i = 0; i < per; ++i) {
                    while (q.tail.load(std::memory_order_acquire) == head) backoff(spins);
                    char* p = static_cast<char*>(q.slot[head % spsc_ring::capacity]);
                    q.head.store(++head, std::memory_order_release);
                    std::size_t n;
                    std::memcpy(&n, p, sizeof n);
                    wrong += p[n - 1] != static_cast<char>(n);
                    a.deallocate(p, n);
                    q.freed.store(q.freed.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
                    if ((i & 255) == 0) {
                        const int producer = q.producer_cpu.load(std::memory_order_relaxed);
                        if (producer >= 0) {
                            ++seen;
                            same += producer == ::sched_getcpu();
                        }
                    }
                }
                bad += wrong;
                samples += seen;
                co_located += same;
            }
        });
        if (bad.load()) std::fprintf(stderr, "producer_consumer: %llu corrupted blocks\n", static_cast<unsigned long long>(bad.load()));
        if (unpinned.load())
            throw setting_refused("WORKLOADS_PIN_PAIRS: " + std::to_string(unpinned.load()) + " threads could not be pinned (" +
                                  std::to_string(cpus.size()) + " CPUs allowed; apart needs 2)");
        return static_cast<double>(per * Pairs);
    }
};

// 5. Fragmentation.
template <class F>
struct fragmentation {
    std::size_t small = scaled(std::size_t(2) << 20, g_scale, 1024);
    std::size_t medium = scaled(100000, g_scale, 64);
    std::vector<std::uint16_t> small_size;
    std::vector<std::uint32_t> medium_size, order;
    std::vector<char*> sp, mp;
    fragmentation() {
        std::mt19937_64 rng(5);
        small_size.resize(small);
        for (auto& s : small_size) s = static_cast<std::uint16_t>(log_uniform_size(rng, 16, 256));
        medium_size.resize(medium);
        for (auto& s : medium_size) s = static_cast<std::uint32_t>(log_uniform_size(rng, 2048, 65536));
        order.resize(small);
        for (std::size_t i = 0; i < small; ++i) order[i] = static_cast<std::uint32_t>(i);
        std::shuffle(order.begin(), order.end(), rng);
        sp.assign(small, nullptr);
        mp.assign(medium, nullptr);
    }
    double run() {
        auto a = F::template make<char>();
        for (std::size_t i = 0; i < small; ++i) {
            sp[i] = a.allocate(small_size[i]);
            std::memset(sp[i], 1, small_size[i]);
        }
        benchmark::ClobberMemory();
        const std::size_t freed = small / 10 * 9;
        for (std::size_t j = 0; j < freed; ++j) {
            const std::uint32_t i = order[j];
            a.deallocate(sp[i], small_size[i]);
            sp[i] = nullptr;
        }
        for (std::size_t i = 0; i < medium; ++i) {
            mp[i] = a.allocate(medium_size[i]);
            touch_pages(mp[i], medium_size[i], 2);
        }
        benchmark::ClobberMemory();
        for (std::size_t i = 0; i < small; ++i)
            if (sp[i]) a.deallocate(sp[i], small_size[i]);
        for (std::size_t i = 0; i < medium; ++i) a.deallocate(mp[i], medium_size[i]);
        return static_cast<double>(2 * (small + medium));
    }
};

// 6. Larson-style server.
template <class F>
struct larson {
    static constexpr int threads = 2;
    static constexpr std::size_t slots = 1000;
    std::size_t rounds = scaled(20, g_scale);
    std::size_t ops = 200000;
    struct slot_t {
        char* p;
        std::size_t n;
    };
    std::vector<std::vector<slot_t>> arrays;
    larson() {
        if (g_scale * 20 < 1) ops = scaled(ops, g_scale * 20, 1000);
        arrays.assign(threads, std::vector<slot_t>(slots, slot_t{nullptr, 0}));
    }
    double run() {
        run_threads(threads, [&](int t) { // each thread fills its array
            std::mt19937_64 rng(300 + static_cast<std::uint64_t>(t));
            auto a = F::template make<char>();
            for (auto& s : arrays[static_cast<std::size_t>(t)]) {
                s.n = std::uniform_int_distribution<std::size_t>(16, 4096)(rng);
                s.p = a.allocate(s.n);
                s.p[0] = s.p[s.n - 1] = 1;
            }
        });
        for (std::size_t r = 0; r < rounds; ++r) {
            run_threads(threads, [&](int t) { // new threads; each takes over the array another thread filled
                auto& arr = arrays[(static_cast<std::size_t>(t) + r + 1) % threads];
                std::mt19937_64 rng(1000 * r + static_cast<std::uint64_t>(t));
                auto a = F::template make<char>();
                std::uniform_int_distribution<std::size_t> size(16, 4096), pick(0, slots - 1);
                for (std::size_t i = 0; i < ops; ++i) {
                    slot_t& s = arr[pick(rng)];
                    a.deallocate(s.p, s.n);
                    s.n = size(rng);
                    s.p = a.allocate(s.n);
                    s.p[0] = s.p[s.n - 1] = static_cast<char>(i);
                }
            });
        }
        auto a = F::template make<char>();
        for (auto& arr : arrays)
            for (auto& s : arr) a.deallocate(s.p, s.n);
        return static_cast<double>(threads * (slots + rounds * ops));
    }
};

// --- The harness -------------------------------------------------------------------------------------

// The machine's phase: ns per round trip of one cache line between two threads pinned to the first two
// CPUs this process may use (20000 round trips), or 0 with fewer than two. On this project's 2-core VM it
// is 80-95 ns in one phase and 390-420 ns in another (the host places the virtual CPUs apart), and every
// cross-thread workload slows with it (docs/heap.md): the counter says which phase a round ran in.
double line_round_trip_ns() {
    cpu_set_t mine; // restored at the end, for the workload's threads
    CPU_ZERO(&mine);
    if (::sched_getaffinity(0, sizeof mine, &mine) != 0) return 0;
    const std::vector<int> cpus = allowed_cpus();
    if (cpus.size() < 2) return 0;
    const int cpu[2] = {cpus[0], cpus[1]};
    const auto pin = pin_this_thread;
    constexpr int trips = 20000;
    alignas(64) std::atomic<int> line{0};
    std::atomic<bool> ready{false}, pinned{true};
    std::thread other([&] {
        pinned = pin(cpu[1]);
        ready = true;
        if (!pinned) return;
        for (int i = 0; i < trips; ++i) {
            while (line.load(std::memory_order_acquire) != 2 * i + 1) NUMAPLACE_WL_PAUSE();
            line.store(2 * i + 2, std::memory_order_release);
        }
    });
    while (!ready) std::this_thread::yield();
    double ns = 0;
    if (pinned && pin(cpu[0])) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < trips; ++i) {
            line.store(2 * i + 1, std::memory_order_release);
            while (line.load(std::memory_order_acquire) != 2 * i + 2) NUMAPLACE_WL_PAUSE();
        }
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / trips;
    } else if (pinned) { // this thread could not be pinned: let the other one finish alone
        for (int i = 0; i < trips; ++i) {
            line.store(2 * i + 1, std::memory_order_release);
            while (line.load(std::memory_order_acquire) != 2 * i + 2) NUMAPLACE_WL_PAUSE();
        }
        ns = 0;
    }
    other.join();
    ::sched_setaffinity(0, sizeof mine, &mine); // as before, for the workload's threads
    return ns;
}
// The most bytes a workload's program held at once, where it counts them (producer/consumer); else -1.
template <class W>
auto live_peak_of(const W& w, int) -> decltype(w.live_peak_mib()) { return w.live_peak_mib(); }
template <class W>
double live_peak_of(const W&, long) { return -1; }
// The share of samples that found a pair on one CPU, where a workload counts it; else -1.
template <class W>
auto co_located_of(const W& w, int) -> decltype(w.pairs_co_located()) { return w.pairs_co_located(); }
template <class W>
double co_located_of(const W&, long) { return -1; }

template <class W, class F>
void BM_Workload(benchmark::State& state) {
    { // first use outside the measurement (numaplace: topology, heap; malloc: its arenas)
        auto a = F::template make<char>();
        char* p = a.allocate(64);
        p[0] = 0;
        benchmark::DoNotOptimize(p);
        a.deallocate(p, 64);
    }
    // Blocks that stay live through the run: their pages' policy is checked after it (a small and a
    // mid size; a family that fell back to the default policy is an error, not a result).
    auto probe_alloc = F::template make<char>();
    constexpr std::size_t probe_size[2] = {64, 64 << 10};
    char* probe[2] = {probe_alloc.allocate(probe_size[0]), probe_alloc.allocate(probe_size[1])};
    for (int k = 0; k < 2; ++k) std::memset(probe[k], 1, probe_size[k]);
    double peak = 0, fin = 0, decayed = 0, released = 0, ops = 0, start = 0, live = -1, together = -1;
    std::string failed;
    const double trip_before = line_round_trip_ns();
    bool hwm_ok = true;
    if (F::is_numaplace && g_decay_ms > 0) numaplace::background_release(std::chrono::milliseconds(100));
    for (auto _ : state) {
        W w; // inputs
        start = rss_mib();
        hwm_ok = reset_hwm() && hwm_ok;
        const auto t0 = std::chrono::steady_clock::now();
        try {
            ops = w.run();
        } catch (const std::bad_alloc&) { // libnuma: a mapping per block, past vm.max_map_count
            failed = "cannot run: an allocation failed (std::bad_alloc)";
        } catch (const setting_refused& e) {
            failed = e.what();
        }
        const auto t1 = std::chrono::steady_clock::now();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
        peak = std::max(peak, hwm_mib() - start);
        live = std::max(live, live_peak_of(w, 0));
        together = co_located_of(w, 0);
        fin = rss_mib() - start;
        decayed = fin;
        if (g_decay_ms > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(g_decay_ms));
            decayed = rss_mib() - start;
        }
        released = decayed;
        if (F::is_numaplace && have_release) {
            release_cached();
            released = rss_mib() - start;
        }
    }
    if (!hwm_ok) state.SkipWithError("cannot reset VmHWM (/proc/self/clear_refs)");
    if (!failed.empty()) state.SkipWithError(failed.c_str());
    if constexpr (F::bound_node0) {
        for (int k = 0; k < 2; ++k) {
            const std::string off = numa_aware::bound_to_node0(probe[k]);
            if (!off.empty()) state.SkipWithError(("not bound to node 0 after the run: " + off).c_str());
        }
        state.counters["bound_node0_checked"] = 1;
    }
    for (int k = 0; k < 2; ++k) probe_alloc.deallocate(probe[k], probe_size[k]);
    state.counters["start_rss_mib"] = start;
    state.counters["peak_rss_mib"] = peak;
    if (live >= 0) state.counters["live_peak_mib"] = live;
    if (together >= 0) state.counters["pairs_co_located"] = together;
    state.counters["final_rss_mib"] = fin;
    if (g_decay_ms > 0) state.counters["decayed_rss_mib"] = decayed;
    state.counters["released_rss_mib"] = released;
    state.counters["release_called"] = (F::is_numaplace && have_release) ? 1 : 0;
    if (F::is_numaplace && g_decay_ms > 0) numaplace::background_release(std::chrono::milliseconds(0));
    state.counters["line_round_trip_ns"] = std::max(trip_before, line_round_trip_ns()); // before and after: the slower
    state.counters["ops"] = ops;
    state.counters["scale"] = g_scale;
    state.SetItemsProcessed(static_cast<std::int64_t>(ops * static_cast<double>(state.iterations())));
}

// Which malloc this process runs (the preloaded one, if any): for the JSON context.
std::string malloc_in_use() {
    if (::dlsym(RTLD_DEFAULT, "mallocx")) return "jemalloc";
    if (::dlsym(RTLD_DEFAULT, "mi_malloc")) return "mimalloc";
    if (::dlsym(RTLD_DEFAULT, "__TBB_malloc_proxy")) return "tbbmalloc";
    return "glibc";
}

template <class W, class F>
void reg(const std::string& name) {
    benchmark::RegisterBenchmark(name.c_str(), BM_Workload<W, F>)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
}
template <template <class> class W>
void reg_both(const char* name) {
    reg<W<std_family>, std_family>(std::string(name) + "/std");
    reg<W<numaplace_family>, numaplace_family>(std::string(name) + "/numaplace");
}
template <template <class> class W, class F>
void reg_family(const char* name, const char* family) {
    reg<W<F>, F>(std::string(name) + "/" + family);
}
template <template <class> class W>
void reg_all(const char* name) {
    reg_both<W>(name);
#if NUMAPLACE_WL_HAVE_MEMKIND
    reg_family<W, numa_aware::memkind_family>(name, "memkind");
#endif
#if NUMAPLACE_WL_HAVE_TBB_POOL
    reg_family<W, numa_aware::tbb_pool_family>(name, "tbb_pool");
#endif
#if NUMAPLACE_WL_HAVE_LIBNUMA
    reg_family<W, numa_aware::libnuma_family>(name, "libnuma");
#endif
}
template <class F>
using pc2 = producer_consumer<F, 1>;
template <class F>
using pc16 = producer_consumer<F, 8>;

} // namespace

int main(int argc, char** argv) {
    std::vector<char*> args;
    for (int i = 0; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0)
            g_scale = 0.1;
        else
            args.push_back(argv[i]);
    }
    if (const char* s = std::getenv("WORKLOADS_SCALE")) g_scale = std::atof(s);
    if (!(g_scale > 0)) g_scale = 1.0;
    if (const char* d = std::getenv("WORKLOADS_DECAY_MS")) g_decay_ms = std::atof(d);
    if (const char* p = std::getenv("WORKLOADS_PIN_PAIRS")) {
        if (std::strcmp(p, "together") == 0) g_pin_pairs = pair_pinning::together;
        else if (std::strcmp(p, "apart") == 0) g_pin_pairs = pair_pinning::apart;
        else {
            std::fprintf(stderr, "WORKLOADS_PIN_PAIRS: together or apart, not '%s'\n", p);
            return 2;
        }
    }
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);

#if NUMAPLACE_WL_HAVE_MEMKIND
    ::setenv("MEMKIND_HBW_NODES", "0", 0); // memkind's HBW kind bound to node 0 exactly (unless set)
#endif
    reg_all<work_buffers>("work_buffers");
    reg_all<vector_growth>("vector_growth");
    reg_all<map_workload>("map");
    reg_all<pc2>("producer_consumer");
    reg_all<pc16>("producer_consumer_oversubscribed");
    reg_all<fragmentation>("fragmentation");
    reg_all<larson>("larson");

    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
    benchmark::AddCustomContext("malloc", malloc_in_use());
    benchmark::AddCustomContext("workloads_scale", std::to_string(g_scale));
    benchmark::AddCustomContext("release_cached_memory", have_release ? "present" : "absent");
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
