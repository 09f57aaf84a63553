#ifndef NUMAPLACE_DETAIL_PERF_COUNTERS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_PERF_COUNTERS_HPP_INCLUDED

/// \file
/// A set of perf events opened over every thread of this process (each with `inherit`, so threads they
/// create later are counted too) or over a list of CPUs (every process there), read as sums and closed;
/// why a set could not be opened, in words; what the kernel's generic node events mean on this
/// processor. Design and rationale: docs/observe.md.

#include "perf_event.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator> // before <string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// \returns why perf_event_open refused a group with `err`, in words ("no PMU: ...", "perf_event_paranoid
/// = 2 ...", "seccomp: perf_event_open EPERM", ...). `hardware`: the group asks for processor events.
inline std::string perf_refusal_reason(int err, bool hardware) {
    const std::string code = " (" + std::string(err == EACCES ? "EACCES" : err == EPERM ? "EPERM" : err == ENOENT ? "ENOENT"
                                                  : err == EOPNOTSUPP ? "EOPNOTSUPP" : err == ENOSYS ? "ENOSYS"
                                                  : err == EMFILE ? "EMFILE" : err == ENFILE ? "ENFILE" : err == EINVAL ? "EINVAL"
                                                  : std::to_string(err).c_str()) + ")";
    switch (err) {
    case ENOENT:
    case EOPNOTSUPP:
    case EINVAL:
        if (hardware && !os_core_pmu_present())
            return "no PMU: this processor/VM exposes no hardware cache events" + code;
        return std::string(hardware ? "the processor's PMU has no generic node events (PERF_COUNT_HW_CACHE_NODE)"
                                    : "the kernel has no such software event") + code;
    case EACCES: {
        int level = 0;
        if (os_perf_event_paranoid(level))
            return "perf_event_paranoid = " + std::to_string(level) +
                   " and no CAP_PERFMON: events that count in the kernel are refused" + code;
        return "perf_event_open refused: no permission" + code;
    }
    case EPERM:
        return std::string(os_seccomp_mode() == 2 ? "seccomp: perf_event_open EPERM"
                                                  : "perf_event_open refused by a security policy") + code;
    case ENOSYS:
        return std::string(os_seccomp_mode() == 2 ? "seccomp: perf_event_open ENOSYS"
                                                  : "no perf events in this kernel (CONFIG_PERF_EVENTS off)") + code;
    case EMFILE:
    case ENFILE:
        return "no file descriptor free: the descriptor limit (RLIMIT_NOFILE, ulimit -n) is reached" + code;
    default:
        return "perf_event_open: " + std::string(std::strerror(err)) + code;
    }
}

/// Events over a set of targets (threads or CPUs), one descriptor per (target, event). Move-only; closes
/// every descriptor when closed or destroyed.
class perf_event_set {
public:
    perf_event_set() = default;
    perf_event_set(const perf_event_set&) = delete;
    perf_event_set& operator=(const perf_event_set&) = delete;
    perf_event_set(perf_event_set&& o) noexcept : fds_(std::move(o.fds_)), events_(o.events_) { o.fds_.clear(); }
    perf_event_set& operator=(perf_event_set&& o) noexcept {
        if (this != &o) {
            close();
            fds_ = std::move(o.fds_);
            events_ = o.events_;
            o.fds_.clear();
        }
        return *this;
    }
    ~perf_event_set() { close(); }

    /// \effects opens `specs` on every thread of this process with `inherit`: the threads listed in
    /// /proc/self/task, again until a listing finds no thread not yet counted (a thread created by one not
    /// yet counted is then listed; one created by a counted thread is inherited). \returns 0 or the errno
    /// of the first refusal, with nothing left open.
    int open_threads(const std::vector<perf_event_spec>& specs) {
        close();
        events_ = specs.size();
        std::vector<int> done, tids;
        for (;;) {
            if (const int err = os_thread_ids(tids)) return fail(err);
            bool added = false;
            for (int tid : tids) {
                if (std::find(done.begin(), done.end(), tid) != done.end()) continue;
                done.push_back(tid);
                const std::size_t first = fds_.size();
                int err = 0;
                for (const auto& s : specs) {
                    const int fd = os_perf_event_open(s, tid, -1, true);
                    if (fd < 0) {
                        err = -fd;
                        break;
                    }
                    fds_.push_back(fd);
                }
                if (err == ESRCH) { // the thread ended meanwhile: nothing of it to count
                    while (fds_.size() > first) os_perf_close(pop());
                    continue;
                }
                if (err) return fail(err);
                added = true;
            }
            if (!added) return 0;
        }
    }

