#ifndef NUMAPLACE_MEMORY_HPP_INCLUDED
#define NUMAPLACE_MEMORY_HPP_INCLUDED

/// \file
/// Mechanism: map, bind, touch and unmap page ranges, and account for node memory. The one place that
/// calls mmap, mbind and set_mempolicy. Nothing here decides between throwing and degrading: every
/// function returns 0 or an errno, and the placements (placement.hpp) decide what a refusal means. It
/// sits below partitions and placements and includes neither (tests/header_deps checks partition.hpp).
///
/// Capacity contract (every policy, every fallback, the pooled heap included): a policy accepted by
/// the kernel for more memory than its nodes can give OOM-kills or SIGBUSes at first touch, so a
/// request is admitted (`admit`) only when the memory the policy may use can hold it:
/// - `bind` (node_allocator, partitioned blocks, weighted interleave runs, `node_pool`) and
///   `interleave` (its share on each of its nodes): the nodes' free memory (MemFree plus half the
///   file cache, less the zone high watermarks and a margin of 1 % of the node, at least 4 MiB), less
///   numaplace's own bound reservations that are not yet touched (mincore);
/// - `preferred`, `preferred_many`: may spill to any node, so the free memory of all nodes.
/// A request above that is refused with ENOMEM (`placement_error`) even by a degrading placement: a
/// fallback cannot make memory that does not exist. Two bound requests of 0.6x a node's free memory
/// cannot both pass. Sizes whose page rounding or alignment padding overflows are refused with ENOMEM
/// before anything is mapped.

#include "detail/fork_guard.hpp"
#include "detail/linux.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <sys/mman.h>

