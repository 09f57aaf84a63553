#ifndef NUMAPLACE_DETAIL_REPLACE_PLAN_HPP_INCLUDED
#define NUMAPLACE_DETAIL_REPLACE_PLAN_HPP_INCLUDED

// What `replace` (replace.hpp) will do to each page: the plan of a range (its pages, the target node of
// every page, the policy to set) for a partition, a node or an interleave, made and checked before
// anything changes. detail/replace_engine.hpp carries it out.

#include "../error.hpp"
#include "../memory.hpp"
#include "../placement.hpp"
#include "../topology.hpp"
#include "buffer_record.hpp"
#include "linux.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// The target of every page: runs of pages with one node (partition, node) or a node per page (interleave).
struct replace_plan {
    const topology* topo = nullptr;
    std::uintptr_t first = 0; // address of page 0 (page-aligned)
    std::uintptr_t begin = 0; // the range [begin, end)
    std::uintptr_t end = 0;
    std::size_t pages = 0;
    std::vector<std::pair<std::size_t, int>> runs; // page index where each run starts, and its node id
    std::vector<int> interleave; // interleave: node ids in OS-index order, page at a on ((a / page) % size)
    node_set interleave_nodes; // interleave: the policy's nodes
    memory::policy_mode mode = memory::policy_mode::bind;
    bool policy = true;  // false: no kernel policy expresses the target (weighted interleave)
    bool owned = false;  // numaplace's mapping, unmapped with its object: the policy is kept by default
    std::string what;    // for messages

    std::size_t page_size() const noexcept { return numaplace::detail::page_size(); }
    std::uintptr_t address(std::size_t i) const noexcept { return first + i * page_size(); }
    std::uintptr_t last() const noexcept { return address(pages); } // the end of the last page
    std::uintptr_t whole_begin() const noexcept { return round_up(begin, page_size()); }
    std::uintptr_t whole_end() const noexcept { return end / page_size() * page_size(); }
    /// \returns the one node the target puts pages on (its errors name it), or -1 for several.
    int target_node() const noexcept {
        if (!interleave_nodes.empty()) return interleave_nodes.size() == 1 ? interleave_nodes[0] : -1;
        int node = -1;
        for (const auto& r : runs) {
            if (node >= 0 && r.second != node) return -1;
            node = r.second;
        }
        return node;
    }
};

/// \throws unknown_node for an id of `nodes` that `topo` does not have (an empty set is fine).
inline void check_nodes(const topology& topo, const node_set& nodes) {
    for (int id : nodes) topo.check(id);
}

/// \returns the plan of [p, p + bytes), no target yet. \throws invalid_placement when a page the range
/// overlaps runs past the end of the address space.
inline replace_plan make_plan(const void* p, std::size_t bytes, const topology& topo) {
    replace_plan plan;
    plan.topo = &topo;
    const std::size_t page = page_size();
    plan.begin = reinterpret_cast<std::uintptr_t>(p);
    if (!range_end_fits(p, bytes))
        throw_invalid("replace: a range of " + std::to_string(bytes) + " bytes runs past the end of the address space");
    plan.end = plan.begin + bytes;
    plan.first = plan.begin / page * page;
    plan.pages = bytes == 0 ? 0 : (round_up(plan.end, page) - plan.first) / page;
    return plan;
}

/// \effects runs of a partition `e` (element indexes) over the range at plan.begin: each page to the block
/// owning its grain (`basic_partition::page_bytes` with the range's lead into its first grain), as the
/// placement, `first_touch` and `where` have it.
inline void plan_partition(replace_plan& plan, const basic_partition& e) {
    if (plan.pages == 0 || e.block_count() == 0) return;
    const std::size_t page = plan.page_size(), grain = e.alignment(), lead = plan.begin % grain;
    const std::size_t allocated = e.units() * e.unit_bytes();
    const std::uintptr_t origin = plan.begin - lead; // <= plan.first
    for (std::size_t k = 0; k < e.block_count(); ++k) {
        const auto range = e.page_bytes(k, allocated, lead);
        if (range.first == range.second) continue;
        const std::size_t i = (origin + range.first <= plan.first ? 0 : origin + range.first - plan.first) / page;
        if (i >= plan.pages) continue;
        const int node = e.nodes()[k];
        if (!plan.runs.empty() && plan.runs.back().first == i) plan.runs.back().second = node;
        else if (plan.runs.empty() || plan.runs.back().second != node) plan.runs.emplace_back(i, node);
    }
}

