#ifndef NUMAPLACE_PLACE_HPP_INCLUDED
#define NUMAPLACE_PLACE_HPP_INCLUDED

/// \file
/// The one decision between throwing and degrading. Every feature that binds memory (the placements
/// and their allocators, the heap, pmr resources, `replace`, `replicated`, `shared_segment`,
/// `bind_with_balancing`) binds through `detail::place`: admit (capacity, admission.hpp), bind
/// (memory.hpp), then a refusal throws when strict or is recorded when degrading. Below the placement
/// values (placement.hpp) so that the heap can use it without sitting below the layer it serves.

#include "admission.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "huge_pages.hpp"
#include "memory.hpp"
#include "topology.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// How a range to place came to be.
enum class range_origin {
    fresh,  ///< numaplace's own untouched mapping: its admission is a reservation until unmapped
    pooled, ///< a heap's span or region, kept mapped for reuse: admitted, not reserved
    foreign, ///< memory numaplace does not own (a user's range, a shared file): admitted, not reserved
    unadmitted ///< a heap's region of large runs: bound whole, admitted by its user run by run (pooled)
};

/// \effects admits `bytes` for `mode` over `nodes`, a reservation until unmapped for numaplace's own
/// fresh mapping at `p`. \throws placement_error (ENOMEM, for every fallback: a fallback cannot make
/// memory that does not exist).
inline void admit_or_throw(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes,
                           const char* who, range_origin origin = range_origin::fresh) {
    if (memory::admit(bytes, mode, nodes, origin == range_origin::fresh ? p : nullptr) != 0)
        throw_placement(error_node(nodes), bytes, ENOMEM,
                        who + describe(mode, nodes) + ": more than the free memory of the nodes");
}

/// \effects the strict-or-degrade decision for a refusal `err` of `what` (bytes, node -1 for several):
/// throws when `fb` is strict, else records `what refused (reason): fell_back`.
/// \returns false (degraded). \throws placement_error when strict.
inline bool refused(int err, int node, std::size_t bytes, fallback fb, const std::string& what,
                    const std::string& fell_back = "left to first touch") {
    if (fb == fallback::strict) throw_placement(node, bytes, err, what + " refused: " + refusal_reason(err));
    degradation_log::instance().record(what + " refused (" + std::strerror(err) + "): " + fell_back);
    return false;
}

/// \effects admits `bytes` for `mode` over `nodes` (see admit_or_throw), then sets `mode` on
/// [p, p+bytes) (p page-aligned). A refusal throws when `fb` is strict; when degrading it falls back once,
/// as far as the kernel allows, and records it: preferred_many to preferring the first node,
/// bind_balancing to a plain bind (EINVAL: a kernel older than 5.12), else the default policy (first
/// touch). Messages start with `who` (e.g. "heap: ").
/// \returns true if placed as asked, false if degraded. \throws unknown_node, placement_error.
inline bool place(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb,
                  const char* who = "", range_origin origin = range_origin::fresh) {
    const topology& topo = topology::get();
    topo.check(nodes);
    if (bytes == 0) return true;
    if (origin != range_origin::unadmitted) admit_or_throw(p, bytes, mode, nodes, who, origin);
    const int err = memory::bind(p, bytes, mode, nodes, topo);
    if (err == 0) return true;
    // A strict refusal admits nothing: the range is not placed (and may never be unmapped through
    // memory::unmap when it is a caller's own).
    if (fb == fallback::strict && origin == range_origin::fresh) forget_reservations(p, memory::page_round(bytes));
    std::string fell_back = "left to first touch";
    if (fb == fallback::degrade && err == EINVAL && mode == memory::policy_mode::preferred_many) {
        if (memory::bind(p, bytes, memory::policy_mode::preferred, node_set{nodes[0]}, topo) == 0)
            fell_back = "preferring node " + std::to_string(nodes[0]) + " (MPOL_PREFERRED_MANY unsupported)";
    } else if (fb == fallback::degrade && err == EINVAL && mode == memory::policy_mode::bind_balancing) {
        if (memory::bind(p, bytes, memory::policy_mode::bind, nodes, topo) == 0)
            fell_back = describe(memory::policy_mode::bind, nodes) + " without NUMA balancing (MPOL_F_NUMA_BALANCING unsupported)";
    }
    return refused(err, error_node(nodes), bytes, fb, who + ("mbind " + describe(mode, nodes)), fell_back);
}

// --- Explicit huge pages (docs/huge-pages.md) ----------------------------------------------------------

/// \returns whether a request of `mode` over `nodes` may take explicit pages from every node's pool (a
/// single preferred node: the kernel takes another node's page when it has none).
inline bool takes_any_pool(memory::policy_mode mode, const node_set& nodes) noexcept {
    return mode == memory::policy_mode::preferred && nodes.size() == 1;
}

