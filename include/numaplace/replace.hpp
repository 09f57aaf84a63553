#ifndef NUMAPLACE_REPLACE_HPP_INCLUDED
#define NUMAPLACE_REPLACE_HPP_INCLUDED

/// \file
/// `replace`: moves the pages of existing data so they match a target placement (a partition: block k to
/// node k; a node; an interleave), contents kept, and reports what moved page by page: every page that
/// could not move is counted with its errno, never silently. No page outside [begin, end) moves but the
/// partial first and last pages. The policy is set by default only on memory numaplace owns (a
/// partitioned container's buffer): a policy outlives the object (`replace_options::keep_policy`).
/// Values in replace_report.hpp, the plan and engine in detail/replace_plan.hpp and
/// detail/replace_engine.hpp; design, rules and measurements in docs/replace.md.

#include "detail/replace_engine.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "placement.hpp"
#include "replace_report.hpp"
#include "topology.hpp"

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace numaplace {

/// \effects moves the pages [p, p + bytes) overlaps to `target.node()`; with `opts.keep_policy` (not
/// by default) binds the whole pages inside the range to it (or prefers it, per `target.policy()`).
/// \returns what moved. \throws replace_error (strict `target`) when a page could not move, is not
/// mapped, or the policy was refused; invalid_placement when the range overlaps a partitioned
/// container's buffer or runs past the end of the address space.
inline replace_report replace(const void* p, std::size_t bytes, const on_node& target, const replace_options& opts = {}) {
    detail::refuse_partitioned_overlap(p, bytes);
    return detail::run_replace(detail::node_plan(p, bytes, target), target.on_refusal(), opts);
}

/// \effects moves the pages [p, p + bytes) overlaps round robin over `target.nodes()` as the kernel's
/// MPOL_INTERLEAVE would place them (page at address a on node (a / page) mod n, in OS-index order);
/// with `opts.keep_policy` sets that policy. Weighted: runs of weights[k] pages on nodes[k] from the
/// range's first page, in node-id order; no kernel policy expresses them, so none is set even with
/// `opts.keep_policy` (the range's policy is left as it is; `policy_kept` false, `policy_errno` 0: not a
/// refusal, so the report can be `complete()`). \returns what moved. \throws as the `on_node` overload.
inline replace_report replace(const void* p, std::size_t bytes, const interleaved& target, const replace_options& opts = {}) {
    detail::refuse_partitioned_overlap(p, bytes);
    return detail::run_replace(detail::interleave_plan(p, bytes, target), target.on_refusal(), opts);
}

/// \effects moves the pages of the `part.element_count()` elements at `data` so that the page holding
/// element i's page start is on the node of i's block (every page of block k on node k when `data` is
/// aligned as numaplace allocations are); with `opts.keep_policy` binds each block's whole pages to its
/// node, one mbind per block. \returns what moved.
/// \throws unknown_node (a node `part` has and this topology has not) before anything changes;
/// replace_error (strict) when a page could not move or the policy was refused; invalid_placement as
/// the `on_node` overload.
template <class T>
replace_report replace(const T* data, const partition<T>& part, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    const topology& topo = topology::get();
    detail::check_nodes(topo, part.nodes());
    const partition<T> e = part.elements();
    const std::size_t bytes = e.size() * sizeof(T);
    detail::refuse_partitioned_overlap(data, bytes);
    detail::replace_plan plan = detail::make_plan(data, bytes, topo);
    plan.what = "partition over nodes " + detail::nodes_text(part.nodes());
    if (plan.pages) detail::plan_partition(plan, e.untyped());
    return detail::run_replace(plan, fb, opts);
}

/// \effects for a contiguous container (`data()`, `size()`) whose allocator is not partitioned:
/// `replace(c.data(), c.size() * sizeof(T), target, opts)`. \returns its report.
template <class Container, class Target,
          class = std::enable_if_t<std::is_same<Target, on_node>::value || std::is_same<Target, interleaved>::value>,
          class = decltype(std::declval<Container&>().data(), std::declval<Container&>().size())>
replace_report replace(Container& c, const Target& target, const replace_options& opts = {}) {
    static_assert(!detail::is_partitioned_container<Container>::value,
                  "a partitioned container is re-placed by a partition (its loop follows its partition)");
    return replace(static_cast<const void*>(c.data()), c.size() * sizeof(*c.data()), target, opts);
}

/// \effects re-places a contiguous container by `part`.
/// - Allocator partitioned (`partitioned_allocator<T>`, `partitioned_vector<T>`): moves all of c's
///   capacity by `part`'s layout (its nodes, weights, rows, edges; its size does not matter) split as the
///   allocator splits an allocation of that capacity, sets the policy per block (the buffer is
///   numaplace's: `keep_policy` defaults to true), and records the layout for c's buffer:
///   `partition_of(c)`, `parallel_for(c, ...)`, `first_touch(c)` follow it from then on (until c
///   reallocates, which places the new buffer by the allocator again). Re-placing by the allocator's
///   own layout drops the record. An empty container: nothing to move, nothing recorded.
/// - Any other allocator: `replace(c.data(), part)`, which requires `part.element_count() == c.size()`.
/// \returns what moved.
/// \throws unknown_node, invalid_placement with c unchanged (its record, its pages): a node `part` has
/// and this topology has not; a partitioned buffer below one page (in the node heap of the allocator's
/// home node); an empty partition (no node) for a partitioned container; a partition of another size
/// for a plain container. replace_error (strict) as above: the record is updated by then, so the policy
/// and the moved pages follow the new layout even when some pages could not move (the report says which).
template <class Container, class T,
          class = decltype(std::declval<Container&>().data(), std::declval<Container&>().capacity())>
replace_report replace(Container& c, const partition<T>& part, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    static_assert(std::is_same<typename Container::value_type, T>::value,
                  "replace: the partition's element type must be the container's");
    if constexpr (detail::is_partitioned_container<Container>::value) {
        const topology& topo = topology::get();
        const std::size_t bytes = c.capacity() * sizeof(T);
        if (part.nodes().empty())
            detail::throw_invalid("replace: an empty partition (no node) cannot place a container's pages");
        detail::check_nodes(topo, part.nodes());
        if (bytes == 0) return replace_report{};
        detail::placed_buffers::entry entry;
        if (!detail::placed_buffers::instance().find(c.data(), entry))
            detail::throw_invalid("replace: a partitioned container of " + std::to_string(bytes) +
                                  " bytes (below one page) lives in its home node's small-object heap and cannot be re-placed");
        const auto allocator = c.get_allocator();
        const bool own = part.untyped().same_layout(allocator.placement().partition());
        // The allocator's rule: block edges from the split; the last non-empty block takes the tail page.
        detail::replace_plan plan = detail::make_plan(c.data(), memory::page_round(bytes), topo);
        plan.what = "partition over nodes " + detail::nodes_text(part.nodes());
        plan.owned = true;
        detail::plan_partition(plan, part.untyped().for_bytes(bytes).elements());
        // Everything is checked: from here on the record follows the new layout, whatever the kernel does.
        detail::placed_buffers::instance().relayout(c.data(), own ? allocator.placement().partition() : part.untyped(), !own);
        return detail::run_replace(plan, fb, opts);
    } else {
        if (part.element_count() != c.size())
            detail::throw_invalid("replace: a partition of " + std::to_string(part.element_count()) +
                                  " elements for a container of " + std::to_string(c.size()));
        return replace(static_cast<const T*>(c.data()), part, fb, opts);
    }
}

/// \effects `replace(data, rows.elements(), fb, opts)`: the matrix of a row partition. \returns what moved.
/// \throws as that overload.
template <class T>
replace_report replace(const T* data, const row_partition<T>& rows, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    return replace(data, rows.elements(), fb, opts);
}
/// \effects `replace(c, rows.elements(), fb, opts)`. \returns what moved. \throws as that overload.
template <class Container, class T,
          class = decltype(std::declval<Container&>().data(), std::declval<Container&>().capacity())>
replace_report replace(Container& c, const row_partition<T>& rows, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    return replace(c, rows.elements(), fb, opts);
}

} // namespace numaplace

#endif
