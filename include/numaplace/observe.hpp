#ifndef NUMAPLACE_OBSERVE_HPP_INCLUDED
#define NUMAPLACE_OBSERVE_HPP_INCLUDED

/// \file
/// Observation: the kernel's and the processor's own counters of where memory is allocated and accessed,
/// as deltas over a scope. Four groups: per-node numastat and /proc/vmstat (system-wide: every process
/// of the machine), this process's software events (cpu-migrations, page faults, context switches, every
/// thread of it), and memory accesses served by the local and by other nodes (the kernel's generic node
/// events). A counter that could not be read is absent with its reason, never 0. docs/observe.md.

#include "detail/config.hpp"
#include "detail/fork.hpp"
#include "detail/numastat.hpp"
#include "detail/perf_counters.hpp"
#include "observation.hpp"
#include "topology.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace numaplace {

/// Which groups a scope reads.
struct observe_options {
    ///@{
    /// read this group (numastat, vmstat, software events, node accesses).
    bool numastat = true, vmstat = true, software = true, node_access = true;
    ///@}
    bool per_cpu = true;                  ///< node_access per CPU where permitted (paranoid <= 0, CAP_PERFMON)
    const topology* of_topology = nullptr; ///< the nodes numastat reports (null: topology::get())
};

/// Starting a started scope, or stopping one not started.
class observation_state_error : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

namespace detail {
/// How many forks this process's line has been through since it started (the child adds one): a scope
/// started under another count was started by an ancestor, whose perf events it holds.
inline std::atomic<unsigned> fork_generation{0};

inline const char* const vmstat_keys[6] = {"numa_pages_migrated", "numa_hint_faults", "numa_hint_faults_local",
                                           "numa_pte_updates", "pgmigrate_success", "pgmigrate_fail"};
inline std::uint64_t counter_delta(std::uint64_t after, std::uint64_t before) noexcept {
    return after > before ? after - before : 0;
}
inline std::string errno_reason(const std::string& what, int err) {
    return what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
}
} // namespace detail

/// Reads the counters of the groups asked for at start() and again at stop(). Move-only. No descriptor
/// is open before start() nor after stop() or destruction.
class observation_scope {
public:
    /// \effects starts at once (see start()).
    explicit observation_scope(observe_options options = {}) : options_(options) { start(); }
    /// \effects makes a scope not started.
    observation_scope(observe_options options, std::defer_lock_t) noexcept : options_(options) {}
    /// \effects takes `o`'s open counters; `o` is left not started.
    observation_scope(observation_scope&& o) noexcept { *this = std::move(o); }
    /// \effects closes this scope's counters and takes `o`'s; `o` is left not started. \returns `*this`.
    observation_scope& operator=(observation_scope&& o) noexcept {
        if (this != &o) {
            options_ = o.options_;
            started_ = std::exchange(o.started_, false);
            generation_ = o.generation_;
            start_ = o.start_;
            result_ = std::move(o.result_);
            nodes_ = std::move(o.nodes_);
            numastat_before_ = std::move(o.numastat_before_);
            vmstat_before_ = std::move(o.vmstat_before_);
            software_ = std::move(o.software_);
            node_access_ = std::move(o.node_access_);
        }
        return *this;
    }
    ~observation_scope() = default; // the event sets close their descriptors

    /// \effects reads the system-wide counters and opens the perf events of the groups asked for. A group
    /// that cannot be read is recorded unavailable with its reason (the others go on).
    /// \throws observation_state_error if started; std::bad_alloc.
    void start() {
        if (started_) throw observation_state_error("observation_scope::start: the scope is already started");
        result_ = observation{};
        if (options_.numastat) start_numastat();
        if (options_.vmstat) start_vmstat();
        if (options_.software) start_software();
        if (options_.node_access) start_node_access();
        generation_ = detail::fork_generation.load(std::memory_order_relaxed);
        started_ = true;
        start_ = std::chrono::steady_clock::now();
    }

