#ifndef NUMAPLACE_DETAIL_BASIC_PARTITION_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_BASIC_PARTITION_IMPL_HPP_INCLUDED

/// \file
/// The definitions of basic_partition.hpp's out-of-line functions: making, resizing and re-cutting a
/// partition's layout (checked, then interned) and the page geometry of a topology. Included by
/// basic_partition.hpp in header-only mode, compiled into libnumaplace in the separately compiled mode
/// (detail/config.hpp).

#include "../basic_partition.hpp"
#include "../error.hpp"
#include "../topology.hpp"
#include "config.hpp"
#include "intern.hpp"
#include "linux.hpp"

#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

NUMAPLACE_DECL page_geometry page_geometry::of(const topology& topo) {
    page_geometry g;
    if (!topo.is_this_system()) return g;
    g.page = detail::page_size();
    g.huge = detail::huge_page_size();
    const std::string& t = topo.capabilities().thp;
    g.thp = t == "always" ? thp_mode::always : t == "madvise" ? thp_mode::madvise : thp_mode::never;
    return g;
}
NUMAPLACE_DECL basic_partition::basic_partition(std::size_t n, std::size_t element_size, std::size_t row_length, const node_set& nodes,
                std::vector<std::size_t> weights, edge_alignment edges, const topology& topo,
                const page_geometry& geometry)
    : basic_partition() {
    topo.check(nodes);
    if (weights.empty()) weights = core_weights(topo, nodes);
    if (weights.size() != nodes.size())
        detail::throw_invalid("partition: " + std::to_string(weights.size()) + " weights for " +
                              std::to_string(nodes.size()) + " nodes");
    detail::partition_layout l;
    l.nodes = nodes;
    set_unit(l, element_size, row_length, edges, geometry);
    set_weights(l, std::move(weights));
    if (l.total() == 0) detail::throw_invalid("partition: all weights are zero (memory-only nodes have no cores)");
    check_bytes(n, l.unit_bytes);
    layout_ = detail::intern(std::move(l));
    units_ = count_ = n;
}
NUMAPLACE_DECL std::vector<numaplace::block> basic_partition::blocks() const {
    std::vector<numaplace::block> v;
    v.reserve(block_count());
    for (std::size_t k = 0; k < block_count(); ++k) v.push_back(block(k));
    return v;
}
NUMAPLACE_DECL basic_partition basic_partition::resized(std::size_t m) const {
    if (m != 0 && layout_->nodes.empty())
        detail::throw_invalid("partition: resized(" + std::to_string(m) + ") of an empty partition (no node)");
    basic_partition p = *this;
    p.units_ = elements_ ? m / layout_->row_length + (m % layout_->row_length != 0) : m;
    check_bytes(p.units_, layout_->unit_bytes);
    p.count_ = m;
    return p;
}
NUMAPLACE_DECL basic_partition basic_partition::with_cuts(const std::vector<std::size_t>& cuts) const {
    const std::size_t count = block_count();
    if (cuts.size() != count + 1 || cuts.front() != 0)
        detail::throw_invalid("partition: " + std::to_string(cuts.size()) + " cut points for " + std::to_string(count) +
                              " blocks (need blocks + 1, the first 0)");
    for (std::size_t k = 0; k < count; ++k)
        if (cuts[k + 1] < cuts[k]) detail::throw_invalid("partition: cut points decrease at block " + std::to_string(k));
    const std::size_t n = cuts.back();
    basic_partition p = *this;
    p.elements_ = false;
    p.units_ = p.count_ = n;
    if (n == 0) return p;
    check_bytes(n, layout_->unit_bytes);
    detail::partition_layout l = *layout_;
    std::vector<std::size_t> sizes(count);
    for (std::size_t k = 0; k < count; ++k) sizes[k] = cuts[k + 1] - cuts[k];
    set_weights(l, std::move(sizes));
    p.layout_ = detail::intern(std::move(l));
    return p;
}
NUMAPLACE_DECL std::vector<std::size_t> basic_partition::core_weights(const topology& topo, const node_set& nodes) {
    std::vector<std::size_t> w;
    for (int id : nodes) w.push_back(topo.at(id).cores);
    return w;
}
NUMAPLACE_DECL void basic_partition::set_weights(detail::partition_layout& l, std::vector<std::size_t> weights) {
    l.prefix.assign(1, 0);
    l.smallest_weight = 0;
    for (std::size_t w : weights) {
        l.prefix.push_back(l.prefix.back() + w); // < nodes * 2^64: no overflow in 128 bits
        if (w != 0 && (l.smallest_weight == 0 || w < l.smallest_weight)) l.smallest_weight = w;
    }
    l.weights = std::move(weights);
}
NUMAPLACE_DECL void basic_partition::check_bytes(std::size_t units, std::size_t unit_bytes) {
    if (unit_bytes != 0 && units > std::numeric_limits<std::size_t>::max() / unit_bytes)
        detail::throw_invalid("partition: " + std::to_string(units) + " units of " + std::to_string(unit_bytes) +
                              " bytes exceed SIZE_MAX bytes");
}
NUMAPLACE_DECL basic_partition basic_partition::remade(std::size_t element_size, std::size_t row_length, edge_alignment edges,
                       const page_geometry& geometry) const {
    if (layout_->nodes.empty()) return basic_partition();
    detail::partition_layout l = *layout_;
    set_unit(l, element_size, row_length, edges, geometry);
    check_bytes(units_, l.unit_bytes);
    basic_partition p;
    p.layout_ = detail::intern(std::move(l));
    p.units_ = p.count_ = units_;
    return p;
}
NUMAPLACE_DECL void basic_partition::set_unit(detail::partition_layout& l, std::size_t element_size, std::size_t row_length,
                     edge_alignment edges, const page_geometry& g) {
    if (element_size == 0) detail::throw_invalid("partition: element size 0");
    if (row_length == 0) detail::throw_invalid("partition: row length 0");
    if (row_length > std::numeric_limits<std::size_t>::max() / element_size)
        detail::throw_invalid("partition: row of " + std::to_string(row_length) + " elements of " +
                              std::to_string(element_size) + " bytes exceeds SIZE_MAX bytes");
    const auto pow2 = [](std::size_t x) { return x != 0 && (x & (x - 1)) == 0; };
    if (!pow2(g.page) || !pow2(g.huge) || g.huge < g.page)
        detail::throw_invalid("partition: page geometry (page " + std::to_string(g.page) + ", huge " +
                              std::to_string(g.huge) + ") needs powers of two with huge >= page");
    l.element_size = element_size;
    l.row_length = row_length;
    l.unit_bytes = element_size * row_length;
    l.edges = edges;
    l.geometry = g;
}

} // namespace numaplace

#endif