/// \returns the pages the pools of `nodes` may serve a request of `mode` from: the free pages of `page`
/// bytes of its one node (bind), of every node of the topology (a single preferred node: the kernel
/// takes another node's page when it has none), of all of `nodes` otherwise. `where` says which.
inline std::size_t pool_pages_for(std::size_t page, memory::policy_mode mode, const node_set& nodes, std::string& where) {
    const topology& topo = topology::get();
    const bool anywhere = takes_any_pool(mode, nodes);
    std::size_t free = 0;
    where = anywhere ? "any node" : nodes.size() == 1 ? "node " + std::to_string(nodes[0]) : "nodes ";
    for (int id = 0; id < static_cast<int>(topo.size()); ++id) {
        bool in = anywhere;
        for (int n : nodes) in = in || n == id;
        if (in) free += free_huge_pages(id, page, topo);
    }
    if (!anywhere && nodes.size() != 1)
        for (std::size_t i = 0; i < nodes.size(); ++i) where += (i ? "," : "") + std::to_string(nodes[i]);
    return free;
}

/// \returns why the pools cannot serve `pages` pages of `page` bytes for `mode` over `nodes` (empty: they can).
/// Pages this process holds ready count as free: when the pools are short, the blocks it keeps for reuse
/// that may hold such pages are given back to them first (`pool_relief`, memory.hpp) and the pools read again.
inline std::string pool_shortage(std::size_t page, std::size_t pages, memory::policy_mode mode, const node_set& nodes) {
    std::string where;
    std::size_t free = pool_pages_for(page, mode, nodes, where);
    if (free < pages)
        if (const pool_relief_fn relief = pool_relief.load(std::memory_order_acquire))
            if (relief(page, nodes, takes_any_pool(mode, nodes))) free = pool_pages_for(page, mode, nodes, where);
    if (free >= pages) return std::string();
    return "explicit " + page_bytes_name(page) + " pages on " + where + ": " + std::to_string(pages) + " needed, " +
           std::to_string(free) + " free";
}

/// \returns the hugetlb cgroup's limits for pages of `page` bytes (huge_page_usage_limits); when they
/// leave less than `bytes`, read again after the blocks this process keeps for reuse on such pages were
/// given back (`pool_relief`: their pages are charged to the cgroup too).
inline huge_page_usability cgroup_room_for(std::size_t page, std::size_t bytes) {
    huge_page_usability use = huge_page_usage_limits(page);
    if (use.cgroup_room() < bytes)
        if (const pool_relief_fn relief = pool_relief.load(std::memory_order_acquire))
            if (relief(page, node_set{}, true)) use = huge_page_usage_limits(page);
    return use;
}

/// \returns the page bytes `ps` means for `bytes` at `p` over `nodes`: its own size, or for
/// `largest_explicit` the largest supported size that `p` is aligned to, that `bytes` holds at least one
/// page of and whose pools can serve those pages (0: none can; the smallest size is then what fails).
inline std::size_t resolve_page_bytes(numaplace::page_size ps, const void* p, std::size_t bytes, memory::policy_mode mode,
                                      const node_set& nodes) {
    if (ps != numaplace::page_size::largest_explicit) return explicit_page_bytes(ps);
    const std::vector<std::size_t> sizes = explicit_page_sizes();
    for (std::size_t i = sizes.size(); i-- > 0;) {
        const std::size_t s = sizes[i];
        if (s < (std::size_t(2) << 20) || reinterpret_cast<std::uintptr_t>(p) % s != 0 || bytes < s) continue;
        if (pool_shortage(s, bytes / s, mode, nodes).empty()) return s;
    }
    return explicit_page_bytes(numaplace::page_size::explicit_2m);
}