    /// \effects reads every counter again and closes every descriptor. \returns the deltas since start().
    /// In a process forked inside the scope, the perf groups are unavailable ("forked inside the scope").
    /// \throws observation_state_error if not started; std::bad_alloc.
    observation stop() {
        if (!started_) throw observation_state_error("observation_scope::stop: the scope was not started");
        const auto end = std::chrono::steady_clock::now();
        started_ = false;
        observation r = std::move(result_);
        r.seconds_ = std::chrono::duration<double>(end - start_).count();
        const bool forked = generation_ != detail::fork_generation.load(std::memory_order_relaxed);
        if (options_.software) stop_software(r, forked);
        if (options_.node_access) stop_node_access(r, forked);
        if (options_.numastat) stop_numastat(r);
        if (options_.vmstat) stop_vmstat(r);
        return r;
    }

    /// \returns whether started and not stopped.
    bool started() const noexcept { return started_; }

private:
    group_status& status(counter_group g) noexcept { return result_.status_[static_cast<std::size_t>(g)]; }
    static void fail(observation& r, counter_group g, int err, std::string reason) {
        auto& s = r.status_[static_cast<std::size_t>(g)];
        s.measured = false;
        s.error = err;
        s.reason = std::move(reason);
    }

    void start_numastat() {
        group_status& s = status(counter_group::numastat);
        s.system_wide = true;
        nodes_.clear();
        try {
            const topology& topo = options_.of_topology ? *options_.of_topology : topology::get();
            if (topo.is_this_system()) {
                for (const auto& n : topo.nodes()) nodes_.emplace_back(n.id, n.os_index);
            } else {
                std::vector<unsigned> online;
                if (const int err = detail::os_online_nodes(online))
                    return fail(result_, counter_group::numastat, err,
                                detail::errno_reason("/sys/devices/system/node/online hidden", err));
                for (unsigned os : online) nodes_.emplace_back(-1, os);
                s.reason = "the topology is not this system's (XML or synthetic): the counters are this machine's "
                           "kernel nodes, node ids unknown (-1)";
            }
        } catch (const std::system_error& e) { // no descriptor free to load the topology
            return fail(result_, counter_group::numastat, e.code().value(), std::string("topology: ") + e.what());
        }
        numastat_before_.assign(nodes_.size(), detail::counter_file{});
        for (std::size_t i = 0; i < nodes_.size(); ++i)
            if (!read_numastat(i, numastat_before_[i], result_)) return;
        s.measured = true;
    }
    bool read_numastat(std::size_t i, detail::counter_file& out, observation& r) const {
        const std::string path = detail::numastat_path(nodes_[i].second);
        const int err = detail::read_counter_file(path, out);
        if (err == 0) return true;
        fail(r, counter_group::numastat, err,
             detail::errno_reason(path + (err == ENOENT ? " missing: /sys/devices/system/node hidden" : " unreadable"), err));
        return false;
    }
    void stop_numastat(observation& r) {
        if (!r.status(counter_group::numastat).measured) return;
        static const char* const keys[6] = {"numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node", "other_node"};
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
            detail::counter_file after;
            if (!read_numastat(i, after, r)) {
                r.numastat_.clear();
                return;
            }
            std::uint64_t d[6] = {};
            for (int k = 0; k < 6; ++k) {
                std::uint64_t a = 0, b = 0;
                if (!after.get(keys[k], a) || !numastat_before_[i].get(keys[k], b)) {
                    r.numastat_.clear();
                    return fail(r, counter_group::numastat, ENOENT,
                                detail::numastat_path(nodes_[i].second) + " has no " + keys[k] + " (ENOENT)");
                }
                d[k] = detail::counter_delta(a, b);
            }
            r.numastat_.push_back(numastat_delta{nodes_[i].first, nodes_[i].second, d[0], d[1], d[2], d[3], d[4], d[5]});
        }
    }

    void start_vmstat() {
        group_status& s = status(counter_group::vmstat);
        s.system_wide = true;
        const int err = detail::read_counter_file("/proc/vmstat", vmstat_before_);
        if (err) return fail(result_, counter_group::vmstat, err, detail::errno_reason("/proc/vmstat unreadable", err));
        s.measured = true;
    }
    void stop_vmstat(observation& r) const {
        if (!r.status(counter_group::vmstat).measured) return;
        detail::counter_file after;
        if (const int err = detail::read_counter_file("/proc/vmstat", after))
            return fail(r, counter_group::vmstat, err, detail::errno_reason("/proc/vmstat unreadable at stop", err));
        std::optional<std::uint64_t>* fields[6] = {&r.vmstat_.numa_pages_migrated, &r.vmstat_.numa_hint_faults,
                                                   &r.vmstat_.numa_hint_faults_local, &r.vmstat_.numa_pte_updates,
                                                   &r.vmstat_.pgmigrate_success, &r.vmstat_.pgmigrate_fail};
        for (int k = 0; k < 6; ++k) {
            std::uint64_t a = 0, b = 0;
            if (after.get(detail::vmstat_keys[k], a) && vmstat_before_.get(detail::vmstat_keys[k], b))
                *fields[k] = detail::counter_delta(a, b);
        }
    }

    void start_software() {
        const std::vector<detail::perf_event_spec> specs{{PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
                                                         {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
                                                         {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES}};
        if (const int err = software_.open_threads(specs))
            return fail(result_, counter_group::software, err, detail::perf_refusal_reason(err, false));
        status(counter_group::software).measured = true;
    }
    void stop_software(observation& r, bool forked) {
        if (!r.status(counter_group::software).measured) return;
        std::vector<std::optional<std::uint64_t>> sums;
        bool partial = false;
        const int err = forked ? 0 : software_.read(sums, nullptr, partial);
        software_.close();
        if (forked) return fail(r, counter_group::software, 0, "forked inside the scope: its perf events count the parent's threads");
        if (err) return fail(r, counter_group::software, err, detail::errno_reason("reading the software events", err));
        r.software_ = software_delta{sums[0], sums[1], sums[2]};
        if (partial) r.status_[2].reason = "some events were not counted all the time (absent)";
    }

    void start_node_access() {
        using namespace detail;
        constexpr std::uint64_t read = PERF_COUNT_HW_CACHE_NODE | (PERF_COUNT_HW_CACHE_OP_READ << 8);
        const std::vector<perf_event_spec> specs{{PERF_TYPE_HW_CACHE, read | (PERF_COUNT_HW_CACHE_RESULT_ACCESS << 16)},
                                                 {PERF_TYPE_HW_CACHE, read | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16)}};
        group_status& s = status(counter_group::node_access);
        std::string note;
        int level = 1;
        per_cpu_ = false;
        if (options_.per_cpu && ((os_perf_event_paranoid(level) && level <= 0) || os_perf_privileged())) {
            cpus_.clear();
            try {
                for (const auto& n : topology::get().nodes()) cpus_.insert(cpus_.end(), n.cpus.begin(), n.cpus.end());
            } catch (const std::system_error&) { // no descriptor to load the topology: per thread below
            }
            const int err = cpus_.empty() ? EACCES : node_access_.open_cpus(specs, cpus_);
            if (err == 0) {
                per_cpu_ = s.system_wide = s.measured = true;
                s.reason = "per CPU: every process on this process's CPUs";
                return;
            }
            if (err != EACCES && err != EPERM) return fail(result_, counter_group::node_access, err, perf_refusal_reason(err, true));
            note = "per CPU refused (" + perf_refusal_reason(err, true) + "): per thread of this process";
        }
        if (const int err = node_access_.open_threads(specs))
            return fail(result_, counter_group::node_access, err, perf_refusal_reason(err, true));
        s.measured = true;
        s.reason = note;
    }
    void stop_node_access(observation& r, bool forked) {
        using namespace detail;
        if (!r.status(counter_group::node_access).measured) return;
        std::vector<std::optional<std::uint64_t>> sums;
        std::vector<std::vector<std::uint64_t>> per;
        bool partial = false;
        const int err = forked ? 0 : node_access_.read(sums, per_cpu_ ? &per : nullptr, partial);
        node_access_.close();
        if (forked) return fail(r, counter_group::node_access, 0, "forked inside the scope: its perf events count the parent's threads");
        if (err) return fail(r, counter_group::node_access, err, errno_reason("reading the node events", err));
        if (partial || !sums[0] || !sums[1])
            return fail(r, counter_group::node_access, 0,
                        "the PMU multiplexed the node events with others: not counted all the time (no figure claimed)");
        node_access_delta& d = r.node_access_;
        d.per_cpu = per_cpu_;
        d.accesses = sums[0];
        d.misses = sums[1];
        for (std::size_t t = 0; t < per.size(); ++t) d.cpus.push_back(cpu_node_access{cpus_[t], per[t][0], per[t][1]});
        std::string vendor;
        unsigned family = 0, model = 0;
        const node_event_meaning m = os_cpu_model(vendor, family, model) ? node_events_meaning(vendor, family, model)
                                                                         : node_event_meaning::unknown;
        std::string& reason = r.status_[static_cast<std::size_t>(counter_group::node_access)].reason;
        if (m == node_event_meaning::unknown) {
            reason += std::string(reason.empty() ? "" : "; ") +
                      "what the node events count on this processor is not known to numaplace: raw accesses and misses only";
            return;
        }
        d.remote = *d.misses;
        d.local = m == node_event_meaning::local_only ? *d.accesses : counter_delta(*d.accesses, *d.misses);
    }

    observe_options options_;
    bool started_ = false;
    unsigned generation_ = 0;
    std::chrono::steady_clock::time_point start_{};
    observation result_;                               // the statuses decided at start
    std::vector<std::pair<int, unsigned>> nodes_;      // node id, OS index
    std::vector<detail::counter_file> numastat_before_;
    detail::counter_file vmstat_before_;
    detail::perf_event_set software_, node_access_;
    bool per_cpu_ = false;
    std::vector<unsigned> cpus_;                       // node_access per CPU: the CPUs, in the order opened
};