namespace numaplace {
namespace memory {

/// \returns true if `bytes` rounded up to whole pages fits in a size_t.
inline bool page_round_fits(std::size_t bytes) noexcept { return bytes <= SIZE_MAX - (detail::page_size() - 1); }

/// \returns `bytes` rounded up to whole pages. \requires page_round_fits(bytes).
inline std::size_t page_round(std::size_t bytes) noexcept { return detail::round_up(bytes, detail::page_size()); }

/// \effects maps `bytes` (rounded up to pages, at least one page) of anonymous, untouched memory whose
/// start is a multiple of `alignment` (a power of two; below a page means a page).
/// \returns 0 and the start in `out`; or ENOMEM (size overflow, or the kernel refused; nothing mapped),
/// EINVAL (alignment not a power of two).
inline int try_map(std::size_t bytes, std::size_t alignment, void*& out) noexcept {
    out = nullptr;
    const std::size_t page = detail::page_size();
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
    if (alignment < page) alignment = page;
    if (bytes == 0) bytes = 1;
    if (!page_round_fits(bytes)) return ENOMEM;
    const std::size_t length = page_round(bytes);
    if (alignment > page && length > SIZE_MAX - alignment) return ENOMEM;
    const std::size_t over = alignment > page ? length + alignment : length;
    void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    // Our flags and protection are valid, so EINVAL can only mean a length the kernel (or valgrind)
    // cannot map at all: out of memory, as for any other impossible size.
    if (raw == MAP_FAILED) return errno == 0 || errno == EINVAL ? ENOMEM : errno;
    if (over != length) { // trim so that exactly [aligned, aligned + length) stays mapped
        const auto start = reinterpret_cast<std::uintptr_t>(raw);
        const std::uintptr_t mask = alignment - 1; // alignment: a power of two
        const auto aligned = (start + mask) & ~mask;
        if (aligned > start) ::munmap(raw, aligned - start);
        const std::uintptr_t tail = aligned + length, end = start + over;
        if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
        raw = reinterpret_cast<void*>(aligned);
    }
    out = raw;
    return 0;
}

/// \effects as `try_map`. \returns the start. \throws placement_error with try_map's errno.
inline void* map(std::size_t bytes, std::size_t alignment = numaplace::detail::page_size()) {
    void* p = nullptr;
    const int err = try_map(bytes, alignment, p);
    if (err != 0) numaplace::detail::throw_placement(-1, bytes, err, err == EINVAL ? "alignment not a power of two" : "mmap failed");
    return p;
}

namespace detail {
inline void forget_reservations(void* p, std::size_t length) noexcept;

/// What `unmap` tells about every range just before unmapping it, or null. Records keyed by address
/// that live above this layer subscribe here (detail/placed.hpp, the record of partitioned buffers, when
/// it is created), so that every unmap, whoever calls it (allocators, the heap, pmr resources, a user's
/// memory::allocate), drops their entries before the address can be mapped again, without this header
/// knowing what they record. Constant-initialised: valid during static initialisation and destruction.
using unmap_observer_fn = void (*)(const void* p, std::size_t length) noexcept;
inline std::atomic<unmap_observer_fn> unmap_observer{nullptr};
} // namespace detail

/// \effects unmaps what `map(bytes, ...)` returned and drops its reservations (see `admit`) and anything
/// recorded for it (see `detail::unmap_observer`). Never allocates.
inline void unmap(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    const std::size_t length = page_round(bytes == 0 ? 1 : bytes);
    detail::forget_reservations(p, length);
    // before munmap: once unmapped, the address may be reused by another thread's mapping
    if (const auto observer = detail::unmap_observer.load(std::memory_order_acquire)) observer(p, length);
    ::munmap(p, length);
}

/// \effects faults in every page of [p, p+bytes) from the calling thread (first touch) without changing
/// its contents: an atomic add of zero to one byte per page is a single write access (one page fault,
/// no zero-page read fault first) and is harmless to concurrent readers.
inline void touch(void* p, std::size_t bytes) noexcept {
    if (bytes == 0) return;
    const std::size_t page = numaplace::detail::page_size();
    auto* c = static_cast<char*>(p);
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(p);
    std::size_t first = numaplace::detail::round_up(start, page) - start; // first page boundary inside the range
    if (first != 0) __atomic_fetch_add(c, char(0), __ATOMIC_RELAXED);  // the partial page before it
    for (std::size_t off = first; off < bytes; off += page) __atomic_fetch_add(c + off, char(0), __ATOMIC_RELAXED);
}

/// \effects keeps transparent huge pages off [p, p+bytes) (page-aligned), so that first-touch
/// placement works page by page. No effect when THP is off.
inline void forbid_huge_pages(void* p, std::size_t bytes) noexcept {
    if (topology::get().capabilities().thp != "never") ::madvise(p, page_round(bytes), MADV_NOHUGEPAGE);
}

/// Kernel memory policy modes numaplace uses.
enum class policy_mode : int {
    bind = numaplace::detail::mpol_bind,
    preferred = numaplace::detail::mpol_preferred,
    preferred_many = numaplace::detail::mpol_preferred_many,
    interleave = numaplace::detail::mpol_interleave,
    /// MPOL_BIND | MPOL_F_NUMA_BALANCING (Linux >= 5.12, `capabilities().numa_balancing_bind`): bound to
    /// the nodes, and automatic NUMA balancing may still migrate pages among them towards their readers.
    bind_balancing = numaplace::detail::mpol_bind | numaplace::detail::mpol_f_numa_balancing
};

inline const char* name(policy_mode m) noexcept {
    switch (m) {
    case policy_mode::bind: return "bind";
    case policy_mode::preferred: return "preferred";
    case policy_mode::preferred_many: return "preferred_many";
    case policy_mode::interleave: return "interleave";
    case policy_mode::bind_balancing: return "bind (with NUMA balancing)";
    }
    return "?";
}

namespace detail {
inline numaplace::detail::kernel_nodemask mask_of(const node_set& nodes, const topology& topo) {
    numaplace::detail::kernel_nodemask mask;
    for (int id : nodes) mask.set(topo.at(id).os_index);
    return mask;
}
inline std::string describe(policy_mode m, const node_set& nodes) {
    std::string s = std::string(name(m)) + " to node";
    s += nodes.size() == 1 ? " " : "s ";
    for (std::size_t i = 0; i < nodes.size(); ++i) s += (i ? "," : "") + std::to_string(nodes[i]);
    return s;
}
inline int error_node(const node_set& nodes) noexcept { return nodes.size() == 1 ? nodes[0] : -1; }

/// Per-node memory accounting behind `admit` (one per process, never destroyed).
class capacity {
public:
    static capacity& instance() {
        static capacity* c = new capacity(topology::get());
        return *c;
    }

