#ifndef NUMAPLACE_BASIC_PARTITION_HPP_INCLUDED
#define NUMAPLACE_BASIC_PARTITION_HPP_INCLUDED

/// \file
/// The untyped partition (`basic_partition`) and the values it is made of: blocks, page geometry, edge
/// alignment, and the interned layout. `partition<T>` (partition.hpp) is the typed face over it; see
/// docs/partition.md for the index space, purity, growth and edge rules.

#include "detail/config.hpp"
#include "detail/fork.hpp"
#include "detail/wide_math.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <new>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>
#include <vector>

namespace numaplace {

/// Block `k` of a partition: the indexes [begin, end) placed on and computed on `node`.
struct block {
    /// the node the block's pages are placed on and its indexes run on.
    int node = -1;
    /// first index of the block.
    std::size_t begin = 0;
    /// one past the last index.
    std::size_t end = 0;
    /// \returns `end - begin`.
    std::size_t size() const noexcept { return end - begin; }
    /// \returns whether the block holds no index.
    bool empty() const noexcept { return begin == end; }
    friend bool operator==(const block& a, const block& b) noexcept {
        return a.node == b.node && a.begin == b.begin && a.end == b.end;
    }
    friend bool operator!=(const block& a, const block& b) noexcept { return !(a == b); }
};

/// Transparent huge page mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
enum class thp_mode {
    never,   ///< no transparent huge pages
    madvise, ///< huge pages where asked for (MADV_HUGEPAGE)
    always   ///< huge pages wherever possible
};

/// The page sizes and THP mode a partition is split for: an input, never read while splitting.
struct page_geometry {
    std::size_t page = 4096;                ///< small page bytes (a power of two)
    std::size_t huge = std::size_t(2) << 20; ///< THP (PMD) huge page bytes (a power of two multiple of page)
    /// the THP mode the edges are chosen for.
    thp_mode thp = thp_mode::never;

    /// \returns the geometry of `topo`: for the running system its page size, THP huge page size and THP
    /// mode; for a synthetic or XML topology the defaults {4096, 2 MiB, never}.
    NUMAPLACE_DECL static page_geometry of(const topology& topo);
    friend bool operator==(const page_geometry& a, const page_geometry& b) noexcept {
        return a.page == b.page && a.huge == b.huge && a.thp == b.thp;
    }
    friend bool operator!=(const page_geometry& a, const page_geometry& b) noexcept { return !(a == b); }
    friend bool operator<(const page_geometry& a, const page_geometry& b) noexcept {
        return std::tie(a.page, a.huge, a.thp) < std::tie(b.page, b.huge, b.thp);
    }
};

/// The page grain a partition's pages are placed in (never where its compute edges fall: those are exact).
enum class edge_alignment {
    /// Huge pages when THP is `always` or `madvise` (geometry) and the smallest non-empty block spans at
    /// least eight huge pages; small pages otherwise. Why: a huge page straddling a block edge is faulted
    /// in whole by whichever block touches it first. Huge grains keep THP's TLB benefit for large arrays
    /// (one huge page per edge shared, < 1/8 of a block); small grains keep small arrays' pages on their
    /// blocks, and the placement then keeps huge pages off the range (MADV_NOHUGEPAGE).
    automatic,
    page, ///< pages placed in small pages
    huge  ///< pages placed in huge pages (one huge page per edge may be shared by two blocks)
};

/// What a partitioned range needs from THP for its edges to hold (see `basic_partition::huge_pages`).
enum class huge_page_advice {
    none,   ///< nothing: THP is off, or `always` and the edges are huge-page aligned
    forbid, ///< MADV_NOHUGEPAGE: THP is on and the edges are only small-page aligned
    request ///< MADV_HUGEPAGE: THP is `madvise` and the edges are huge-page aligned (blocks get huge pages)
};

namespace detail {

/// The immutable, interned part of a partition. Ordered by content (the registry key); `prefix` and
/// `smallest_weight` are derived from `weights`.
struct partition_layout {
    std::size_t element_size = 1;
    std::size_t row_length = 1; // elements per unit
    std::size_t unit_bytes = 1;
    edge_alignment edges = edge_alignment::page;
    page_geometry geometry;
    node_set nodes;
    std::vector<std::size_t> weights;
    std::vector<wide_uint> prefix; // prefix[k] = weights[0] + ... + weights[k-1]; nodes.size() + 1 entries
    std::size_t smallest_weight = 0; // smallest non-zero weight

