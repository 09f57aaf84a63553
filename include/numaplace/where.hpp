#ifndef NUMAPLACE_WHERE_HPP_INCLUDED
#define NUMAPLACE_WHERE_HPP_INCLUDED

/// \file
/// Where the pages of a range actually are: a page histogram from `move_pages(2)` with `nodes = NULL`,
/// which only queries. It never moves a page and never faults one in (an untouched page is reported as
/// untouched, not allocated by asking).
///
/// Caveat, kernel.numa_balancing: while automatic NUMA balancing is on (see `capabilities()`), the kernel
/// periodically unmaps pages to sample accesses; before Linux 6.5 move_pages reports such a page as not
/// present (-ENOENT), so `untouched` can include pages that exist until their next access. Balancing
/// also migrates pages after placement. Turn it off (`sysctl kernel.numa_balancing=0`) where exact
/// placement matters; numaplace's guests do.

#include "detail/linux.hpp"
#include "partition.hpp"
#include "topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <system_error>
#include <vector>

namespace numaplace {

/// Pages of a range per node.
struct page_histogram {
    std::size_t page_size = 0;
    std::size_t pages = 0;             ///< pages the range spans
    std::size_t untouched = 0;         ///< not yet faulted in (no physical page)
    std::size_t elsewhere = 0;         ///< on a node this process may not use (outside its cpuset)
    std::vector<std::size_t> per_node; ///< indexed by node id

    /// \returns pages that have a physical page.
    std::size_t touched() const noexcept { return pages - untouched; }
    /// \returns pages on `node` (0 for an id out of range).
    std::size_t on(int node) const noexcept {
        return node >= 0 && static_cast<std::size_t>(node) < per_node.size() ? per_node[static_cast<std::size_t>(node)] : 0;
    }
    /// \returns the fraction of touched pages that are on `node` (1 when nothing is touched).
    double locality(int node) const noexcept {
        return touched() == 0 ? 1.0 : static_cast<double>(on(node)) / static_cast<double>(touched());
    }
};

/// Pages of a range compared with a partition: a page is local when it is on the node of the block
/// that owns the page's first byte.
struct partition_locality {
    page_histogram histogram;
    std::size_t local = 0;    ///< touched pages on their block's node
    std::size_t remote = 0;   ///< touched pages elsewhere
    /// \returns local / touched (1 when nothing is touched).
    double fraction() const noexcept {
        std::size_t t = local + remote;
        return t == 0 ? 1.0 : static_cast<double>(local) / static_cast<double>(t);
    }
};

namespace detail {
// Queries pages in batches; calls f(page_index, status) for every page of [p, p+bytes).
template <class F>
void for_each_page_node(const void* p, std::size_t bytes, F&& f) {
    const std::size_t page = page_size();
    const auto start = reinterpret_cast<std::uintptr_t>(p) / page * page;
    const auto end = round_up(reinterpret_cast<std::uintptr_t>(p) + bytes, page);
    const std::size_t pages = bytes == 0 ? 0 : (end - start) / page;
    constexpr std::size_t batch = 4096;
    std::vector<void*> addresses(std::min(batch, pages));
    std::vector<int> status(addresses.size());
    for (std::size_t first = 0; first < pages; first += batch) {
        const std::size_t count = std::min(batch, pages - first);
        for (std::size_t i = 0; i < count; ++i) addresses[i] = reinterpret_cast<void*>(start + (first + i) * page);
        int err = sys_move_pages_query(count, addresses.data(), status.data());
        if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace::where: move_pages");
        for (std::size_t i = 0; i < count; ++i) f(first + i, status[i]);
    }
}
} // namespace detail

/// \returns the page histogram of [p, p+bytes) (every page the range overlaps).
/// \throws std::system_error when the kernel refuses the query (`capabilities().page_query`).
inline page_histogram where(const void* p, std::size_t bytes, const topology& topo = topology::get()) {
    page_histogram h;
    h.page_size = detail::page_size();
    h.per_node.assign(topo.size(), 0);
    detail::for_each_page_node(p, bytes, [&](std::size_t, int status) {
        ++h.pages;
        if (status < 0) {
            ++h.untouched; // -ENOENT: no page; -EFAULT: not mapped; both mean "no physical page here"
            return;
        }
        int id = topo.from_os_index(static_cast<unsigned>(status));
        if (id < 0) ++h.elsewhere;
        else ++h.per_node[static_cast<std::size_t>(id)];
    });
    return h;
}

/// \returns the histogram of the `part.size()` elements at `data` and how many touched pages are on
/// the node of the block that owns them.
template <class T>
partition_locality where(const T* data, const partition& part, const topology& topo = topology::get()) {
    partition_locality r;
    r.histogram.page_size = detail::page_size();
    r.histogram.per_node.assign(topo.size(), 0);
    const std::size_t bytes = part.size() * sizeof(T);
    const std::size_t page = detail::page_size();
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t first_page = base / page * page;
    detail::for_each_page_node(data, bytes, [&](std::size_t i, int status) {
        ++r.histogram.pages;
        if (status < 0) { ++r.histogram.untouched; return; }
        int id = topo.from_os_index(static_cast<unsigned>(status));
        if (id < 0) ++r.histogram.elsewhere;
        else ++r.histogram.per_node[static_cast<std::size_t>(id)];
        std::uintptr_t addr = first_page + i * page;
        std::size_t index = addr <= base ? 0 : (addr - base) / sizeof(T);
        if (index >= part.size()) index = part.size() - 1;
        (id >= 0 && id == part.block_of(index).node ? r.local : r.remote) += 1;
    });
    return r;
}

/// \returns the histogram of a contiguous container's elements (`c.data()`, `c.size()`).
template <class Container>
auto where(const Container& c) -> decltype(c.data(), c.size(), page_histogram()) {
    return where(static_cast<const void*>(c.data()), c.size() * sizeof(*c.data()));
}

} // namespace numaplace

#endif