/// Per group, whether observation works here and why not.
struct observation_support {
    /// per `counter_group`, in its order.
    std::array<group_status, 4> groups{};
    /// \returns the status of group `g`.
    const group_status& status(counter_group g) const noexcept { return groups[static_cast<std::size_t>(g)]; }
};

namespace detail {
inline lazy_global<const observation_support>& observation_support_cell() noexcept {
    static lazy_global<const observation_support> cell; // constant-initialised: no guard
    return cell;
}
// Fork hooks (stage observation): no thread is making the probe during fork; the child counts one more
// fork, so its scopes started before it know their perf events are the parent's.
struct observation_fork_hooks {
    static void prepare() noexcept { observation_support_cell().fork_prepare(); }
    static void parent() noexcept { observation_support_cell().fork_parent(); }
    static void child() noexcept {
        fork_generation.fetch_add(1, std::memory_order_relaxed);
        observation_support_cell().fork_child();
    }
};
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration observation_fork NUMAPLACE_EARLY_INIT{
    fork_stage::observation,
    fork_hook{&observation_fork_hooks::prepare, &observation_fork_hooks::parent, &observation_fork_hooks::child}};
#endif
} // namespace detail

/// \returns per group whether a scope can measure it here and why not, probed once per process (one
/// scope around nothing: every descriptor closed again). A sandbox applied later is not seen here; each
/// scope says so itself. \throws std::bad_alloc the first time only.
inline const observation_support& observation_capabilities() {
    return detail::observation_support_cell().get([] {
        observation_scope scope{observe_options{}, std::defer_lock};
        scope.start();
        const observation o = scope.stop();
        auto* s = new observation_support;
        for (std::size_t g = 0; g < 4; ++g) s->groups[g] = o.status(static_cast<counter_group>(g));
        return s;
    });
}

} // namespace numaplace

#endif
