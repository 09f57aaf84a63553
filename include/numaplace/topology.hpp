#ifndef NUMAPLACE_TOPOLOGY_HPP_INCLUDED
#define NUMAPLACE_TOPOLOGY_HPP_INCLUDED

/// \file
/// The machine: NUMA nodes, their CPUs and memory, distances, and what the kernel lets us do.
///
/// Node ids are hwloc logical indexes of NUMA nodes in the topology restricted to what this process may
/// use (cgroup/cpuset), which is exactly what oneTBB's `numa_node_id` means (tbbbind loads the topology
/// the same way). The kernel and `numactl` call a node by its OS index, also reported.

#include "detail/fork.hpp"
#include "detail/hwloc.hpp"
#include "detail/linux.hpp"
#include "detail/topology_load.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "memory_attribute.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
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
    /// \throws std::system_error (EMFILE, ENFILE) when no file descriptor is free to read it (nothing is
    /// kept: the next call reads it again).
    static const topology& get() {
        return system_cell().get([] { return new topology(detail::load_system_topology()); }); // never destroyed
    }
    /// \returns a topology from an hwloc synthetic description, e.g. "pack:2 numa:1 core:4 pu:1".
    /// \throws invalid_placement when hwloc rejects the description.
    static std::unique_ptr<topology> from_synthetic(const std::string& description) {
        return from_source([&](hwloc_topology_t t) { return hwloc_topology_set_synthetic(t, description.c_str()); },
                           "hwloc rejected synthetic topology '" + description + "'");
    }
    /// \returns a topology from an hwloc XML file (`lstopo file.xml`). As from the kernel, each CPU
    /// belongs to one node: a node that hwloc gives CPUs another node (with fewer, or as many and a
    /// lower OS index) already has is memory-only (an HMAT or CXL node attached to a socket).
    static std::unique_ptr<topology> from_xml(const std::string& path) {
        return from_source([&](hwloc_topology_t t) { return hwloc_topology_set_xml(t, path.c_str()); },
                           "hwloc cannot read XML topology '" + path + "'");
    }

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
    node_set all() const {
        std::vector<int> ids;
        for (const auto& n : nodes_) ids.push_back(n.id);
        return node_set(std::move(ids));
    }
    /// \returns the nodes with CPUs (where arenas and partition blocks go by default).
    node_set with_cpus() const {
        std::vector<int> ids;
        for (const auto& n : nodes_)
            if (n.has_cpus()) ids.push_back(n.id);
        return node_set(std::move(ids));
    }
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
    std::optional<std::uint64_t> memory_attribute_value(memory_attribute attr, int target, int initiator) const {
        detail::check_attribute(attr, "memory_attribute_value");
        check(target);
        check(initiator);
        if (!nodes_[static_cast<std::size_t>(initiator)].has_cpus())
            detail::throw_invalid("memory_attribute_value: node " + std::to_string(initiator) + " has no CPUs to initiate accesses");
        return attribute_value(attr, target, initiator);
    }
    /// \returns the node id of an OS node number, or -1 if this process may not use that node.
    int from_os_index(unsigned os) const noexcept { return os < os_to_id_.size() ? os_to_id_[os] : -1; }
    /// \returns the node whose CPUs include `cpu` (an OS index), or -1.
    int node_of_cpu(unsigned cpu) const noexcept {
        return cpu < cpu_to_node_.size() ? cpu_to_node_[cpu] : -1;
    }
    /// \returns the one node whose CPUs hold every CPU of `set` that this process may use (a thread or
    /// process bound within a node), or -1 when they span nodes or none is this process's.
    int node_of_cpus(const cpu_set_t& set) const noexcept {
        int found = -1;
        for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (!CPU_ISSET(cpu, &set)) continue;
            const int n = node_of_cpu(cpu);
            if (n < 0) continue; // not this process's (cpuset): nothing runs there
            if (found >= 0 && n != found) return -1;
            found = n;
        }
        return found;
    }
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
    hwloc_obj_t native_node(int id) const {
        check(id);
        return hwloc_get_obj_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, static_cast<unsigned>(id));
    }
    /// \returns whether this is the running system (capabilities probed) or a synthetic/XML one.
    bool is_this_system() const noexcept { return hwloc_topology_is_thissystem(topo_.get()) != 0; }

    /// The process's topology, made on first use (see detail/fork.hpp). \returns its cell.
    static detail::lazy_global<const topology>& system_cell() noexcept {
        static detail::lazy_global<const topology> cell; // constant-initialised: no guard
        return cell;
    }

