#ifndef NUMAPLACE_ADMISSION_HPP_INCLUDED
#define NUMAPLACE_ADMISSION_HPP_INCLUDED

/// \file
/// Admission: whether a request fits in the memory its policy may use, and the kernel policy modes.
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

#include "detail/config.hpp"
#include "detail/fork.hpp"
#include "detail/linux.hpp"
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
#include <vector>

namespace numaplace {
namespace memory {

/// Kernel memory policy modes numaplace uses.
enum class policy_mode : int {
    bind = detail::mpol_bind,                       ///< MPOL_BIND: only these nodes
    preferred = detail::mpol_preferred,             ///< MPOL_PREFERRED: this node first, then any
    preferred_many = detail::mpol_preferred_many,   ///< MPOL_PREFERRED_MANY (Linux >= 5.15): these nodes first
    interleave = detail::mpol_interleave,           ///< MPOL_INTERLEAVE: pages round robin over the nodes
    /// MPOL_BIND | MPOL_F_NUMA_BALANCING (Linux >= 5.12, `capabilities().numa_balancing_bind`): bound to
    /// the nodes, and automatic NUMA balancing may still migrate pages among them towards their readers.
    bind_balancing = detail::mpol_bind | detail::mpol_f_numa_balancing
};

/// \returns the mode's name as `numaplace-info` prints it (e.g. "bind", "interleave").
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

} // namespace memory
namespace detail {
/// Per-node memory accounting behind `admit` (one per process, never destroyed).
class capacity {
public:
    static detail::lazy_global<capacity>& cell() noexcept {
        static detail::lazy_global<capacity> c; // constant-initialised: no guard
        return c;
    }
    /// \returns the accounting (made on first use with the topology). \throws what topology::get throws.
    static capacity& instance() { return cell().get([] { return new capacity(topology::get()); }); }

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
                // A reservation left at this address is stale (the range is placed afresh): replace it.
                erase_range(reinterpret_cast<std::uintptr_t>(reservation), bytes);
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
        erase_range(reinterpret_cast<std::uintptr_t>(p), length);
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

    static std::int64_t now_ms() noexcept { return detail::os_now_ms(); }

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
                    if (s.os == static_cast<unsigned long>(node)) s.watermark += pages * detail::page_size();
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

    // Drops the reservations that start inside [from, from + length). Never allocates.
    void erase_range(std::uintptr_t from, std::size_t length) noexcept {
        auto it = reservations_.lower_bound(from);
        while (it != reservations_.end() && it->first - from < length) {
            nodes_[static_cast<std::size_t>(it->second.node)].reserved -= it->second.bytes;
            it = reservations_.erase(it);
            reservation_count_.fetch_sub(1, std::memory_order_relaxed);
        }
    }

    // Untouched bytes of node n's reservations (mincore: resident pages are already in MemFree). A
    // reservation whose range is no longer mapped (a caller unmapped its own range without
    // memory::unmap) is stale: dropped here, so it cannot hold the node's memory forever.
    std::uint64_t untouched(int node) noexcept {
        const std::size_t page = detail::page_size();
        std::uint64_t sum = 0;
        unsigned char vec[1024];
        for (auto it = reservations_.begin(); it != reservations_.end();) {
            const auto& r = *it;
            if (r.second.node != node) {
                ++it;
                continue;
            }
            const std::size_t pages = (r.second.bytes + page - 1) / page;
            std::uint64_t mine = 0;
            bool gone = false;
            for (std::size_t done = 0; done < pages;) {
                const std::size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
                const int err = detail::os_resident(reinterpret_cast<void*>(r.first + done * page), k * page, vec);
                if (err == ENOMEM && done == 0) { // nothing mapped at its start: unmapped behind our back
                    gone = true;
                    break;
                }
                if (err != 0) {
                    mine += (pages - done) * page; // unknown: count as untouched
                    break;
                }
                for (std::size_t i = 0; i < k; ++i) mine += (vec[i] & 1) ? 0 : page;
                done += k;
            }
            if (gone) {
                nodes_[static_cast<std::size_t>(r.second.node)].reserved -= r.second.bytes;
                it = reservations_.erase(it);
                reservation_count_.fetch_sub(1, std::memory_order_relaxed);
                continue;
            }
            sum += mine;
            ++it;
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

// Fork hooks (stage capacity): nobody makes the accounting or holds its lock during fork. A heap
// admits regions inside its gate (an earlier stage); the log (a later stage) may be written under it.
inline std::mutex& capacity_lock(capacity& c) noexcept { return c.mutex(); }
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const detail::fork_hook_registration capacity_fork NUMAPLACE_EARLY_INIT{
    detail::fork_stage::capacity,
    detail::locked_global_hooks<capacity, &capacity::cell, std::mutex, &capacity_lock>::hook()};
#endif

/// \effects drops the reservations inside [p, p+length) (unmapped). Never allocates; nothing to do when
/// the accounting was never made.
inline void forget_reservations(void* p, std::size_t length) noexcept {
    if (auto* c = capacity::cell().peek()) c->forget(p, length);
}
} // namespace detail
namespace memory {

/// \effects checks that `bytes` fit in what `mode` over `nodes` may use (see the file comment). A
/// bound single-node request with a `reservation` address (the start of its untouched mapping) is
/// counted against the node until that range is unmapped.
/// \returns 0, or ENOMEM when they do not fit.
inline int admit(std::size_t bytes, policy_mode mode, const node_set& nodes, void* reservation = nullptr) {
    const bool single_bind = mode == policy_mode::bind || mode == policy_mode::bind_balancing;
    const bool bound = single_bind || mode == policy_mode::interleave;
    return detail::capacity::instance().admit(bytes, bound, nodes, single_bind ? reservation : nullptr);
}

} // namespace memory
} // namespace numaplace

#endif