    /// \effects opens `specs` on each CPU of `cpus` (every process there). \returns 0 or the errno of
    /// the first refusal, with nothing left open.
    int open_cpus(const std::vector<perf_event_spec>& specs, const std::vector<unsigned>& cpus) {
        close();
        events_ = specs.size();
        for (unsigned cpu : cpus)
            for (const auto& s : specs) {
                const int fd = os_perf_event_open(s, -1, static_cast<int>(cpu), false);
                if (fd < 0) return fail(-fd);
                fds_.push_back(fd);
            }
        return 0;
    }

    /// \effects reads every event: `sums[k]` is event k summed over the targets, `per_target[t][k]` each
    /// target's. An event that was not counted all the time it was enabled (the PMU multiplexed it) is
    /// absent from the sums, and `partial` set. \returns 0 or the errno of the first failed read.
    int read(std::vector<std::optional<std::uint64_t>>& sums, std::vector<std::vector<std::uint64_t>>* per_target,
             bool& partial) const {
        sums.assign(events_, std::uint64_t{0});
        partial = false;
        if (per_target) per_target->assign(events_ == 0 ? 0 : fds_.size() / events_, std::vector<std::uint64_t>(events_));
        for (std::size_t i = 0; i < fds_.size(); ++i) {
            perf_reading r;
            if (const int err = os_perf_read(fds_[i], r)) return err;
            const std::size_t k = i % events_;
            if (r.running_ns < r.enabled_ns) {
                partial = true;
                sums[k].reset();
            } else if (sums[k]) {
                *sums[k] += r.value;
            }
            if (per_target) (*per_target)[i / events_][k] = r.value;
        }
        return 0;
    }

    /// \returns the number of descriptors open.
    std::size_t descriptors() const noexcept { return fds_.size(); }

    /// \effects closes every descriptor.
    void close() noexcept {
        while (!fds_.empty()) os_perf_close(pop());
    }

private:
    int pop() noexcept {
        const int fd = fds_.back();
        fds_.pop_back();
        return fd;
    }
    int fail(int err) noexcept {
        close();
        return err;
    }

    std::vector<int> fds_;
    std::size_t events_ = 0;
};

/// What PERF_COUNT_HW_CACHE_NODE read ACCESS and MISS count on a processor, by the kernel's tables
/// (arch/x86/events/intel/core.c, amd/core.c; docs/observe.md).
enum class node_event_meaning {
    unknown,          ///< not known to numaplace: neither is reported as local or remote
    local_and_remote, ///< ACCESS: demand reads served by any node's DRAM; MISS: by another node's DRAM
    local_only        ///< ACCESS: demand reads served by the local DRAM; MISS: by another node's DRAM
};

/// \returns what the node events mean on a processor of `vendor`, `family`, `model` (/proc/cpuinfo).
inline node_event_meaning node_events_meaning(const std::string& vendor, unsigned family, unsigned model) noexcept {
    if (vendor == "GenuineIntel" && family == 6) {
        // Nehalem, Westmere, Sandy Bridge, Ivy Bridge: the tables count any DRAM as ACCESS
        for (unsigned m : {26u, 30u, 31u, 46u, 37u, 44u, 47u, 42u, 45u, 58u, 62u})
            if (model == m) return node_event_meaning::local_and_remote;
        return node_event_meaning::local_only; // Haswell and later: L3_MISS_LOCAL_DRAM vs L3_MISS_REMOTE
    }
    if (vendor == "AuthenticAMD" && family < 0x17) return node_event_meaning::local_and_remote; // 0xb8e9 / 0x98e9
    return node_event_meaning::unknown;
}

} // namespace detail
} // namespace numaplace

#endif
