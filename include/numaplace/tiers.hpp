#ifndef NUMAPLACE_TIERS_HPP_INCLUDED
#define NUMAPLACE_TIERS_HPP_INCLUDED

/// \file
/// Memory tiers: the nodes an initiator reaches, grouped by what the firmware says of them (ACPI HMAT
/// bandwidth or latency, read by hwloc: `topology::memory_attribute_value`), best first. Without the
/// firmware's attributes the tiers are unknown, never guessed: a strict request for the best tier
/// refuses, a degrading one falls back to the initiator's own node and says so. Its result is a node
/// set for any placement (`node_allocator`, `interleaved_allocator`, `on_nodes`...): one header on top
/// of the placement path. Design: docs/tiers.md.

#include "diagnostics.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

/// A tier: the nodes an initiator reaches with the same value of an attribute.
struct memory_tier {
    node_set nodes;
    std::uint64_t value = 0; ///< MiB/s (bandwidths) or ns (latencies)
};

/// The firmware gives no value of the attribute from this initiator (no HMAT).
class memory_attributes_unknown : public invalid_placement {
public:
    memory_attributes_unknown(int initiator, memory_attribute attr)
        : invalid_placement("memory tiers: the firmware gives no " + std::string(name(attr)) + " from node " +
                            std::to_string(initiator) +
                            " (no ACPI HMAT: tiers unknown; numaplace-info says 'memory attributes (HMAT): NO')"),
          initiator_(initiator), attribute_(attr) {}
    int initiator() const noexcept { return initiator_; }
    memory_attribute attribute() const noexcept { return attribute_; }

private:
    int initiator_;
    memory_attribute attribute_;
};

/// The memory tiers of one initiator node by one attribute. A value.
class memory_tiers {
public:
    /// \returns the tiers of the nodes seen from `initiator`'s CPUs by `attr`: nodes with equal values
    /// together, best first (highest bandwidth, lowest latency), ties in node order; the nodes the
    /// firmware says nothing about (from this initiator) in `unknown()`.
    /// \throws unknown_node; invalid_placement (`initiator` has no CPUs).
    static memory_tiers of(int initiator, memory_attribute attr = memory_attribute::bandwidth,
                           const topology& topo = topology::get()) {
        memory_tiers t;
        t.initiator_ = initiator;
        t.attribute_ = attr;
        std::vector<std::pair<std::uint64_t, int>> known;
        std::vector<int> unknown;
        for (const auto& n : topo.nodes()) {
            const auto v = topo.memory_attribute_value(attr, n.id, initiator);
            if (v) known.emplace_back(*v, n.id);
            else unknown.push_back(n.id);
        }
        const bool higher = higher_is_better(attr);
        std::stable_sort(known.begin(), known.end(), [higher](const auto& a, const auto& b) {
            return higher ? a.first > b.first : a.first < b.first;
        });
        for (std::size_t i = 0; i < known.size();) {
            std::vector<int> ids;
            std::size_t j = i;
            for (; j < known.size() && known[j].first == known[i].first; ++j) ids.push_back(known[j].second);
            t.tiers_.push_back(memory_tier{node_set(ids), known[i].first});
            i = j;
        }
        t.unknown_ = node_set(unknown);
        return t;
    }

    /// \returns the tiers, best first (empty when the firmware gives nothing from this initiator).
    const std::vector<memory_tier>& tiers() const noexcept { return tiers_; }
    /// \returns the nodes without a value from this initiator.
    const node_set& unknown() const noexcept { return unknown_; }
    /// \returns whether any node has a value.
    bool known() const noexcept { return !tiers_.empty(); }
    int initiator() const noexcept { return initiator_; }
    memory_attribute attribute() const noexcept { return attribute_; }

    /// \returns the nodes of the best tier.
    /// \throws memory_attributes_unknown when there is none and `fb` is strict; degrading, returns the
    /// initiator's own node and records it in `degradations()`.
    node_set best(fallback fb = fallback::strict) const {
        if (!tiers_.empty()) return tiers_.front().nodes;
        if (fb == fallback::strict) throw memory_attributes_unknown(initiator_, attribute_);
        detail::degradation_log::instance().record("memory tiers: no " + std::string(name(attribute_)) + " from node " +
                                           std::to_string(initiator_) + " (no ACPI HMAT): the initiator's own node instead");
        return node_set{initiator_};
    }

private:
    std::vector<memory_tier> tiers_;
    node_set unknown_;
    int initiator_ = -1;
    memory_attribute attribute_ = memory_attribute::bandwidth;
};

} // namespace numaplace

#endif
