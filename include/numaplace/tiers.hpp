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
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

/// A tier: the nodes an initiator reaches with the same value of an attribute.
struct memory_tier {
    /// the nodes of the tier.
    node_set nodes;
    std::uint64_t value = 0; ///< MiB/s (bandwidths) or ns (latencies)
};

/// The firmware gives no value of the attribute from this initiator (no HMAT).
class memory_attributes_unknown : public invalid_placement {
public:
    /// \effects names the initiator and the attribute the firmware does not give.
    memory_attributes_unknown(int initiator, memory_attribute attr)
        : invalid_placement("memory tiers: the firmware gives no " + std::string(name(attr)) + " from node " +
                            std::to_string(initiator) +
                            " (no ACPI HMAT: tiers unknown; numaplace-info says 'memory attributes (HMAT): NO')"),
          initiator_(initiator), attribute_(attr) {}
    /// \returns the initiator node.
    int initiator() const noexcept { return initiator_; }
    /// \returns the attribute asked for.
    memory_attribute attribute() const noexcept { return attribute_; }

private:
    int initiator_;
    memory_attribute attribute_;
};

/// The memory tiers of one initiator node by one attribute. A value. A default-constructed or moved-from
/// one has no initiator (`initiator()` -1), no tiers and no unknown nodes; `best` refuses it.
class memory_tiers {
public:
    memory_tiers() = default;
    /// \effects copies the tiers.
    memory_tiers(const memory_tiers&) = default;
    /// \effects copies the tiers. \returns `*this`.
    memory_tiers& operator=(const memory_tiers&) = default;
    /// \effects takes `other`'s tiers; `other` is left as a default-constructed value.
    memory_tiers(memory_tiers&& other) noexcept { swap(other); }
    /// \effects takes `other`'s tiers; `other` is left as a default-constructed value. \returns `*this`.
    memory_tiers& operator=(memory_tiers&& other) noexcept {
        if (this != &other) {
            memory_tiers().swap(*this);
            swap(other);
        }
        return *this;
    }

    /// \returns the tiers of the nodes seen from `initiator`'s CPUs by `attr`: nodes with equal values
    /// together, best first (highest bandwidth, lowest latency), ties in node order; the nodes the
    /// firmware says nothing about (from this initiator) in `unknown()`.
    /// \throws invalid_placement (`attr` none of the enumerators; `initiator` has no CPUs); unknown_node.
    static memory_tiers of(int initiator, memory_attribute attr = memory_attribute::bandwidth,
                           const topology& topo = topology::get()) {
        detail::check_attribute(attr, "memory_tiers::of");
        if (!topo.at(initiator).has_cpus())
            detail::throw_invalid("memory_tiers::of: node " + std::to_string(initiator) + " has no CPUs to initiate accesses");
        std::vector<std::optional<std::uint64_t>> values;
        for (const auto& n : topo.nodes()) values.push_back(topo.memory_attribute_value(attr, n.id, initiator));
        return from_values(initiator, attr, values);
    }

    /// \returns the tiers `of` makes when node k's value of `attr` from `initiator` is `values[k]` (none:
    /// unknown): the grouping alone, for values from elsewhere (a plan, a test).
    /// \throws invalid_placement (`attr` none of the enumerators); unknown_node (`initiator` not an index
    /// of `values`).
    static memory_tiers from_values(int initiator, memory_attribute attr,
                                    const std::vector<std::optional<std::uint64_t>>& values) {
        detail::check_attribute(attr, "memory_tiers::from_values");
        if (initiator < 0 || static_cast<std::size_t>(initiator) >= values.size())
            detail::throw_unknown_node(initiator, values.size());
        memory_tiers t;
        t.initiator_ = initiator;
        t.attribute_ = attr;
        std::vector<std::pair<std::uint64_t, int>> known;
        std::vector<int> unknown;
        for (std::size_t id = 0; id < values.size(); ++id) {
            if (values[id]) known.emplace_back(*values[id], static_cast<int>(id));
            else unknown.push_back(static_cast<int>(id));
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
    /// \returns the initiator node, -1 for a default-constructed or moved-from value.
    int initiator() const noexcept { return initiator_; }
    /// \returns the attribute (bandwidth for a default-constructed or moved-from value).
    memory_attribute attribute() const noexcept { return attribute_; }
    /// \returns the value of node `id` from this initiator (the value of the tier that holds it), or
    /// nothing when it has none or is no node of these tiers.
    std::optional<std::uint64_t> value_of(int id) const noexcept {
        for (const auto& t : tiers_)
            if (t.nodes.contains(id)) return t.value;
        return std::nullopt;
    }

    /// \returns the nodes of the best tier.
    /// \throws memory_attributes_unknown when there is none and `fb` is strict; degrading, returns the
    /// initiator's own node and records it in `degradations()`. invalid_placement, whatever `fb`, for a
    /// default-constructed or moved-from value (no initiator to fall back to).
    node_set best(fallback fb = fallback::strict) const {
        if (!tiers_.empty()) return tiers_.front().nodes;
        if (initiator_ < 0) detail::throw_invalid("memory_tiers::best: no initiator (a default-constructed or moved-from value)");
        if (fb == fallback::strict) throw memory_attributes_unknown(initiator_, attribute_);
        detail::degradation_log::instance().record("memory tiers: no " + std::string(name(attribute_)) + " from node " +
                                           std::to_string(initiator_) + " (no ACPI HMAT): the initiator's own node instead");
        return node_set{initiator_};
    }

private:
    void swap(memory_tiers& other) noexcept {
        tiers_.swap(other.tiers_);
        std::swap(unknown_, other.unknown_);
        std::swap(initiator_, other.initiator_);
        std::swap(attribute_, other.attribute_);
    }

    std::vector<memory_tier> tiers_;
    node_set unknown_;
    int initiator_ = -1;
    memory_attribute attribute_ = memory_attribute::bandwidth;
};

} // namespace numaplace

#endif