    /// \returns 0 if `bytes` bound to `node` (bound == true) or spilling anywhere (bound == false) fit,
    /// else ENOMEM. An admitted bound request that is `reserve`d stays counted until unmapped.
    int admit(std::size_t bytes, bool bound, const node_set& nodes, void* reservation = nullptr) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!bound) {
            // May use any node: compare with everything free.
            std::uint64_t avail = 0;
            for (std::size_t n = 0; n < nodes_.size(); ++n) avail += available(n, false);
            if (bytes > avail) {
                avail = 0;
                for (std::size_t n = 0; n < nodes_.size(); ++n) avail += available(n, true);
                if (bytes > avail) return ENOMEM;
            }
            return 0;
        }
        // Bound to `nodes`: split evenly over them (single node: all of it).
        const std::uint64_t share = nodes.size() ? (bytes + nodes.size() - 1) / nodes.size() : bytes;
        for (int id : nodes) {
            const auto n = static_cast<std::size_t>(id);
            if (share > available(n, false) && share > available(n, true)) return ENOMEM;
        }
        for (int id : nodes) {
            const auto n = static_cast<std::size_t>(id);
            if (reservation && nodes.size() == 1) {
                reservations_.emplace(reinterpret_cast<std::uintptr_t>(reservation), entry{bytes, id});
                nodes_[n].reserved += bytes;
                reservation_count_.fetch_add(1, std::memory_order_relaxed);
            } else {
                nodes_[n].consumed += share; // pooled spans and multi-node binds: counted until the next read
            }
        }
        return 0;
    }

    /// \effects drops the reservations inside [p, p+length). Never allocates.
    void forget(void* p, std::size_t length) noexcept {
        if (reservation_count_.load(std::memory_order_relaxed) == 0) return;
        std::lock_guard<std::mutex> lock(mutex_);
        const auto from = reinterpret_cast<std::uintptr_t>(p);
        auto it = reservations_.lower_bound(from);
        while (it != reservations_.end() && it->first < from + length) {
            nodes_[static_cast<std::size_t>(it->second.node)].reserved -= it->second.bytes;
            it = reservations_.erase(it);
            reservation_count_.fetch_sub(1, std::memory_order_relaxed);
        }
    }

    std::mutex& mutex() noexcept { return mutex_; }

private:
    struct entry {
        std::size_t bytes;
        int node;
    };
    struct node_state {
        unsigned os = 0;
        std::uint64_t total = 0;     // topology's memory (when sysfs is unreadable)
        std::uint64_t watermark = 0; // sum of the zones' high watermarks
        std::uint64_t margin = 0;    // 1 % of the node, at least 4 MiB
        std::uint64_t free = 0;      // at the last read
        bool readable = false;
        std::uint64_t consumed = 0;  // admitted since the last read (not in `free` yet)
        std::uint64_t reserved = 0;  // bytes of live reservations (touched or not)
        std::int64_t read_at = -1;   // ms
    };

    explicit capacity(const topology& topo) : nodes_(topo.size()) {
        for (std::size_t n = 0; n < nodes_.size(); ++n) {
            nodes_[n].os = topo.at(static_cast<int>(n)).os_index;
            nodes_[n].total = topo.at(static_cast<int>(n)).memory;
        }
        read_watermarks();
        for (auto& s : nodes_) {
            s.margin = s.total / 100;
            if (s.margin < (std::uint64_t(4) << 20)) s.margin = std::uint64_t(4) << 20;
        }
    }

    static std::int64_t now_ms() noexcept {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        const std::int64_t seconds = ts.tv_sec, nanoseconds = ts.tv_nsec; // time_t and long: no cast needed here
        return seconds * 1000 + nanoseconds / 1000000;
    }

