/// \file
/// STUB of the observation scope (branch `observe` writes the real one): the fixed API, every group
/// unmeasured. Replaced whole when `observe` is merged.
#ifndef NUMAPLACE_OBSERVE_HPP_INCLUDED
#define NUMAPLACE_OBSERVE_HPP_INCLUDED

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace numaplace {

enum class counter_group { numastat, vmstat, software, node_access };
inline const char* name(counter_group g) noexcept {
    switch (g) {
    case counter_group::numastat: return "numastat";
    case counter_group::vmstat: return "vmstat";
    case counter_group::software: return "software";
    case counter_group::node_access: return "node_access";
    }
    return "?";
}
struct group_status {
    bool measured = false;
    bool system_wide = false;
    int error = 0;
    std::string reason;
};
struct numastat_delta {
    int node;
    unsigned os_index;
    std::uint64_t numa_hit, numa_miss, numa_foreign, interleave_hit, local_node, other_node;
};
struct vmstat_delta {
    std::optional<std::uint64_t> numa_pages_migrated, numa_hint_faults, numa_hint_faults_local, numa_pte_updates,
        pgmigrate_success, pgmigrate_fail;
};
struct software_delta {
    std::optional<std::uint64_t> cpu_migrations, page_faults, context_switches;
};
struct node_access_delta {
    std::optional<std::uint64_t> local, remote;
    bool per_cpu = false;
};
class observation {
public:
    const group_status& status(counter_group g) const noexcept { return status_[static_cast<int>(g)]; }
    const std::vector<numastat_delta>& numastat() const noexcept { return numastat_; }
    const vmstat_delta& vmstat() const noexcept { return vmstat_; }
    const software_delta& software() const noexcept { return software_; }
    const node_access_delta& node_access() const noexcept { return node_access_; }
    double seconds() const noexcept { return seconds_; }
    std::optional<double> remote_to_local() const noexcept { return std::nullopt; }

private:
    friend class observation_scope;
    group_status status_[4];
    std::vector<numastat_delta> numastat_;
    vmstat_delta vmstat_;
    software_delta software_;
    node_access_delta node_access_;
    double seconds_ = 0;
};
struct observe_options {
    bool numastat = true, vmstat = true, software = true, node_access = true;
    bool per_cpu = true;
};
class observation_scope {
public:
    explicit observation_scope(observe_options o = {}) : observation_scope(o, std::defer_lock) { start(); }
    observation_scope(observe_options, std::defer_lock_t) {}
    void start() { t0_ = std::chrono::steady_clock::now(); started_ = true; }
    observation stop() {
        observation r;
        for (auto& s : r.status_) s.reason = "stub: branch observe not merged";
        r.seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
        started_ = false;
        return r;
    }
    bool started() const noexcept { return started_; }

private:
    std::chrono::steady_clock::time_point t0_;
    bool started_ = false;
};

} // namespace numaplace

#endif
