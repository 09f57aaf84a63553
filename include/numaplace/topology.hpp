#ifndef NUMAPLACE_TOPOLOGY_HPP_INCLUDED
#define NUMAPLACE_TOPOLOGY_HPP_INCLUDED

/// \file
/// The machine: NUMA nodes, their CPUs and memory, distances, and what the kernel lets us do.
///
/// Node ids are hwloc logical indexes of NUMA nodes in the topology restricted to what this process may
/// use (cgroup/cpuset), which is exactly what oneTBB's `numa_node_id` means (tbbbind loads the topology
/// the same way). The kernel and `numactl` call a node by its OS index, also reported.

#include "detail/config.hpp"
#include "detail/fork.hpp"
#include "detail/hwloc_fwd.hpp"
#include "error.hpp"
#include "memory_attribute.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sched.h>

namespace numaplace {

/// A sorted set of node ids without duplicates.
class node_set {
public:
    node_set() = default;
    /// \effects the set of `ids`, sorted, duplicates removed.
    node_set(std::initializer_list<int> ids) : ids_(ids) { normalise(); }
    /// \effects the set of `ids`, sorted, duplicates removed.
    explicit node_set(std::vector<int> ids) : ids_(std::move(ids)) { normalise(); }

    /// \returns whether the set is empty.
    bool empty() const noexcept { return ids_.empty(); }
    /// \returns the number of ids.
    std::size_t size() const noexcept { return ids_.size(); }
    /// \returns whether `id` is in the set.
    bool contains(int id) const noexcept { return std::binary_search(ids_.begin(), ids_.end(), id); }
    /// \returns the first id (ascending order).
    auto begin() const noexcept { return ids_.begin(); }
    /// \returns one past the last id.
    auto end() const noexcept { return ids_.end(); }
    /// \returns the `i`-th id in ascending order.
    int operator[](std::size_t i) const noexcept { return ids_[i]; }
    /// \returns the ids, ascending.
    const std::vector<int>& ids() const noexcept { return ids_; }

    friend bool operator==(const node_set& a, const node_set& b) noexcept { return a.ids_ == b.ids_; }
    friend bool operator!=(const node_set& a, const node_set& b) noexcept { return !(a == b); }

private:
    void normalise() {
        std::sort(ids_.begin(), ids_.end());
        ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    }
    std::vector<int> ids_;
};

/// One NUMA node.
struct node {
    int id = -1;                 ///< numaplace / oneTBB id (hwloc logical index)
    unsigned os_index = 0;       ///< the kernel's node number (`numactl`, `mbind`)
    std::vector<unsigned> cpus;  ///< OS indexes of its processing units
    std::size_t cores = 0;       ///< physical cores
    std::uint64_t memory = 0;    ///< local memory in bytes
    /// \returns false for memory-only nodes (CXL, HBM): allocators may target them, arenas skip them.
    bool has_cpus() const noexcept { return !cpus.empty(); }
};

/// What the kernel and the process's sandbox let numaplace do. Every degradation shows here.
struct capabilities {
    std::size_t nodes = 0;            ///< nodes this process may use
    std::size_t system_nodes = 0;     ///< nodes the kernel has online (cpuset restrictions may hide some)
    bool probed = false;              ///< the kernel was asked; false for a topology that is not this
                                      ///< system's (synthetic, XML, HWLOC_XMLFILE): the answers below
                                      ///< but `nodes` and the firmware's are then unknown
    bool memory_binding = false;      ///< `mbind(MPOL_BIND)` works
    int memory_binding_errno = 0;     ///< why not (EPERM: a seccomp filter or container policy)
    bool page_query = false;          ///< `move_pages` query works (needed by `where`)
    /// errno of the page query probe (0: it works).
    int page_query_errno = 0;
    bool cpu_binding = false;         ///< threads can be pinned (hwloc_set_cpubind)
    /// errno of the CPU binding probe (0: it works).
    int cpu_binding_errno = 0;
    bool preferred_many = false;      ///< MPOL_PREFERRED_MANY (Linux >= 5.15)
    bool weighted_interleave = false; ///< MPOL_WEIGHTED_INTERLEAVE (Linux >= 6.9; weights are system-wide)
    std::string thp = "unknown";      ///< transparent huge pages: always, madvise, never
    int numa_balancing = -1;          ///< kernel.numa_balancing (0 off, 1 on, 2 tiering; -1 unknown)
    bool numa_balancing_bind = false; ///< MPOL_BIND | MPOL_F_NUMA_BALANCING (Linux >= 5.12): bound pages may migrate
    bool distances_known = false;     ///< the firmware gave a distance matrix
    bool memory_attributes = false;   ///< the firmware gave bandwidths or latencies (ACPI HMAT): memory tiers
};


/// A snapshot of the machine's NUMA topology. `topology::get()` is the process's, loaded once
/// (thread-safe); `from_synthetic`/`from_xml` build others for tests and what-if planning.
class topology {
public:
    /// \returns the topology of this process (nodes restricted to its cpuset).
    /// \throws std::system_error (EMFILE, ENFILE) when no file descriptor is free to read it, or (EPERM and
    /// the like) when the process's CPU affinity cannot be read (a sandbox refusing sched_getaffinity,
    /// which hwloc's discovery would retry for ever); nothing is kept: the next call reads it again.
    NUMAPLACE_DECL static const topology& get();
    /// \returns a topology from an hwloc synthetic description, e.g. "pack:2 numa:1 core:4 pu:1".
    /// \throws invalid_placement when hwloc rejects the description.
    NUMAPLACE_DECL static std::unique_ptr<topology> from_synthetic(const std::string& description);
    /// \returns a topology from an hwloc XML file (`lstopo file.xml`). As from the kernel, each CPU
    /// belongs to one node: a node that hwloc gives CPUs another node (with fewer, or as many and a
    /// lower OS index) already has is memory-only (an HMAT or CXL node attached to a socket).
    NUMAPLACE_DECL static std::unique_ptr<topology> from_xml(const std::string& path);

