#ifndef NUMAPLACE_HUGE_PAGES_HPP_INCLUDED
#define NUMAPLACE_HUGE_PAGES_HPP_INCLUDED

/// \file
/// Explicit huge pages (hugetlb) as machine facts: the page-size choice a placement carries
/// (`page_size`), the per-node pools the kernel keeps (`huge_page_pools`), and whether this process may
/// use them (`huge_page_usability`). Placing memory on them is place.hpp's (`detail::place_on_pages`);
/// printing them is report.hpp's. Design and measurements: docs/huge-pages.md.

#include "detail/hugetlb.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace numaplace {

/// The pages a placement maps its memory with.
enum class page_size {
    transparent,     ///< small pages, transparent huge pages as the system's THP mode allows (the default)
    explicit_2m,     ///< explicit 2 MiB pages from the pools of the placement's nodes (MAP_HUGETLB)
    explicit_1g,     ///< explicit 1 GiB pages from the pools of the placement's nodes (MAP_HUGETLB)
    largest_explicit ///< the largest explicit size (1 GiB, else 2 MiB) whose pools can serve the request
};

/// \returns the name of `p` ("transparent", "explicit_2m", "explicit_1g", "largest_explicit").
inline const char* name(page_size p) noexcept {
    switch (p) {
    case page_size::explicit_2m: return "explicit_2m";
    case page_size::explicit_1g: return "explicit_1g";
    case page_size::largest_explicit: return "largest_explicit";
    case page_size::transparent: break;
    }
    return "transparent";
}

/// \returns the bytes of one page of `p`: 2 MiB, 1 GiB; 0 for `transparent` and `largest_explicit` (the
/// latter is chosen per request, see `detail::place_on_pages`).
constexpr std::size_t explicit_page_bytes(page_size p) noexcept {
    return p == page_size::explicit_2m ? std::size_t(2) << 20 : p == page_size::explicit_1g ? std::size_t(1) << 30 : 0;
}

/// One node's pool of explicit huge pages of one size.
struct huge_page_pool {
    std::size_t page_bytes = 0; ///< the page size
    long total = -1;            ///< pages in the pool (nr_hugepages), -1 unreadable
    long free = -1;             ///< pages no mapping holds (free_hugepages), -1 unreadable
    long surplus = -1;          ///< pages above the persistent count (surplus_hugepages), -1 unreadable
};

/// \returns the huge page sizes the kernel supports (has a pool for), in bytes, ascending; empty
/// without hugetlb. 1 GiB appears only where the CPU has `pdpe1gb` (x86) and the kernel supports it.
inline std::vector<std::size_t> explicit_page_sizes() { return detail::os_hugetlb_sizes(); }

/// \returns whether the kernel supports explicit pages of `bytes`.
inline bool explicit_page_supported(std::size_t bytes) {
    for (std::size_t s : explicit_page_sizes())
        if (s == bytes) return true;
    return false;
}

/// \returns node `node`'s pools, one per supported size, ascending (empty without hugetlb, or for a
/// synthetic topology). \throws unknown_node.
inline std::vector<huge_page_pool> huge_page_pools(int node, const topology& topo = topology::get()) {
    topo.check(node);
    std::vector<huge_page_pool> pools;
    if (!topo.is_this_system()) return pools;
    for (std::size_t s : explicit_page_sizes()) {
        const detail::hugetlb_counts c = detail::os_hugetlb_node_counts(topo.at(node).os_index, s);
        huge_page_pool p;
        p.page_bytes = s;
        p.total = c.total;
        p.free = c.free;
        p.surplus = c.surplus;
        pools.push_back(p);
    }
    return pools;
}

/// \returns the free pages of `bytes` on `node` now (0 where there is no such pool or it is unreadable).
/// \throws unknown_node.
inline std::size_t free_huge_pages(int node, std::size_t bytes, const topology& topo = topology::get()) {
    topo.check(node);
    if (!topo.is_this_system()) return 0;
    const long f = detail::os_hugetlb_node_counts(topo.at(node).os_index, bytes).free;
    return f > 0 ? static_cast<std::size_t>(f) : 0;
}