    // /proc/zoneinfo: "Node 0, zone   Normal" followed by "        high     1234" (pages).
    void read_watermarks() {
        std::FILE* f = std::fopen("/proc/zoneinfo", "r");
        if (!f) return;
        char line[256];
        long node = -1;
        while (std::fgets(line, sizeof line, f)) {
            long n = 0;
            unsigned long long pages = 0;
            if (std::sscanf(line, "Node %ld, zone", &n) == 1) node = n;
            else if (std::sscanf(line, " high %llu", &pages) == 1 && node >= 0)
                for (auto& s : nodes_)
                    if (s.os == static_cast<unsigned long>(node)) s.watermark += pages * numaplace::detail::page_size();
        }
        std::fclose(f);
    }

    // Node N's free memory from /sys/devices/system/node/nodeN/meminfo: MemFree + half the file cache.
    void read_free(node_state& s) {
        char path[96];
        std::snprintf(path, sizeof path, "/sys/devices/system/node/node%u/meminfo", s.os);
        std::FILE* f = std::fopen(path, "r");
        s.read_at = now_ms();
        s.consumed = 0;
        if (!f) {
            s.readable = false;
            return;
        }
        char line[256];
        unsigned long long free_kb = 0, file_kb = 0, v = 0;
        bool got = false;
        while (std::fgets(line, sizeof line, f)) {
            const char* colon = std::strchr(line, ':');
            if (!colon || std::sscanf(colon + 1, "%llu", &v) != 1) continue;
            if (std::strstr(line, "MemFree:")) free_kb = v, got = true;
            else if (std::strstr(line, "Active(file):") || std::strstr(line, "Inactive(file):")) file_kb += v;
        }
        std::fclose(f);
        s.readable = got;
        s.free = (free_kb + file_kb / 2) * 1024;
    }

    // Untouched bytes of node n's reservations (mincore: resident pages are already in MemFree).
    std::uint64_t untouched(int node) const noexcept {
        const std::size_t page = numaplace::detail::page_size();
        std::uint64_t sum = 0;
        unsigned char vec[1024];
        for (const auto& r : reservations_) {
            if (r.second.node != node) continue;
            const std::size_t pages = (r.second.bytes + page - 1) / page;
            for (std::size_t done = 0; done < pages;) {
                const std::size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
                if (::mincore(reinterpret_cast<void*>(r.first + done * page), k * page, vec) != 0) {
                    sum += (pages - done) * page; // unknown: count as untouched
                    break;
                }
                for (std::size_t i = 0; i < k; ++i) sum += (vec[i] & 1) ? 0 : page;
                done += k;
            }
        }
        return sum;
    }

    // Conservative (fast): every live reservation counted whole, file cache read at most 100 ms ago.
    // Exact (slow, `fresh`): re-read now, count only the reservations' untouched pages.
    std::uint64_t available(std::size_t n, bool fresh) {
        node_state& s = nodes_[n];
        if (fresh || s.read_at < 0 || now_ms() - s.read_at > 100) read_free(s);
        if (!s.readable) return s.total; // no sysfs: the node's size is all we know
        const std::uint64_t used = s.watermark + s.margin + s.consumed +
                                   (fresh ? untouched(static_cast<int>(n)) : s.reserved);
        return s.free > used ? s.free - used : 0;
    }

    std::mutex mutex_;
    std::vector<node_state> nodes_;
    std::map<std::uintptr_t, entry> reservations_;
    std::atomic<std::size_t> reservation_count_{0};
};

// Fork safety of the accounting (see detail/fork_guard.hpp): prepare completes it (and so the topology)
// before locking; its lock is taken after the heap's gates (a heap admits regions inside them) and before
// the degradation log's.
struct capacity_fork {
    static std::mutex& fork_mutex() noexcept {
        try {
            return capacity::instance().mutex();
        } catch (...) { // no topology, so no accounting: nothing to lock
            static std::mutex none;
            return none;
        }
    }
};
struct capacity_fork_handlers {
    capacity_fork_handlers() noexcept { numaplace::detail::fork_guard<capacity_fork>::install(); }
};
inline const capacity_fork_handlers capacity_fork_handlers_registered{};

inline void forget_reservations(void* p, std::size_t length) noexcept { capacity::instance().forget(p, length); }
} // namespace detail