    topology(const topology&) = delete;
    topology& operator=(const topology&) = delete;

    /// \returns the number of nodes.
    std::size_t size() const noexcept { return nodes_.size(); }
    /// \returns every node, by id.
    const std::vector<node>& nodes() const noexcept { return nodes_; }
    /// \returns node `id`. \throws unknown_node.
    const node& at(int id) const {
        check(id);
        return nodes_[static_cast<std::size_t>(id)];
    }
    /// \throws unknown_node unless `id` is a node of this topology.
    void check(int id) const {
        if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size()) detail::throw_unknown_node(id, nodes_.size());
    }
    /// \throws unknown_node for the first id of `set` that is not a node; invalid_placement if empty.
    void check(const node_set& set) const {
        if (set.empty()) detail::throw_invalid("empty node set");
        for (int id : set) check(id);
    }
    /// \returns all nodes.
    NUMAPLACE_DECL node_set all() const;
    /// \returns the nodes with CPUs (where arenas and partition blocks go by default).
    NUMAPLACE_DECL node_set with_cpus() const;
    /// \returns the distance from `a` to `b` as the firmware gives it (10 = local); 10/20 if unknown.
    unsigned distance(int a, int b) const {
        check(a);
        check(b);
        return distances_[static_cast<std::size_t>(a) * nodes_.size() + static_cast<std::size_t>(b)];
    }
    /// \returns `attr` of node `target`'s memory seen from the CPUs of node `initiator` (MiB/s, ns), or
    /// nothing when the firmware gives none: no HMAT, or (Linux) not this pair, since the kernel exposes
    /// only each node's best initiators. Never guessed (distances are another thing: `distance`).
    /// \throws invalid_placement when `attr` is none of the enumerators (checked first); unknown_node
    /// (either id); invalid_placement when `initiator` has no CPUs.
    NUMAPLACE_DECL std::optional<std::uint64_t> memory_attribute_value(memory_attribute attr, int target, int initiator) const;
    /// \returns the node id of an OS node number, or -1 if this process may not use that node.
    int from_os_index(unsigned os) const noexcept { return os < os_to_id_.size() ? os_to_id_[os] : -1; }
    /// \returns the node whose CPUs include `cpu` (an OS index), or -1.
    int node_of_cpu(unsigned cpu) const noexcept {
        return cpu < cpu_to_node_.size() ? cpu_to_node_[cpu] : -1;
    }
    /// \returns the one node whose CPUs hold every CPU of `set` that this process may use (a thread or
    /// process bound within a node), or -1 when they span nodes or none is this process's.
    NUMAPLACE_DECL int node_of_cpus(const cpu_set_t& set) const noexcept;
    /// \returns the node of the CPU the calling thread runs on now, or -1 if unknown.
    int current_node() const noexcept {
        int cpu = ::sched_getcpu();
        return cpu < 0 ? -1 : node_of_cpu(static_cast<unsigned>(cpu));
    }
    /// \returns what this machine and process allow (probed once, when the topology was loaded).
    const numaplace::capabilities& capabilities() const noexcept { return caps_; }
    /// \returns the hwloc topology (read-only use; it is shared by every thread).
    hwloc_topology_t native() const noexcept { return topo_.get(); }
    /// \returns the hwloc NUMA node object of `id`.
    NUMAPLACE_DECL hwloc_obj_t native_node(int id) const;
    /// \returns whether this is the running system (capabilities probed) or a synthetic/XML one.
    NUMAPLACE_DECL bool is_this_system() const noexcept;

    /// The process's topology, made on first use (see detail/fork.hpp). \returns its cell.
    NUMAPLACE_DECL static detail::lazy_global<const topology>& system_cell() noexcept;

private:
    template <class SetSource>
    static std::unique_ptr<topology> from_source(SetSource&& set_source, const std::string& error);
    NUMAPLACE_DECL explicit topology(detail::hwloc_topology_ptr t);
    // A memory-only node that the firmware gives an initiator (ACPI HMAT: a CXL expander near a socket)
    // is attached by hwloc to that socket, with its cpuset: on this system the kernel's list of the
    // node's CPUs decides (none, for such a node). docs/tiers.md.
    NUMAPLACE_DECL void kernel_cpus_only(node& n) const;
    // The same for a topology that is not this system's (XML, synthetic), which has no kernel to ask
    // (detail/topology_impl.hpp).
    NUMAPLACE_DECL void cpus_owned_once();
    // hwloc's value of attr for (target, initiator's CPUs), if it has one.
    NUMAPLACE_DECL std::optional<std::uint64_t> attribute_value(memory_attribute attr, int target, int initiator) const noexcept;
    // Whether the firmware gave any bandwidth or latency (from any node with CPUs).
    NUMAPLACE_DECL void read_memory_attributes() noexcept;
    NUMAPLACE_DECL void read_distances();
    // Probes the kernel with one anonymous page: each call tells whether a policy mode exists and
    // whether the sandbox lets us use it.
    NUMAPLACE_DECL void probe();

    detail::hwloc_topology_ptr topo_;
    std::vector<node> nodes_;
    std::vector<unsigned> distances_;
    std::vector<int> cpu_to_node_;
    std::vector<int> os_to_id_;
    numaplace::capabilities caps_;
};

} // namespace numaplace

#if NUMAPLACE_DEFINITIONS
#include "detail/topology_impl.hpp"
#endif

#endif
