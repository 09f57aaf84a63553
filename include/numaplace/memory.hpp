#ifndef NUMAPLACE_MEMORY_HPP_INCLUDED
#define NUMAPLACE_MEMORY_HPP_INCLUDED

/// \file
/// Mechanism: map, bind, touch, fill and unmap page ranges, over the platform layer (detail/linux.hpp).
/// Nothing here decides between throwing and degrading: every function returns 0 or an errno, and
/// place.hpp decides what a refusal means. It sits below partitions and placements and includes
/// neither (tests/header_deps checks it).
///
/// Capacity: every mapping numaplace binds is admitted first (admission.hpp).

#include "admission.hpp"
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


namespace numaplace {
namespace detail {
/// What gives address space back when the kernel refused a mapping for it (ENOMEM under an address-space
/// limit): layers above that keep memory mapped for reuse with nothing in use (the node heaps' cold spans,
/// the cache of freed own mappings) subscribe their slot when they are made, so that every mapping,
/// whoever asks for it, is tried once more after they gave back what they keep. A relief returns whether
/// it unmapped anything; it never waits for a lock the caller may hold (or one a fork holds while it
/// waits for the caller) and never allocates. Constant-initialised. Design: docs/heap.md ("Address space
/// given back on refusal").
using address_space_relief_fn = bool (*)() noexcept;
enum : std::size_t { relief_heaps, relief_placed_cache, relief_slots };
inline std::atomic<address_space_relief_fn> address_space_reliefs[relief_slots];
/// \effects calls every subscribed relief. \returns whether one of them unmapped anything.
inline bool relieve_address_space() noexcept {
    bool any = false;
    for (auto& slot : address_space_reliefs)
        if (const address_space_relief_fn relief = slot.load(std::memory_order_acquire)) any = relief() || any;
    return any;
}
/// What gives explicit huge pages back to their pools when a request finds them short (place.hpp's
/// `pool_shortage`): the cache of freed own mappings keeps explicit-page blocks mapped for reuse, their
/// pages taken from the pools, and subscribes when it is made, so that admission counts the pages this
/// process holds ready as well as the pools' free ones. Called with the page bytes and the nodes whose
/// pools a request counts (`any_node`: every node's), it unmaps the kept blocks that may hold such pages
/// and returns whether it unmapped any; it never allocates and is never called under a lock a fork hook
/// takes. Constant-initialised. Design: docs/huge-pages.md ("The heap and the caches").
using pool_relief_fn = bool (*)(std::size_t page, const node_set& nodes, bool any_node) noexcept;
inline std::atomic<pool_relief_fn> pool_relief{nullptr};
} // namespace detail
namespace memory {

/// \returns true if `bytes` rounded up to whole pages fits in a size_t.
inline bool page_round_fits(std::size_t bytes) noexcept { return bytes <= SIZE_MAX - (detail::page_size() - 1); }

/// \returns `bytes` rounded up to whole pages. \requires page_round_fits(bytes).
inline std::size_t page_round(std::size_t bytes) noexcept { return detail::round_up(bytes, detail::page_size()); }

/// \returns true if [p, p + bytes) rounded up to whole pages ends within the address space.
inline bool page_range_fits(const void* p, std::size_t bytes) noexcept {
    return page_round_fits(bytes) && page_round(bytes) <= UINTPTR_MAX - reinterpret_cast<std::uintptr_t>(p);
}

/// \effects maps `bytes` (rounded up to pages, at least one page) of anonymous, untouched memory whose
/// start is a multiple of `alignment` (a power of two; below a page means a page).
/// \returns 0 and the start in `out`; or ENOMEM (size overflow, or the kernel refused, also after the
/// subscribed reliefs gave address space back when the request is below the address-space limit:
/// detail::relieve_address_space; nothing mapped), EINVAL
/// (alignment not a power of two).
inline int try_map(std::size_t bytes, std::size_t alignment, void*& out) noexcept {
    out = nullptr;
    const std::size_t page = detail::page_size();
    if (!detail::is_power_of_two(alignment)) return EINVAL;
    if (alignment < page) alignment = page;
    if (bytes == 0) bytes = 1;
    if (!page_round_fits(bytes)) return ENOMEM;
    const std::size_t length = page_round(bytes);
    if (alignment > page && length > SIZE_MAX - alignment) return ENOMEM;
    const std::size_t over = alignment > page ? length + alignment : length;
    void* raw = nullptr;
    // Our flags and protection are valid, so EINVAL can only mean a length the kernel (or valgrind)
    // cannot map at all: out of memory, as for any other impossible size.
    int err = detail::os_map_anonymous(over, raw);
    // A request of the whole address-space limit or more fits after no relief: what is kept stays.
    if (err == ENOMEM && over < detail::os_address_space_limit() && detail::relieve_address_space())
        err = detail::os_map_anonymous(over, raw);
    if (err != 0) return err == EINVAL ? ENOMEM : err;
    if (over != length) { // trim so that exactly [aligned, aligned + length) stays mapped
        const auto start = reinterpret_cast<std::uintptr_t>(raw);
        const std::uintptr_t mask = alignment - 1; // alignment: a power of two
        const auto aligned = (start + mask) & ~mask;
        if (aligned > start) detail::os_unmap(raw, aligned - start);
        const std::uintptr_t tail = aligned + length, end = start + over;
        if (end > tail) detail::os_unmap(reinterpret_cast<void*>(tail), end - tail);
        raw = reinterpret_cast<void*>(aligned);
    }
    out = raw;
    return 0;
}

} // namespace memory
namespace detail {
/// \returns why the kernel said `err` to a mapping (`mapping` true) or a binding, in words. ENOMEM is the
/// process's mapping limit far more often than memory (mbind splits mappings; every mapping counts), or,
/// for a mapping, its address-space limit; a mapping of `bytes` (0: not said) more than that limit, or
/// than any address range (64 TiB and up), is named as such.
inline std::string refusal_reason(int err, bool mapping = false, std::size_t bytes = 0) {
    std::string r = std::strerror(err);
    if (err == ENOMEM && mapping && bytes != 0) { // a request no mapping count explains
        const std::size_t limit = os_address_space_limit();
        if (bytes > limit)
            return r + "; " + std::to_string(bytes) + " bytes are more than the address-space limit (ulimit -v " +
                   std::to_string(limit >> 10) + ")";
        if (bytes > (std::size_t(1) << 46))
            return r + "; " + std::to_string(bytes) + " bytes are more than any free range of the process's address space";
    }
    if (err == ENOMEM) {
        std::size_t limit = 0;
        if (std::FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
            unsigned long v = 0;
            if (std::fscanf(f, "%lu", &v) == 1) limit = v;
            std::fclose(f);
        }
        r += "; the process may be at its mapping limit (vm.max_map_count";
        r += limit ? " = " + std::to_string(limit) + ")" : ")";
        if (mapping) r += " or its address-space limit (ulimit -v)";
    }
    return r;
}
} // namespace detail
namespace memory {

/// \effects as `try_map`. \returns the start. \throws placement_error with try_map's errno, naming
/// `node` (-1: several or none).
inline void* map(std::size_t bytes, std::size_t alignment = detail::page_size(), int node = -1) {
    void* p = nullptr;
    const int err = try_map(bytes, alignment, p);
    if (err != 0)
        detail::throw_placement(node, bytes, err,
                                err == EINVAL ? std::string("alignment not a power of two")
                                              : "mmap failed: " + detail::refusal_reason(err, true, bytes));
    return p;
}

} // namespace memory
namespace detail {
/// What `unmap` tells about every range just before unmapping it, or null. Records keyed by address
/// that live above this layer subscribe here (detail/buffer_record.hpp, the record of partitioned buffers, when
/// it is created), so that every unmap, whoever calls it (allocators, the heap, pmr resources, a user's
/// memory::allocate), drops their entries before the address can be mapped again, without this header
/// knowing what they record. Constant-initialised: valid during static initialisation and destruction.
using unmap_observer_fn = void (*)(const void* p, std::size_t length) noexcept;
inline std::atomic<unmap_observer_fn> unmap_observer{nullptr};
} // namespace detail
namespace memory {

} // namespace memory
namespace detail {
/// Ranges whose munmap failed (ENOMEM: splitting a mapping at vm.max_map_count). Their pages are
/// released with MADV_DONTNEED and the range stays listed until a later `memory::unmap` (or
/// `retry_stranded`) unmaps it. Listed in a fixed table of slots, lock-free (fork-safe without a hook,
/// never allocates); when the table is full, in a list linked through the ranges' own first bytes (that
/// first page then stays resident).
struct stranded_range {
    stranded_range* next;
    std::size_t length;
};
constexpr std::size_t stranded_slots = 1024;
inline std::atomic<std::uintptr_t> stranded_start[stranded_slots] = {};
inline std::atomic<std::size_t> stranded_length[stranded_slots] = {};
inline std::atomic<stranded_range*> stranded_overflow{nullptr};
inline std::atomic<std::size_t> stranded_count{0};

inline void strand(void* p, std::size_t length) noexcept {
    stranded_count.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t i = 0; i < stranded_slots; ++i) {
        std::uintptr_t expected = 0;
        if (stranded_start[i].load(std::memory_order_relaxed) == 0 &&
            stranded_start[i].compare_exchange_strong(expected, ~std::uintptr_t(0), std::memory_order_acquire)) {
            os_advise(p, length, page_advice::dont_need);
            stranded_length[i].store(length, std::memory_order_relaxed);
            stranded_start[i].store(reinterpret_cast<std::uintptr_t>(p), std::memory_order_release);
            return;
        }
    }
    const std::size_t page = page_size();
    if (length > page) os_advise(static_cast<char*>(p) + page, length - page, page_advice::dont_need);
    auto* r = static_cast<stranded_range*>(p);
    r->length = length;
    r->next = stranded_overflow.load(std::memory_order_relaxed);
    while (!stranded_overflow.compare_exchange_weak(r->next, r, std::memory_order_release, std::memory_order_relaxed)) {
    }
}

/// \effects tries again to unmap every stranded range; those that still fail stay listed.
inline void retry_stranded() noexcept {
    if (stranded_count.load(std::memory_order_relaxed) == 0) return;
    for (std::size_t i = 0; i < stranded_slots; ++i) {
        std::uintptr_t start = stranded_start[i].load(std::memory_order_acquire);
        if (start == 0 || start == ~std::uintptr_t(0)) continue;
        if (!stranded_start[i].compare_exchange_strong(start, ~std::uintptr_t(0), std::memory_order_acquire)) continue;
        const std::size_t length = stranded_length[i].load(std::memory_order_relaxed);
        if (os_unmap(reinterpret_cast<void*>(start), length) == 0) {
            stranded_start[i].store(0, std::memory_order_release);
            stranded_count.fetch_sub(1, std::memory_order_relaxed);
        } else {
            stranded_start[i].store(start, std::memory_order_release); // still refused: keep it
        }
    }
    stranded_range* r = stranded_overflow.exchange(nullptr, std::memory_order_acquire);
    while (r) {
        stranded_range* next = r->next;
        const std::size_t length = r->length;
        stranded_count.fetch_sub(1, std::memory_order_relaxed);
        if (os_unmap(r, length) != 0) strand(r, length);
        r = next;
    }
}
} // namespace detail
namespace memory {

/// \effects unmaps what `map(bytes, ...)` returned and drops its reservations (see `admit`) and anything
/// recorded for it (see `detail::unmap_observer`). Never allocates. When the kernel refuses to unmap
/// (ENOMEM at vm.max_map_count), the pages are released with MADV_DONTNEED and the range is kept,
/// listed, until a later unmap succeeds in unmapping it (`detail::stranded_count` tells how many).
inline void unmap(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    const std::size_t length = page_round(bytes == 0 ? 1 : bytes);
    detail::forget_reservations(p, length);
    // before munmap: once unmapped, the address may be reused by another thread's mapping
    if (const auto observer = detail::unmap_observer.load(std::memory_order_acquire)) observer(p, length);
    if (detail::os_unmap(p, length) != 0) {
        detail::strand(p, length);
        return;
    }
    detail::retry_stranded(); // a mapping fewer: an earlier refusal may now succeed
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
    if (first != 0) __atomic_fetch_add(c, char(0), __ATOMIC_RELAXED);  // the partial page before it
    for (std::size_t off = first; off < bytes; off += page) __atomic_fetch_add(c + off, char(0), __ATOMIC_RELAXED);
}

/// \effects keeps transparent huge pages off [p, p+bytes) (page-aligned), so that first-touch
/// placement works page by page. No effect when THP is off.
inline void forbid_huge_pages(void* p, std::size_t bytes) noexcept {
    if (topology::get().capabilities().thp != "never")
        detail::os_advise(p, page_round(bytes), detail::page_advice::no_huge_pages);
}

} // namespace memory
namespace detail {
inline detail::kernel_nodemask mask_of(const node_set& nodes, const topology& topo) {
    detail::kernel_nodemask mask;
    for (int id : nodes) mask.set(topo.at(id).os_index);
    return mask;
}
inline std::string describe(memory::policy_mode m, const node_set& nodes) {
    std::string s = std::string(name(m)) + " to node";
    s += nodes.size() == 1 ? " " : "s ";
    for (std::size_t i = 0; i < nodes.size(); ++i) s += (i ? "," : "") + std::to_string(nodes[i]);
    return s;
}
inline int error_node(const node_set& nodes) noexcept { return nodes.size() == 1 ? nodes[0] : -1; }

} // namespace detail
namespace memory {

/// \effects sets the memory policy of the untouched page range [p, p+bytes) (p page-aligned) so its
/// pages are allocated per `mode` over `nodes` when first touched. No capacity check (see `admit`).
/// \returns 0 or the kernel's errno; EINVAL for a range past the end of the address space.
inline int bind(void* p, std::size_t bytes, policy_mode mode, const node_set& nodes,
                const topology& topo = topology::get()) {
    if (bytes == 0) return 0;
    if (!page_range_fits(p, bytes)) return EINVAL;
    const auto mask = detail::mask_of(nodes, topo);
    return detail::os_mbind(p, page_round(bytes), static_cast<int>(mode), mask, 0);
}

/// \effects gives the pages of [p, p+bytes) the default policy again (first touch): with `p`
/// page-aligned, every page the range overlaps (as `bind`); otherwise the whole pages inside it, what
/// `replace` with `keep_policy` binds on such a range (no page the range only shares with its
/// neighbours loses its policy). \returns 0 (also when no whole page is inside) or the kernel's errno;
/// EINVAL for a range past the end of the address space.
inline int unbind(void* p, std::size_t bytes) noexcept {
    if (bytes == 0) return 0;
    const std::size_t page = detail::page_size();
    const auto start = reinterpret_cast<std::uintptr_t>(p);
    if (!page_range_fits(p, bytes)) return EINVAL;
    if (start % page == 0) return detail::os_mbind(p, page_round(bytes), detail::mpol_default, detail::kernel_nodemask{}, 0);
    const std::uintptr_t base = start - start % page, end = (start + bytes) / page * page;
    if (end - base <= page) return 0;
    return detail::os_mbind(reinterpret_cast<void*>(base + page), end - base - page, detail::mpol_default,
                            detail::kernel_nodemask{}, 0);
}

/// \effects faults in [p, p+bytes) (page-aligned, untouched, default policy) with consecutive runs of
/// pages on successive nodes: `weights[k]` pages on `nodes[k]`, then the next node, round robin. Done
/// from the calling thread under a temporary thread memory policy (restored before returning), so the
/// range stays one mapping however many runs it has (per-run mbind would split it into one VMA per
/// run and hit vm.max_map_count). The kernel's own MPOL_WEIGHTED_INTERLEAVE takes its weights from a
/// system-wide sysfs table, which a library must not own.
/// \returns 0; the errno of get_mempolicy with `failed_node` -1 (the thread's policy cannot be read, so
/// it could not be restored: nothing is changed or placed); or the errno of set_mempolicy with
/// `failed_node` set (pages placed so far stay; the thread's policy restored).
inline int weighted_fill(void* p, std::size_t bytes, const node_set& nodes, const std::vector<std::size_t>& weights,
                         int& failed_node, const topology& topo = topology::get()) {
    failed_node = -1;
    if (bytes == 0) return 0;
    forbid_huge_pages(p, bytes); // runs of single pages: no 2 MiB page may swallow a run
    const std::size_t page = detail::page_size();
    const std::size_t pages = page_round(bytes) / page;
    // A weight above the page count places the same pages as the page count (one round at most), so
    // clamped weights keep every sum below (nodes + 1) x pages: no wrap, whatever the user gave.
    std::vector<std::size_t> run(weights.size());
    std::size_t period = 0;
    for (std::size_t k = 0; k < weights.size(); ++k) period += run[k] = weights[k] < pages ? weights[k] : pages;
    int old_mode = 0;
    detail::kernel_nodemask old_mask;
    old_mask.words.assign(16, 0ul); // 1024 nodes
    if (const int err = detail::os_get_mempolicy(old_mode, old_mask)) return err;
    if (old_mode == detail::mpol_default) old_mask.words.clear();
    auto restore = [&] { detail::os_set_mempolicy(old_mode, old_mask); };
    auto* c = static_cast<volatile char*>(p);
    std::size_t start_of_run = 0;
    for (std::size_t k = 0; k < nodes.size(); ++k) {
        if (run[k] == 0) continue;
        detail::kernel_nodemask mask;
        mask.set(topo.at(nodes[k]).os_index);
        if (const int err = detail::os_set_mempolicy(detail::mpol_bind, mask)) {
            restore();
            failed_node = nodes[k];
            return err;
        }
        for (std::size_t base = 0; base < pages; base += period)
            for (std::size_t i = start_of_run; i < start_of_run + run[k] && base + i < pages; ++i)
                c[(base + i) * page] = 0;
        start_of_run += run[k];
    }
    restore();
    return 0;
}

} // namespace memory
} // namespace numaplace

#endif