/// \effects tries to put the whole pages of `page` bytes of [p, p+bytes) on explicit huge pages: checks
/// them (kernel support, alignment, size, the pools unless `pools_checked`, the hugetlb cgroup; pages of
/// blocks this process keeps for reuse are given back first, see pool_shortage), replaces
/// the range by a MAP_HUGETLB mapping, binds it and faults every page in under the binding
/// (MADV_POPULATE_WRITE: an empty pool is an error here, never a SIGBUS at a later first touch).
/// \returns the bytes placed on explicit pages (a multiple of `page`), or 0 with `err` and `why` set and
/// [p, p+bytes) an untouched small-page mapping again.
inline std::size_t try_explicit(void* p, std::size_t bytes, std::size_t page, memory::policy_mode mode,
                                const node_set& nodes, bool pools_checked, int& err, std::string& why) {
    const std::string size = page_bytes_name(page);
    const std::size_t whole = bytes / page * page;
    err = EINVAL;
    if (!explicit_page_supported(page)) {
        why = "explicit " + size + " pages: the kernel has no pool of that size (no /sys/kernel/mm/hugepages/hugepages-" +
              std::to_string(page >> 10) + "kB" + (page == (std::size_t(1) << 30) ? "; a CPU without pdpe1gb?)" : ")");
        return 0;
    }
    if (whole == 0) {
        why = "explicit " + size + " pages: " + std::to_string(bytes) + " bytes are less than one page";
        return 0;
    }
    if (reinterpret_cast<std::uintptr_t>(p) % page != 0) {
        why = "explicit " + size + " pages: the range does not start on a " + size + " boundary";
        return 0;
    }
    err = ENOMEM;
    if (!pools_checked && !(why = pool_shortage(page, whole / page, mode, nodes)).empty()) return 0;
    const huge_page_usability use = cgroup_room_for(page, whole);
    if (use.cgroup_room() < whole) {
        why = "explicit " + size + " pages: the hugetlb cgroup limit (" + use.cgroup_file + ") leaves " +
              std::to_string(use.cgroup_room()) + " bytes of " + std::to_string(whole);
        return 0;
    }
    const auto undo = [&](int e, std::string w) {
        os_map_small_fixed(p, whole); // our own range: a small-page mapping again, untouched
        err = e;
        why = std::move(w);
        return std::size_t(0);
    };
    if (const int e = os_map_hugetlb_fixed(p, whole, page))
        return undo(e, "explicit " + size + " pages: mmap MAP_HUGETLB refused (" + std::strerror(e) + ")");
    if (const int e = memory::bind(p, whole, mode, nodes))
        return undo(e, "explicit " + size + " pages: mbind " + describe(mode, nodes) + " refused (" + std::strerror(e) + ")");
    os_dont_fork(p, whole); // no copy-on-write of a huge page in this process after a fork
    if (const int e = os_advise(p, whole, page_advice::populate_write)) {
        std::string w;
        const std::string shortage = pool_shortage(page, whole / page, mode, nodes);
        if (e == EINVAL) w = "explicit " + size + " pages: MADV_POPULATE_WRITE unsupported (Linux < 5.14): they cannot be faulted in without risking SIGBUS";
        else w = "explicit " + size + " pages: the pool could not serve every page at fault (" + std::strerror(e) + ")" +
                 (shortage.empty() ? std::string() : "; now " + shortage.substr(shortage.find(':') + 2));
        return undo(e == EINVAL ? EINVAL : ENOMEM, std::move(w));
    }
    return whole;
}

/// \effects `place` with a page-size choice: for `transparent`, exactly `place`; otherwise the whole
/// pages of the chosen size in [p, p+bytes) (p aligned to that size) come from the pools of `nodes`,
/// bound by `mode` and faulted in now; a tail shorter than one page is placed on small pages by `place`.
/// When the pools cannot serve them (checked before anything is mapped, and again at fault), the size is
/// unsupported, or the request holds no whole page: strict throws placement_error (ENOMEM: the pools,
/// naming the node, the size and what is free; EINVAL: size or alignment); degrading records why and
/// places the range by `place` on transparent huge pages where THP allows, small pages otherwise.
/// `pools_checked`: the caller checked the pools of every block (partitioned).
/// \returns true if placed as asked, false if degraded. \throws placement_error, unknown_node.
inline bool place_on_pages(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb,
                           numaplace::page_size ps, const char* who = "", bool pools_checked = false) {
    if (ps == numaplace::page_size::transparent || bytes == 0) return place(p, bytes, mode, nodes, fb, who);
    topology::get().check(nodes);
    const std::size_t page = resolve_page_bytes(ps, p, bytes, mode, nodes);
    int err = 0;
    std::string why;
    const std::size_t whole = try_explicit(p, bytes, page, mode, nodes, pools_checked, err, why);
    if (whole == 0) {
        if (fb == fallback::strict) throw_placement(error_node(nodes), bytes, err, who + why);
        if (mode != memory::policy_mode::interleave && topology::get().capabilities().thp == "madvise")
            os_advise(p, memory::page_round(bytes), page_advice::huge_pages);
        degradation_log::instance().record(who + why + ": placed on transparent huge pages (THP " +
                                           topology::get().capabilities().thp + ") or small pages instead");
        place(p, bytes, mode, nodes, fb, who);
        return false;
    }
    return bytes == whole || place(static_cast<char*>(p) + whole, bytes - whole, mode, nodes, fb, who);
}

} // namespace detail

/// \effects what every placement's `apply` does for one policy (for user-written placements):
/// admits `bytes` on `nodes` (refused with ENOMEM for every fallback, see admission.hpp), then sets
/// `mode` on the untouched range [p, p+bytes). \returns true if placed; false if the kernel refused
/// and `fb` is degrade (recorded in `degradations()`). \throws placement_error (strict refusal, or
/// ENOMEM); unknown_node.
inline bool place_pages(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb) {
    return detail::place(p, bytes, mode, nodes, fb);
}

} // namespace numaplace

#endif
