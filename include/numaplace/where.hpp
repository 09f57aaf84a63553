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
#include "error.hpp"
#include "partition.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace numaplace {

/// Pages of a range per node.
struct page_histogram {
    /// the page size the counts are in.
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

/// Pages of a range compared with where they should be (a partition's blocks, or any element-to-node
/// map). For a partition: a page is local when it is on the node of the block that owns it (the block
/// holding the first byte of its placement grain, `partition::alignment()`), shared when it is so and its
/// grain also holds bytes of another block (at most one grain per block edge), remote otherwise.
struct partition_locality {
    /// pages per node, of the whole range.
    page_histogram histogram;
    std::size_t local = 0;    ///< touched pages on their owner's node, holding one block's bytes only
    std::size_t remote = 0;   ///< touched pages elsewhere than their owner's node
    std::size_t shared = 0;   ///< touched pages on their owner's node whose grain holds two blocks' bytes
    /// \returns (local + shared) / touched: pages on their owner's node (1 when nothing is touched).
    double fraction() const noexcept {
        const std::size_t t = local + shared + remote;
        return t == 0 ? 1.0 : static_cast<double>(local + shared) / static_cast<double>(t);
    }
};

namespace detail {
// Queries pages in batches; calls f(page_index, status) for every page of [p, p+bytes).
template <class F>
void for_each_page_node(const void* p, std::size_t bytes, F&& f) {
    const std::size_t page = page_size();
    if (!range_end_fits(p, bytes))
        throw std::invalid_argument("numaplace::where: a range of " + std::to_string(bytes) +
                                    " bytes runs past the end of the address space");
    const auto start = reinterpret_cast<std::uintptr_t>(p) / page * page;
    const auto end = round_up(reinterpret_cast<std::uintptr_t>(p) + bytes, page);
    const std::size_t pages = bytes == 0 ? 0 : (end - start) / page;
    constexpr std::size_t batch = 4096;
    std::vector<void*> addresses(std::min(batch, pages));
    std::vector<int> status(addresses.size());
    for (std::size_t first = 0; first < pages; first += batch) {
        const std::size_t count = std::min(batch, pages - first);
        for (std::size_t i = 0; i < count; ++i) addresses[i] = reinterpret_cast<void*>(start + (first + i) * page);
        int err = os_query_pages(count, addresses.data(), status.data());
        if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace::where: move_pages");
        for (std::size_t i = 0; i < count; ++i) f(first + i, status[i]);
    }
}
} // namespace detail

namespace detail {
// Counts one page's status into `h`; \returns its node id, or -1 (untouched, or a node not ours).
inline int count_page(page_histogram& h, int status, const topology& topo) noexcept {
    ++h.pages;
    if (status < 0) { // -ENOENT: no page; -EFAULT: not mapped; both mean "no physical page here"
        ++h.untouched;
        return -1;
    }
    const int id = topo.from_os_index(static_cast<unsigned>(status));
    if (id < 0) ++h.elsewhere;
    else ++h.per_node[static_cast<std::size_t>(id)];
    return id;
}
inline page_histogram empty_histogram(const topology& topo) {
    page_histogram h;
    h.page_size = page_size();
    h.per_node.assign(topo.size(), 0);
    return h;
}
} // namespace detail

/// \returns the page histogram of [p, p+bytes) (every page the range overlaps).
/// \throws std::system_error when the kernel refuses the query (`capabilities().page_query`);
/// std::invalid_argument when the range runs past the end of the address space.
inline page_histogram where(const void* p, std::size_t bytes, const topology& topo = topology::get()) {
    page_histogram h = detail::empty_histogram(topo);
    detail::for_each_page_node(p, bytes, [&](std::size_t, int status) { detail::count_page(h, status, topo); });
    return h;
}

/// \returns the histogram of the `count` elements at `data` and how many touched pages are on the node
/// `expected_node(i)` names for the element `i` that owns the page.
/// `expected_node` is any callable `int(std::size_t i)`: `i` is the index (in [0, count)) of the element
/// at the page's start (0 for the first page, which may start before `data`); it returns the node id the
/// page should be on (-1: nowhere, counted remote). It is called once per touched page, in address
/// order, from the calling thread. The partition overload below passes the node of the element's block;
/// a benchmark can pass the node of the thread that computes element i (e.g. row i / N of a matrix).
template <class T, class ExpectedNode>
partition_locality locality(const T* data, std::size_t count, ExpectedNode&& expected_node,
                            const topology& topo = topology::get()) {
    partition_locality r;
    r.histogram = detail::empty_histogram(topo);
    if (count == 0) return r;
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(T))
        throw std::invalid_argument("numaplace::locality: " + std::to_string(count) + " elements of " +
                                    std::to_string(sizeof(T)) + " bytes exceed SIZE_MAX bytes");
    const std::size_t page = detail::page_size();
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t first_page = base / page * page;
    detail::for_each_page_node(data, count * sizeof(T), [&](std::size_t i, int status) {
        const int id = detail::count_page(r.histogram, status, topo);
        if (status < 0) return;
        const std::uintptr_t addr = first_page + i * page;
        const std::size_t index = std::min(addr <= base ? 0 : (addr - base) / sizeof(T), count - 1);
        (id >= 0 && id == expected_node(index) ? r.local : r.remote) += 1;
    });
    return r;
}