private:
    template <class SetSource>
    static std::unique_ptr<topology> from_source(SetSource&& set_source, const std::string& error) {
        detail::hwloc_topology_ptr t = detail::make_empty_topology();
        if (set_source(t.get()) != 0) detail::throw_invalid(error);
        detail::load_topology(t.get());
        return std::unique_ptr<topology>(new topology(std::move(t)));
    }

    explicit topology(detail::hwloc_topology_ptr t) : topo_(std::move(t)) {
        hwloc_topology_t tp = topo_.get();
        int count = hwloc_get_nbobjs_by_type(tp, HWLOC_OBJ_NUMANODE);
        for (int i = 0; i < count; ++i) {
            hwloc_obj_t obj = hwloc_get_obj_by_type(tp, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
            node n;
            n.id = static_cast<int>(obj->logical_index);
            n.os_index = obj->os_index;
            n.memory = obj->attr ? obj->attr->numanode.local_memory : 0;
            if (obj->cpuset && !hwloc_bitmap_iszero(obj->cpuset)) {
                for (int pu = hwloc_bitmap_first(obj->cpuset); pu >= 0; pu = hwloc_bitmap_next(obj->cpuset, pu)) {
                    // only PUs that exist in this (possibly restricted) topology
                    if (hwloc_get_pu_obj_by_os_index(tp, static_cast<unsigned>(pu)))
                        n.cpus.push_back(static_cast<unsigned>(pu));
                }
                n.cores = static_cast<std::size_t>(
                    hwloc_get_nbobjs_inside_cpuset_by_type(tp, obj->cpuset, HWLOC_OBJ_CORE));
                if (n.cores == 0) n.cores = n.cpus.size();
            }
            kernel_cpus_only(n);
            nodes_.push_back(std::move(n));
        }
        if (!is_this_system()) cpus_owned_once();
        for (const node& n : nodes_) {
            if (os_to_id_.size() <= n.os_index) os_to_id_.resize(n.os_index + 1, -1);
            os_to_id_[n.os_index] = n.id;
            for (unsigned cpu : n.cpus) {
                if (cpu_to_node_.size() <= cpu) cpu_to_node_.resize(cpu + 1, -1);
                cpu_to_node_[cpu] = n.id;
            }
        }
        read_distances();
        read_memory_attributes();
        caps_.nodes = nodes_.size();
        caps_.system_nodes = nodes_.size();
        if (is_this_system()) probe();
    }

    // A memory-only node that the firmware gives an initiator (ACPI HMAT: a CXL expander near a socket)
    // is attached by hwloc to that socket, with its cpuset: on this system the kernel's list of the
    // node's CPUs decides (none, for such a node). docs/tiers.md.
    void kernel_cpus_only(node& n) const {
        std::vector<unsigned> kernel;
        if (n.cpus.empty() || !is_this_system() || !detail::os_node_cpus(n.os_index, kernel)) return;
        const auto before = n.cpus.size();
        n.cpus.erase(std::remove_if(n.cpus.begin(), n.cpus.end(),
                                    [&](unsigned c) { return std::find(kernel.begin(), kernel.end(), c) == kernel.end(); }),
                     n.cpus.end());
        if (n.cpus.size() != before) n.cores = n.cpus.empty() ? 0 : n.cpus.size(); // a CPU-less node, or (never seen) a split core
    }

    // The same for a topology that is not this system's (XML, synthetic), which has no kernel to ask: a
    // CPU belongs to one node, as in the kernel. Nodes claim their CPUs from the smallest cpuset up (the
    // lowest OS index first among equal ones); a node whose CPUs are all claimed is memory-only. So an
    // HMAT or CXL node attached to a socket or to the machine (hwloc gives it that cpuset), or a second
    // node of a socket (KNL's MCDRAM, HBM in flat mode), has no CPUs, as on the machine it came from.
    void cpus_owned_once() {
        std::vector<std::size_t> order(nodes_.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            const node &x = nodes_[a], &y = nodes_[b];
            return x.cpus.size() != y.cpus.size() ? x.cpus.size() < y.cpus.size() : x.os_index < y.os_index;
        });
        std::vector<bool> claimed;
        for (std::size_t i : order) {
            node& n = nodes_[i];
            const auto before = n.cpus.size();
            n.cpus.erase(std::remove_if(n.cpus.begin(), n.cpus.end(), [&](unsigned c) { return c < claimed.size() && claimed[c]; }),
                         n.cpus.end());
            for (unsigned c : n.cpus) {
                if (claimed.size() <= c) claimed.resize(c + 1, false);
                claimed[c] = true;
            }
            if (n.cpus.size() != before) n.cores = n.cpus.empty() ? 0 : n.cpus.size();
        }
    }

    // hwloc's value of attr for (target, initiator's CPUs), if it has one.
    std::optional<std::uint64_t> attribute_value(memory_attribute attr, int target, int initiator) const noexcept {
        return detail::hwloc_memory_attribute(topo_.get(), attr, static_cast<unsigned>(target), static_cast<unsigned>(initiator));
    }
    // Whether the firmware gave any bandwidth or latency (from any node with CPUs).
    void read_memory_attributes() noexcept {
        for (const auto& from : nodes_)
            for (const auto& to : nodes_)
                caps_.memory_attributes = caps_.memory_attributes ||
                    (from.has_cpus() && (attribute_value(memory_attribute::bandwidth, to.id, from.id) ||
                                         attribute_value(memory_attribute::latency, to.id, from.id)));
    }

    void read_distances() {
        const std::size_t n = nodes_.size();
        distances_.assign(n * n, 20u);
        for (std::size_t i = 0; i < n; ++i) distances_[i * n + i] = 10u;
        unsigned nr = 1;
        hwloc_distances_s* dist = nullptr;
        if (hwloc_distances_get_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, &nr, &dist,
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 || nr == 0) {
            nr = 1;
            if (hwloc_distances_get_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, &nr, &dist, 0, 0) != 0 || nr == 0)
                return;
        }
        for (unsigned i = 0; i < dist->nbobjs; ++i)
            for (unsigned j = 0; j < dist->nbobjs; ++j) {
                auto a = dist->objs[i]->logical_index, b = dist->objs[j]->logical_index;
                if (a < n && b < n) distances_[a * n + b] = static_cast<unsigned>(dist->values[i * dist->nbobjs + j]);
            }
        caps_.distances_known = true;
        hwloc_distances_release(topo_.get(), dist);
    }

    // Probes the kernel with one anonymous page: each call tells whether a policy mode exists and
    // whether the sandbox lets us use it.
    void probe() {
        using namespace detail;
        caps_.probed = true;
        {
            std::string online = read_line("/sys/devices/system/node/online");
            std::size_t total = 0;
            // "0-3,5" style list
            for (std::size_t pos = 0; pos < online.size();) {
                std::size_t comma = online.find(',', pos);
                std::string part = online.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                std::size_t dash = part.find('-');
                if (!part.empty()) {
                    if (dash == std::string::npos) total += 1;
                    else total += std::stoul(part.substr(dash + 1)) - std::stoul(part.substr(0, dash)) + 1;
                }
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
            if (total) caps_.system_nodes = total;
        }
        caps_.thp = bracketed(read_line("/sys/kernel/mm/transparent_hugepage/enabled", "[unknown]"));
        {
            std::string b = read_line("/proc/sys/kernel/numa_balancing");
            if (!b.empty()) caps_.numa_balancing = std::atoi(b.c_str());
        }
        if (nodes_.empty()) return;
        const policy_probe probe = os_probe_policies(nodes_.front().os_index);
        if (probe.mapped) {
            caps_.memory_binding_errno = probe.bind_errno;
            caps_.memory_binding = probe.bind_errno == 0;
            caps_.preferred_many = probe.preferred_many;
            caps_.weighted_interleave = probe.weighted_interleave;
            caps_.numa_balancing_bind = probe.numa_balancing_bind;
            caps_.page_query_errno = probe.query_errno;
            caps_.page_query = probe.query_errno == 0;
        }
        // CPU binding: re-apply the calling thread's own binding (changes nothing).
        auto set = make_bitmap();
        if (hwloc_get_cpubind(topo_.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0 &&
            hwloc_set_cpubind(topo_.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0) {
            caps_.cpu_binding = true;
        } else {
            caps_.cpu_binding_errno = errno;
        }
    }

    detail::hwloc_topology_ptr topo_;
    std::vector<node> nodes_;
    std::vector<unsigned> distances_;
    std::vector<int> cpu_to_node_;
    std::vector<int> os_to_id_;
    numaplace::capabilities caps_;
};

namespace detail {
// Fork hooks (stage topology): a thread loading the topology finishes before fork; none starts during it.
// Nothing is loaded on behalf of a fork.
inline const fork_hook_registration topology_fork{
    fork_stage::topology, lazy_global_hooks<const topology, &topology::system_cell>::hook()};
} // namespace detail

} // namespace numaplace

#endif