/// What may keep this process from using explicit huge pages of one size, beyond the pools.
struct huge_page_usability {
    std::size_t page_bytes = 0;     ///< the page size
    bool cgroup_visible = false;    ///< the hugetlb controller of this process's cgroup could be read
    bool cgroup_limited = false;    ///< that controller sets a limit
    std::size_t cgroup_limit = 0;   ///< its limit in bytes (when limited)
    std::size_t cgroup_usage = 0;   ///< bytes it charges now
    std::string cgroup_file;        ///< the file read (or looked for)
    std::size_t memlock_limit = 0;  ///< RLIMIT_MEMLOCK (SIZE_MAX: unlimited); it limits SHM_HUGETLB
                                    ///< shared memory only, never MAP_HUGETLB mappings
    bool hugetlbfs_mounted = false; ///< a hugetlbfs is mounted (shared huge-page files need one; MAP_HUGETLB does not)
    /// \returns the bytes the cgroup still allows (SIZE_MAX when unlimited or not visible).
    std::size_t cgroup_room() const noexcept {
        if (!cgroup_visible || !cgroup_limited) return SIZE_MAX;
        return cgroup_limit > cgroup_usage ? cgroup_limit - cgroup_usage : 0;
    }
};

/// \returns what limits this process's use of explicit pages of `bytes`: the hugetlb cgroup limit where
/// visible, RLIMIT_MEMLOCK, whether a hugetlbfs is mounted.
inline huge_page_usability huge_page_usage_limits(std::size_t bytes) {
    huge_page_usability u;
    u.page_bytes = bytes;
    const detail::hugetlb_cgroup_limit c = detail::os_hugetlb_cgroup_limit(bytes);
    u.cgroup_visible = c.visible;
    u.cgroup_limited = c.limited;
    u.cgroup_limit = c.limit;
    u.cgroup_usage = c.usage;
    u.cgroup_file = c.file;
    u.memlock_limit = detail::os_memlock_limit();
    u.hugetlbfs_mounted = detail::os_hugetlbfs_mounted();
    return u;
}

/// \returns a page size in words: "2 MiB", "1 GiB", "64 KiB".
inline std::string page_bytes_name(std::size_t bytes) {
    if (bytes >= (std::size_t(1) << 30) && bytes % (std::size_t(1) << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
    if (bytes >= (std::size_t(1) << 20) && bytes % (std::size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes >> 10) + " KiB";
}

/// Bytes of a range by the page size the kernel maps them with.
struct page_size_histogram {
    /// {page bytes (KernelPageSize of /proc/self/smaps), bytes of the range}, one entry per size seen.
    std::vector<std::pair<std::size_t, std::size_t>> by_size;
    std::size_t transparent_huge = 0; ///< bytes in transparent huge pages (AnonHugePages of the mappings
                                      ///< wholly inside the range)
    /// \returns the bytes of the range mapped with pages of `page` bytes (0 when none).
    std::size_t bytes_on(std::size_t page) const noexcept {
        for (const auto& e : by_size)
            if (e.first == page) return e.second;
        return 0;
    }
};

/// \returns the bytes of [p, p+bytes) by the kernel page size of their mappings, and the transparent
/// huge pages inside. Reads /proc/self/smaps; never faults a page in.
/// \throws std::system_error when /proc/self/smaps cannot be read.
inline page_size_histogram where_page_sizes(const void* p, std::size_t bytes) {
    detail::mapped_page_sizes m;
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t hi = lo + bytes < lo ? UINTPTR_MAX : lo + bytes;
    if (!detail::os_mapped_page_sizes(lo, hi, m))
        throw std::system_error(errno == 0 ? ENOENT : errno, std::generic_category(), "numaplace: /proc/self/smaps");
    page_size_histogram h;
    h.by_size = std::move(m.by_size);
    h.transparent_huge = m.transparent_huge;
    return h;
}

} // namespace numaplace

#endif