    friend bool operator<(const partition_layout& a, const partition_layout& b) noexcept {
        return std::tie(a.element_size, a.row_length, a.edges, a.geometry, a.nodes.ids(), a.weights) <
               std::tie(b.element_size, b.row_length, b.edges, b.geometry, b.nodes.ids(), b.weights);
    }

    wide_uint total() const noexcept { return prefix.empty() ? 0 : prefix.back(); }

    /// \returns the placement grain in bytes (a page or a huge page) for a split of `units` units.
    std::size_t alignment_for(std::size_t units) const noexcept {
        switch (edges) {
        case edge_alignment::page: return geometry.page;
        case edge_alignment::huge: return geometry.huge;
        case edge_alignment::automatic: break;
        }
        if (geometry.thp == thp_mode::never || total() == 0) return geometry.page;
        // The smallest weighted share, floor(units x smallest / total) units, spans >= 8 huge pages
        // (its bytes fit: share <= units and units x unit_bytes fits in size_t).
        return mul_div(units, smallest_weight, total()) * unit_bytes / 8 >= geometry.huge ? geometry.huge : geometry.page;
    }
};

// The layout of every empty partition: made in static storage without allocating, never destroyed
// (valid during static destruction), without a C++ initialisation guard (fork hook: stage empty_layout).
inline lazy_global<const partition_layout>& empty_layout_cell() noexcept {
    static lazy_global<const partition_layout> cell; // constant-initialised: no guard
    return cell;
}
inline const partition_layout& empty_layout() noexcept {
    return empty_layout_cell().get([] {
        alignas(partition_layout) static unsigned char storage[sizeof(partition_layout)];
        return ::new (static_cast<void*>(storage)) partition_layout();
    });
}
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration empty_layout_fork NUMAPLACE_EARLY_INIT{
    fork_stage::empty_layout, lazy_global_hooks<const partition_layout, &empty_layout_cell>::hook()};
#endif

} // namespace detail

/// The untyped partition: a handle (layout, unit count, clip) whose units are `unit_bytes()` bytes. It
/// is what `partition<T>` is made of and what the placement and the loop machinery work on; user code
/// normally uses `partition<T>`. Trivially copyable; a moved-from or default-constructed one is valid.
class basic_partition {
public:
    /// An empty partition: no node, no block, size 0.
    basic_partition() noexcept : layout_(&detail::empty_layout()) {}

    /// \effects splits `n` units of `row_length` elements of `element_size` bytes over `nodes` with
    /// `weights` (empty: cores per node of `topo`), edges per `edges` and `geometry`.
    /// \throws unknown_node for a node not in `topo`; invalid_placement (saying why) for an empty node
    /// set, a weight count that does not match, all-zero weights, element size or row length 0,
    /// n × row_length × element_size beyond SIZE_MAX, or a geometry whose sizes are not powers of two
    /// with huge >= page.
    NUMAPLACE_DECL basic_partition(std::size_t n, std::size_t element_size, std::size_t row_length, const node_set& nodes,
                                   std::vector<std::size_t> weights, edge_alignment edges, const topology& topo,
                                   const page_geometry& geometry);

    /// \returns the number of indexes (units, or elements for an `elements()` view), clipped.
    std::size_t size() const noexcept { return count_; }
    /// \returns whether `size() == 0`.
    bool empty() const noexcept { return count_ == 0; }
    /// \returns the number of units the split is made for (a container's capacity in units).
    std::size_t units() const noexcept { return units_; }
    /// \returns whether indexes are elements of a rows layout (an `elements()` view of a rows partition).
    bool indexes_elements() const noexcept { return elements_; }
    /// \returns the bytes of one element.
    std::size_t element_size() const noexcept { return layout_->element_size; }
    /// \returns elements per index: the layout's row length, or 1 for an element view.
    std::size_t row_length() const noexcept { return elements_ ? 1 : layout_->row_length; }
    /// \returns elements per unit of the layout (1 for element partitions), in either view.
    std::size_t unit_length() const noexcept { return layout_->row_length; }
    /// \returns the bytes of one unit (element size × layout row length).
    std::size_t unit_bytes() const noexcept { return layout_->unit_bytes; }
    /// \returns the number of elements the indexes cover (size() × row_length()).
    std::size_t element_count() const noexcept { return elements_ ? count_ : count_ * layout_->row_length; }
    /// \returns the placement grain in bytes (a page or a huge page of `geometry()`): pages are placed in
    /// grains of this size from the array's start, which an allocation split by this partition is aligned to.
    std::size_t alignment() const noexcept { return layout_->alignment_for(units_); }
    /// \returns what the range needs from THP for the edges to hold (see `huge_page_advice`).
    huge_page_advice huge_pages() const noexcept {
        const auto& g = layout_->geometry;
        if (g.thp == thp_mode::never || layout_->nodes.empty()) return huge_page_advice::none;
        if (alignment() < g.huge) return huge_page_advice::forbid;
        return g.thp == thp_mode::madvise ? huge_page_advice::request : huge_page_advice::none;
    }
    /// \returns the page geometry the split was made for.
    const page_geometry& geometry() const noexcept { return layout_->geometry; }
    /// \returns the edge alignment asked for (`automatic`, `page`, `huge_page`).
    edge_alignment edge_policy() const noexcept { return layout_->edges; }
    /// \returns the nodes, in block order.
    const node_set& nodes() const noexcept { return layout_->nodes; }
    /// \returns the weights, one per node.
    const std::vector<std::size_t>& weights() const noexcept { return layout_->weights; }

