#ifndef NUMAPLACE_MEMORY_HPP_INCLUDED
#define NUMAPLACE_MEMORY_HPP_INCLUDED

/// \file
/// Map, bind, touch and unmap page ranges: the one place that calls mmap, mbind and set_mempolicy.
/// Placements (placement.hpp) are built on these.

#include "detail/linux.hpp"
#include "detail/placed.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <sys/mman.h>

namespace numaplace {

/// What a placement does when the kernel refuses it.
enum class fallback {
    strict, ///< throw `placement_error` (a `std::bad_alloc`), having released everything
    degrade ///< leave the pages to the default policy (first touch) and record it: `degradations()`
};

namespace memory {

/// \returns `bytes` rounded up to whole pages.
inline std::size_t page_round(std::size_t bytes) noexcept { return detail::round_up(bytes, detail::page_size()); }

/// \effects maps `bytes` (rounded up to pages) of anonymous, untouched memory whose start is a multiple
/// of `alignment` (a power of two, at least the page size).
/// \throws placement_error (errno ENOMEM) when the mapping fails.
inline void* map(std::size_t bytes, std::size_t alignment = detail::page_size()) {
    const std::size_t page = detail::page_size();
    if (alignment < page) alignment = page;
    const std::size_t length = page_round(bytes);
    if (length < bytes || length + alignment < length) detail::throw_placement(-1, bytes, ENOMEM, "size overflow");
    const std::size_t over = alignment > page ? length + alignment : length;
    void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) detail::throw_placement(-1, bytes, errno, "mmap failed");
    if (over == length) return raw;
    // Trim the over-allocation so that exactly [aligned, aligned + length) stays mapped.
    auto start = reinterpret_cast<std::uintptr_t>(raw);
    auto aligned = detail::round_up(start, alignment);
    if (aligned > start) ::munmap(raw, aligned - start);
    const std::uintptr_t tail = aligned + length, end = start + over;
    if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
    return reinterpret_cast<void*>(aligned);
}

/// \effects unmaps what `map(bytes, ...)` returned.
inline void unmap(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    numaplace::detail::placed_buffers::instance().released(p, page_round(bytes)); // before: the address may be reused
    ::munmap(p, page_round(bytes));
}

/// \effects faults in every page of [p, p+bytes) from the calling thread (first touch) without changing
/// its contents: an atomic add of zero to one byte per page is a single write access (one page fault,
/// no zero-page read fault first) and is harmless to concurrent readers.
inline void touch(void* p, std::size_t bytes) noexcept {
    if (bytes == 0) return;
    const std::size_t page = detail::page_size();
    auto* c = static_cast<char*>(p);
    const std::uintptr_t start = reinterpret_cast<std::uintptr_t>(p);
    std::size_t first = detail::round_up(start, page) - start; // first page boundary inside the range
    if (first != 0) __atomic_fetch_add(c, char(0), __ATOMIC_RELAXED); // the partial page before it
    for (std::size_t off = first; off < bytes; off += page) __atomic_fetch_add(c + off, char(0), __ATOMIC_RELAXED);
}

/// \effects keeps transparent huge pages off [p, p+bytes) (page-aligned), so that first-touch
/// placement works page by page. No effect when THP is off.
inline void forbid_huge_pages(void* p, std::size_t bytes) noexcept {
    if (topology::get().capabilities().thp != "never") ::madvise(p, page_round(bytes), MADV_NOHUGEPAGE);
}

/// Kernel memory policy modes numaplace uses.
enum class policy_mode : int {
    bind = detail::mpol_bind,
    preferred = detail::mpol_preferred,
    preferred_many = detail::mpol_preferred_many,
    interleave = detail::mpol_interleave
};

inline const char* name(policy_mode m) noexcept {
    switch (m) {
    case policy_mode::bind: return "bind";
    case policy_mode::preferred: return "preferred";
    case policy_mode::preferred_many: return "preferred_many";
    case policy_mode::interleave: return "interleave";
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

// A policy that pins `bytes` to `nodes` is accepted by the kernel even when the nodes cannot hold them;
// it then OOM-kills or SIGBUSes at first touch. So: \returns true if they fit; false (recorded) when
// they do not and `fb` is degrade. \throws placement_error (ENOMEM) when they do not and `fb` is strict.
inline bool fits(std::size_t bytes, const node_set& nodes, const std::string& what, fallback fb, const topology& topo) {
    std::uint64_t capacity = 0;
    for (int id : nodes) capacity += topo.at(id).memory;
    if (capacity == 0 || bytes <= capacity) return true;
    if (fb == fallback::strict)
        numaplace::detail::throw_placement(error_node(nodes), bytes, ENOMEM,
                                           what + ": more than the node memory (" + std::to_string(capacity) + " bytes)");
    numaplace::detail::degradation_log::instance().record(what + ": request exceeds node memory, left to first touch");
    return false;
}
} // namespace detail

/// \effects sets the memory policy of the untouched page range [p, p+bytes) (p page-aligned) so its
/// pages are allocated per `mode` over `nodes` when first touched.
/// \returns true if the policy is in force; false if the kernel refused and `fb` is degrade (recorded).
/// \throws unknown_node / invalid_placement for bad nodes; placement_error when strict and the kernel
/// refuses, or when a bind asks for more bytes than the nodes have memory (ENOMEM).
inline bool bind(void* p, std::size_t bytes, policy_mode mode, const node_set& nodes, fallback fb,
                 const topology& topo = topology::get()) {
    topo.check(nodes);
    if (bytes == 0) return true;
    if ((mode == policy_mode::bind || mode == policy_mode::interleave) &&
        !detail::fits(bytes, nodes, detail::describe(mode, nodes), fb, topo))
        return false;
    const auto mask = detail::mask_of(nodes, topo);
    int err = numaplace::detail::sys_mbind(p, page_round(bytes), static_cast<int>(mode), mask, 0);
    if (err == 0) return true;
    if (fb == fallback::strict)
        numaplace::detail::throw_placement(detail::error_node(nodes), bytes, err,
                                           "mbind " + detail::describe(mode, nodes) + " refused: " + std::strerror(err));
    if (mode == policy_mode::preferred_many && err == EINVAL) {
        // Old kernel: prefer the first node instead.
        node_set first{nodes[0]};
        numaplace::detail::degradation_log::instance().record(
            "preferred_many unsupported by the kernel (EINVAL): preferring node " + std::to_string(nodes[0]));
        return bind(p, bytes, policy_mode::preferred, first, fb, topo);
    }
    numaplace::detail::degradation_log::instance().record("mbind " + detail::describe(mode, nodes) + " refused (" +
                                                          std::strerror(err) + "): left to first touch");
    return false;
}

/// \effects faults in [p, p+bytes) (page-aligned, untouched, default policy) with consecutive runs of
/// pages on successive nodes: `weights[k]` pages on `nodes[k]`, then the next node, round robin. Done
/// from the calling thread under a temporary thread memory policy (restored before returning), so the
/// range stays one mapping however many runs it has (per-run mbind would split it into one VMA per
/// run and hit vm.max_map_count). The kernel's own MPOL_WEIGHTED_INTERLEAVE takes its weights from a
/// system-wide sysfs table, which a library must not own.
/// \returns true if placed; false when degraded (pages left to first touch, recorded).
/// \throws as `bind`.
inline bool weighted_fill(void* p, std::size_t bytes, const node_set& nodes, const std::vector<std::size_t>& weights,
                          fallback fb, const topology& topo = topology::get()) {
    topo.check(nodes);
    if (bytes == 0) return true;
    if (!detail::fits(bytes, nodes, "weighted interleave", fb, topo)) return false;
    forbid_huge_pages(p, bytes); // runs of single pages: no 2 MiB page may swallow a run
    std::size_t period = 0;
    for (auto w : weights) period += w;
    const std::size_t page = numaplace::detail::page_size();
    const std::size_t pages = page_round(bytes) / page;
    // Save the thread's policy to restore it afterwards.
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
        if (weights[k] == 0) { continue; }
        numaplace::detail::kernel_nodemask mask;
        mask.set(topo.at(nodes[k]).os_index);
        if (::syscall(SYS_set_mempolicy, numaplace::detail::mpol_bind, mask.data(), mask.maxnode()) != 0) {
            int err = errno;
            restore();
            if (fb == fallback::strict)
                numaplace::detail::throw_placement(nodes[k], bytes, err,
                                                   std::string("set_mempolicy bind refused: ") + std::strerror(err));
            numaplace::detail::degradation_log::instance().record(
                std::string("weighted interleave: set_mempolicy refused (") + std::strerror(err) + "): left to first touch");
            return false;
        }
        // pages whose position in the period falls in [start_of_run, start_of_run + weights[k])
        for (std::size_t base = 0; base < pages; base += period)
            for (std::size_t i = start_of_run; i < start_of_run + weights[k] && base + i < pages; ++i)
                c[(base + i) * page] = 0;
        start_of_run += weights[k];
    }
    restore();
    return true;
}

} // namespace memory
} // namespace numaplace

#endif