/// \effects target_os[j] = OS node of page first + j, for j < count (runs walked once, not searched per page).
inline void fill_targets(const replace_plan& plan, std::size_t first, std::size_t count, std::vector<unsigned>& target_os) {
    const topology& topo = *plan.topo;
    if (!plan.interleave.empty()) {
        const std::size_t n = plan.interleave.size();
        std::size_t k = ((plan.first / plan.page_size()) + first) % n;
        for (std::size_t j = 0; j < count; ++j) {
            target_os[j] = topo.at(plan.interleave[k]).os_index;
            if (++k == n) k = 0;
        }
        return;
    }
    auto run = std::upper_bound(plan.runs.begin(), plan.runs.end(), first,
                                [](std::size_t p, const std::pair<std::size_t, int>& r) { return p < r.first; });
    if (run != plan.runs.begin()) --run;
    std::size_t j = 0;
    while (j < count) {
        const unsigned os = topo.at(run->second).os_index;
        const auto next = std::next(run);
        const std::size_t end = next == plan.runs.end() ? count : std::min(count, next->first - first);
        for (; j < end; ++j) target_os[j] = os;
        if (next == plan.runs.end()) break;
        run = next;
    }
}

/// \throws invalid_placement when [p, p + bytes) overlaps a partitioned container's buffer.
inline void refuse_partitioned_overlap(const void* p, std::size_t bytes) {
    if (placed_buffers::instance().overlaps(p, bytes))
        throw_invalid("replace: the range overlaps a partitioned container's buffer; re-place the container "
                      "(replace(container, partition)) so that its loop follows its pages");
}

inline std::string nodes_text(const node_set& nodes) {
    std::string s;
    for (std::size_t k = 0; k < nodes.size(); ++k) s += (k ? "," : "") + std::to_string(nodes[k]);
    return s;
}

/// \returns the plan moving [p, p + bytes) to `target`'s node.
inline replace_plan node_plan(const void* p, std::size_t bytes, const on_node& target) {
    replace_plan plan = make_plan(p, bytes, topology::get());
    plan.mode = target.policy() == node_policy::bind ? memory::policy_mode::bind : memory::policy_mode::preferred;
    plan.what = "node " + std::to_string(target.node());
    if (plan.pages) plan.runs.emplace_back(0, target.node());
    return plan;
}

/// \returns the plan interleaving [p, p + bytes) as `target` does.
inline replace_plan interleave_plan(const void* p, std::size_t bytes, const interleaved& target) {
    const topology& topo = topology::get();
    replace_plan plan = make_plan(p, bytes, topo);
    plan.what = "interleave over nodes " + nodes_text(target.nodes());
    if (!target.weights().empty()) {
        // Weighted: runs of weights[k] pages from the range's first page (a weight above the page count
        // is one run to the end: no sum can wrap); no per-range kernel policy exists without one VMA per
        // run, so the policy is left as it is.
        if (std::all_of(target.weights().begin(), target.weights().end(), [](std::size_t w) { return w == 0; }))
            throw_invalid("replace: an interleave whose weights are all zero places no page");
        for (std::size_t i = 0; i < plan.pages;)
            for (std::size_t k = 0; k < target.nodes().size() && i < plan.pages; ++k) {
                const std::size_t w = std::min(target.weights()[k], plan.pages);
                if (w == 0) continue;
                if (plan.runs.empty() || plan.runs.back().second != target.nodes()[k])
                    plan.runs.emplace_back(i, target.nodes()[k]);
                i += w;
            }
        plan.policy = false;
        return plan;
    }
    // The kernel's interleave of an anonymous private mapping: page at address a goes to the
    // ((a / page) % n)-th node of the mask in OS-index order.
    std::vector<std::pair<unsigned, int>> by_os;
    for (int id : target.nodes()) by_os.emplace_back(topo.at(id).os_index, id);
    std::sort(by_os.begin(), by_os.end());
    for (const auto& n : by_os) plan.interleave.push_back(n.second);
    plan.interleave_nodes = target.nodes();
    plan.mode = memory::policy_mode::interleave;
    return plan;
}

} // namespace detail
} // namespace numaplace

#endif