/// \effects checks that `bytes` fit in what `mode` over `nodes` may use (see the file comment). A
/// bound single-node request with a `reservation` address (the start of its untouched mapping) is
/// counted against the node until that range is unmapped.
/// \returns 0, or ENOMEM when they do not fit.
inline int admit(std::size_t bytes, policy_mode mode, const node_set& nodes, void* reservation = nullptr) {
    const bool single_bind = mode == policy_mode::bind || mode == policy_mode::bind_balancing;
    const bool bound = single_bind || mode == policy_mode::interleave;
    return detail::capacity::instance().admit(bytes, bound, nodes, single_bind ? reservation : nullptr);
}

/// \effects sets the memory policy of the untouched page range [p, p+bytes) (p page-aligned) so its
/// pages are allocated per `mode` over `nodes` when first touched. No capacity check (see `admit`).
/// \returns 0 or the kernel's errno.
inline int bind(void* p, std::size_t bytes, policy_mode mode, const node_set& nodes,
                const topology& topo = topology::get()) {
    if (bytes == 0) return 0;
    const auto mask = detail::mask_of(nodes, topo);
    return numaplace::detail::sys_mbind(p, page_round(bytes), static_cast<int>(mode), mask, 0);
}

/// \effects faults in [p, p+bytes) (page-aligned, untouched, default policy) with consecutive runs of
/// pages on successive nodes: `weights[k]` pages on `nodes[k]`, then the next node, round robin. Done
/// from the calling thread under a temporary thread memory policy (restored before returning), so the
/// range stays one mapping however many runs it has (per-run mbind would split it into one VMA per
/// run and hit vm.max_map_count). The kernel's own MPOL_WEIGHTED_INTERLEAVE takes its weights from a
/// system-wide sysfs table, which a library must not own.
/// \returns 0, or the errno of set_mempolicy with `failed_node` set (pages placed so far stay).
inline int weighted_fill(void* p, std::size_t bytes, const node_set& nodes, const std::vector<std::size_t>& weights,
                         int& failed_node, const topology& topo = topology::get()) {
    failed_node = -1;
    if (bytes == 0) return 0;
    forbid_huge_pages(p, bytes); // runs of single pages: no 2 MiB page may swallow a run
    std::size_t period = 0;
    for (auto w : weights) period += w;
    const std::size_t page = numaplace::detail::page_size();
    const std::size_t pages = page_round(bytes) / page;
    int old_mode = 0;
    numaplace::detail::kernel_nodemask old_mask;
    old_mask.words.assign(16, 0ul); // 1024 nodes
    long got = ::syscall(SYS_get_mempolicy, &old_mode, old_mask.words.data(), old_mask.maxnode() - 1, nullptr, 0ul);
    if (got != 0) old_mode = numaplace::detail::mpol_default;
    auto restore = [&] {
        ::syscall(SYS_set_mempolicy, old_mode, old_mode == numaplace::detail::mpol_default ? nullptr : old_mask.data(),
                  old_mode == numaplace::detail::mpol_default ? 0ul : old_mask.maxnode() - 1);
    };
    auto* c = static_cast<volatile char*>(p);
    std::size_t start_of_run = 0;
    for (std::size_t k = 0; k < nodes.size(); ++k) {
        if (weights[k] == 0) continue;
        numaplace::detail::kernel_nodemask mask;
        mask.set(topo.at(nodes[k]).os_index);
        if (::syscall(SYS_set_mempolicy, numaplace::detail::mpol_bind, mask.data(), mask.maxnode()) != 0) {
            int err = errno;
            restore();
            failed_node = nodes[k];
            return err;
        }
        for (std::size_t base = 0; base < pages; base += period)
            for (std::size_t i = start_of_run; i < start_of_run + weights[k] && base + i < pages; ++i)
                c[(base + i) * page] = 0;
        start_of_run += weights[k];
    }
    restore();
    return 0;
}

} // namespace memory
} // namespace numaplace

#endif