    /// \returns the number of blocks: one per node of `nodes()` (some may be empty).
    std::size_t block_count() const noexcept { return layout_->nodes.size(); }
    /// \returns block `k` (< block_count()) in this partition's indexes, clipped to size().
    numaplace::block block(std::size_t k) const noexcept {
        std::size_t b = unit_edge(k), e = unit_edge(k + 1);
        if (elements_) {
            b *= layout_->row_length; // cannot overflow: units_ * unit_bytes fits in size_t
            e *= layout_->row_length;
        }
        return numaplace::block{layout_->nodes[k], std::min(b, count_), std::min(e, count_)};
    }
    /// \returns every block, in node order.
    NUMAPLACE_DECL std::vector<numaplace::block> blocks() const;
    /// \returns the block that contains `index` (< size()); an empty block of node -1 otherwise.
    numaplace::block block_of(std::size_t index) const noexcept {
        if (index >= count_) return numaplace::block{};
        std::size_t lo = 0, hi = block_count(); // the first k with block(k).end > index
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo) / 2;
            if (block(mid).end <= index) lo = mid + 1;
            else hi = mid;
        }
        return block(lo);
    }
    /// \returns the block of `node_id`, empty if the node is not part of the partition.
    numaplace::block block_on(int node_id) const noexcept {
        for (std::size_t k = 0; k < block_count(); ++k)
            if (layout_->nodes[k] == node_id) return block(k);
        return numaplace::block{node_id, 0, 0};
    }

    /// \returns the bytes [first, second) whose pages block `k` owns in a range of `bytes` bytes split by
    /// this partition (its `for_bytes(bytes)`) that starts `lead` bytes (< alignment()) into a grain:
    /// offsets from that grain's start. The rule: a grain (`alignment()` bytes, at an address that is a
    /// multiple of it) belongs to the block holding its first byte in the range (the grain holding the
    /// range's first byte to the first block), the last grain ends at the range's end rounded up to a
    /// small page. So each inner edge shares at most one grain between two blocks, and a block smaller
    /// than a grain may own none. numaplace's allocations start on a grain (`lead` 0); `where` and
    /// `replace` pass a range's own. Empty for k >= block_count().
    std::pair<std::size_t, std::size_t> page_bytes(std::size_t k, std::size_t bytes, std::size_t lead = 0) const noexcept {
        if (k >= block_count()) return {0, 0};
        return {page_edge(k, bytes, lead), page_edge(k + 1, bytes, lead)};
    }

    /// \returns the same layout split for `m` indexes (units; elements for an element view, then split as
    /// ceil(m / unit_length()) whole units). \throws invalid_placement when m units overflow the bytes, or
    /// for m > 0 on an empty (default-constructed) partition: it has no node to put the indexes on.
    NUMAPLACE_DECL basic_partition resized(std::size_t m) const;
    /// \returns the same blocks (same split, same edges) cut at `m` indexes: indexes at or past `m` are
    /// dropped. No effect when m >= size().
    basic_partition clipped(std::size_t m) const noexcept {
        basic_partition p = *this;
        p.count_ = std::min(m, count_);
        return p;
    }
    /// \returns the same blocks over element indexes: block k covers elements [b × row_length, e × row_length)
    /// of its units [b, e). Itself for an element view.
    basic_partition elements() const noexcept {
        basic_partition p = *this;
        if (!elements_ && layout_->row_length != 1) {
            p.elements_ = true;
            p.count_ = count_ * layout_->row_length;
        }
        return p;
    }
    /// \returns the split of an allocation of `bytes`: ceil(bytes / unit_bytes()) units, unit indexes.
    basic_partition for_bytes(std::size_t bytes) const noexcept {
        basic_partition p = *this;
        p.elements_ = false;
        p.units_ = p.count_ = bytes / layout_->unit_bytes + (bytes % layout_->unit_bytes != 0);
        return p;
    }
    /// \returns the same nodes, weights and unit count for units of `row_length` elements of `element_size`
    /// bytes, edges per `edges` in `geometry`: block k holds the same unit indexes (edges depend only on
    /// the count and the weights), as an unclipped unit-indexed partition. No topology is read.
    /// \throws invalid_placement (as the constructor) for a size 0, a geometry that is not powers of two,
    /// or bytes beyond SIZE_MAX.
    NUMAPLACE_DECL basic_partition remade(std::size_t element_size, std::size_t row_length, edge_alignment edges,
                                          const page_geometry& geometry) const;
    /// \returns the partition of `n` units whose block k is [cuts[k], cuts[k + 1]) exactly (cuts has
    /// block_count() + 1 non-decreasing entries from 0 to n), same nodes, unit, geometry and edge policy:
    /// its weights are the blocks' sizes, so growth (`resized`) scales them. A partition of 0 units keeps
    /// this one's weights. \throws invalid_placement for cuts that are not that.
    NUMAPLACE_DECL basic_partition with_cuts(const std::vector<std::size_t>& cuts) const;

    /// \returns whether both use the same layout (same nodes, weights, unit, geometry, edge policy).
    bool same_layout(const basic_partition& other) const noexcept { return layout_ == other.layout_; }

    /// Equal: same layout, same split, same clip, same kind of index.
    friend bool operator==(const basic_partition& a, const basic_partition& b) noexcept {
        return a.layout_ == b.layout_ && a.units_ == b.units_ && a.count_ == b.count_ && a.elements_ == b.elements_;
    }
    friend bool operator!=(const basic_partition& a, const basic_partition& b) noexcept { return !(a == b); }

    /// \returns cores per node of `nodes` (0 for memory-only nodes).
    NUMAPLACE_DECL static std::vector<std::size_t> core_weights(const topology& topo, const node_set& nodes);