namespace detail {
/// \returns the locality of the elements [0, e.size()) at `data` against the element partition `e`: the
/// owner of a small page is the block owning its grain (`basic_partition::page_bytes` with the range's
/// own lead into its first grain, as the placement, `first_touch` and `replace` have it).
template <class T>
partition_locality partition_where(const T* data, const basic_partition& e, const topology& topo) {
    partition_locality r;
    r.histogram = empty_histogram(topo);
    const std::size_t count = e.size(), s = sizeof(T);
    if (count == 0) return r;
    const std::size_t bytes = count * s, allocated = e.units() * e.unit_bytes(); // fit: checked when made
    const std::size_t grain = e.alignment(), page = page_size(), blocks = e.block_count();
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    const std::size_t lead = base % grain; // offsets below are from the grain holding data[0]
    std::vector<std::size_t> owned(blocks + 1); // owned[k]: where block k's grains start
    std::vector<std::size_t> starts;            // where each non-empty block but the first starts
    for (std::size_t k = 0; k < blocks; ++k) {
        owned[k] = e.page_bytes(k, allocated, lead).first;
        const block b = e.block(k);
        if (!b.empty() && b.begin != 0) starts.push_back(lead + b.begin * s);
    }
    owned[blocks] = e.page_bytes(blocks - 1, allocated, lead).second;
    const std::uintptr_t origin = base - lead, first_page = base / page * page;
    std::size_t k = 0;
    for_each_page_node(data, bytes, [&](std::size_t i, int status) {
        const int id = count_page(r.histogram, status, topo);
        if (status < 0) return;
        const std::size_t at = first_page + i * page - origin; // >= 0: origin <= first_page
        const std::size_t g = at / grain * grain, g_end = std::min(g + grain, lead + bytes);
        while (k + 1 < blocks && owned[k + 1] <= g) ++k; // pages come in address order
        const auto next = std::upper_bound(starts.begin(), starts.end(), g);
        const bool two = next != starts.end() && *next < g_end;
        if (id < 0 || id != e.nodes()[k]) ++r.remote;
        else if (two) ++r.shared;
        else ++r.local;
    });
    return r;
}
inline void check_where_length(std::size_t count, std::size_t extent) {
    if (count != extent)
        throw_invalid("numaplace::where: a range of " + std::to_string(count) + " elements checked against a partition of " +
                      std::to_string(extent) + " elements");
}
} // namespace detail

/// \returns the histogram of the `part.element_count()` elements at `data` and how many touched pages are
/// local, shared or remote (see `partition_locality`). `data` is where an allocation split by `part`
/// starts (numaplace's allocations align it to `part.alignment()`). `data` and `part` must share the
/// element type (another one does not compile).
/// \throws std::system_error when the kernel refuses the page query.
template <class T>
partition_locality where(const T* data, const partition<T>& part, const topology& topo = topology::get()) {
    return detail::partition_where(data, part.untyped(), topo);
}
/// \returns the same for a matrix's `rows.element_count()` elements.
template <class T>
partition_locality where(const T* data, const row_partition<T>& rows, const topology& topo = topology::get()) {
    return where(data, rows.elements(), topo);
}
/// \returns the same for a range of `count` elements at `data`, which must be the partition's extent.
/// \throws invalid_placement when `count != part.element_count()` (a vector of m against a partition of
/// m x n rows, say); std::system_error as above.
template <class T>
partition_locality where(const T* data, std::size_t count, const partition<T>& part, const topology& topo = topology::get()) {
    detail::check_where_length(count, part.element_count());
    return where(data, part, topo);
}
/// \returns the same for a matrix of `count` elements. \throws invalid_placement when `count !=
/// rows.element_count()`.
template <class T>
partition_locality where(const T* data, std::size_t count, const row_partition<T>& rows, const topology& topo = topology::get()) {
    detail::check_where_length(count, rows.element_count());
    return where(data, rows.elements(), topo);
}

/// \returns the histogram of a contiguous container's elements (`c.data()`, `c.size()`).
template <class Container>
auto where(const Container& c) -> decltype(c.data(), c.size(), page_histogram()) {
    return where(static_cast<const void*>(c.data()), c.size() * sizeof(*c.data()));
}

} // namespace numaplace

#endif