private:
    // The unit and geometry of `l`, checked: element size and row length not 0, a row's bytes within
    // SIZE_MAX, page sizes powers of two with huge >= page.
    NUMAPLACE_DECL static void set_unit(detail::partition_layout& l, std::size_t element_size, std::size_t row_length,
                                        edge_alignment edges, const page_geometry& g);
    // The weights of `l` and what derives from them (prefix sums, the smallest non-zero weight).
    NUMAPLACE_DECL static void set_weights(detail::partition_layout& l, std::vector<std::size_t> weights);
    NUMAPLACE_DECL static void check_bytes(std::size_t units, std::size_t unit_bytes);
    // Edge k (0..block_count()) in units of the split of units_: the exact cumulative weighted share
    // rounded up, ceil(units_ x prefix[k] / total). Block k then holds its exact share to within one unit,
    // and unit 0 is always in the first weighted block (the owner of a small allocation's only page).
    std::size_t unit_edge(std::size_t k) const noexcept {
        const auto& l = *layout_;
        if (k >= l.nodes.size()) return units_;
        return detail::mul_div_up(units_, l.prefix[k], l.total());
    }
    // Offset (from the grain holding the range's first byte, `lead` bytes before it) of the first grain
    // block j owns: edge j's first byte rounded up to a grain, at most the range's end rounded up to a
    // small page (j = block_count(): that end). Exact in 128 bits; saturates at SIZE_MAX.
    std::size_t page_edge(std::size_t j, std::size_t bytes, std::size_t lead) const noexcept {
        const detail::wide_uint page = layout_->geometry.page, grain = alignment();
        const detail::wide_uint end = (static_cast<detail::wide_uint>(lead) + bytes + page - 1) / page * page;
        detail::wide_uint at = 0;
        const std::size_t u = j < block_count() ? unit_edge(j) : 0;
        if (j >= block_count()) at = end;
        else if (u != 0) // an edge at index 0 leaves the range's first grain to the blocks after it
            at = std::min(end, (lead + static_cast<detail::wide_uint>(u) * layout_->unit_bytes + grain - 1) / grain * grain);
        return at > std::numeric_limits<std::size_t>::max() ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(at);
    }

    const detail::partition_layout* layout_;
    std::size_t units_ = 0;
    std::size_t count_ = 0;
    bool elements_ = false;
};

static_assert(std::is_trivially_copyable<basic_partition>::value, "partition handles are trivially copyable");
static_assert(std::is_nothrow_copy_constructible<basic_partition>::value, "");

} // namespace numaplace

#if NUMAPLACE_DEFINITIONS
#include "detail/basic_partition_impl.hpp"
#endif

#endif
