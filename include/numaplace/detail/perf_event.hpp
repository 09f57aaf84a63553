#ifndef NUMAPLACE_DETAIL_PERF_EVENT_HPP_INCLUDED
#define NUMAPLACE_DETAIL_PERF_EVENT_HPP_INCLUDED

/// \file
/// Observation's events (observe.hpp): the attributes of a `perf_event_open(2)` counting event (the call
/// itself is detail/linux.hpp's os_perf_event_open) and what decides whether it may be used
/// (perf_event_paranoid, CAP_PERFMON, the PMUs the kernel exposes), the threads of this process. Every
/// function returns a value or an errno and never throws.

#include "linux.hpp"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator> // before <string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace numaplace {
namespace detail {

/// One event to open: the kernel's generic events only (never a raw event code).
struct perf_event_spec {
    std::uint32_t type = PERF_TYPE_SOFTWARE; ///< PERF_TYPE_SOFTWARE or PERF_TYPE_HW_CACHE
    std::uint64_t config = 0;
};

/// Test seam: when set, `os_perf_event_open` returns what it returns (a descriptor or -errno) instead of
/// asking the kernel. Only the tests set it (tests/unit/test_observe.cpp: each refusal on purpose).
using perf_open_function = int (*)(const perf_event_spec&, int pid, int cpu) noexcept;
inline std::atomic<perf_open_function> perf_open_override{nullptr};

/// \effects opens a counting event (not sampling), enabled at once, close-on-exec, kernel included:
/// `pid` >= 0 and `cpu` -1 counts that thread wherever it runs, and with `inherit` the threads and
/// processes it creates from now on; `pid` -1 and `cpu` >= 0 counts every process on that CPU.
/// \returns the descriptor or -errno.
inline int os_perf_event_open(const perf_event_spec& spec, int pid, int cpu, bool inherit) noexcept {
    if (perf_open_function f = perf_open_override.load(std::memory_order_acquire)) return f(spec, pid, cpu);
    perf_event_attr attr;
    std::memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = spec.type;
    attr.config = spec.config;
    attr.inherit = inherit ? 1 : 0;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    return os_perf_event_open(&attr, pid, cpu);
}

/// What one read of a counting event gives.
struct perf_reading {
    std::uint64_t value = 0;
    std::uint64_t enabled_ns = 0; ///< time the event was enabled
    std::uint64_t running_ns = 0; ///< time it was on a counter (less: multiplexed, the value is partial)
};

/// \effects reads event `fd` into `out` (its own count and its inherited children's). \returns 0 or errno.
inline int os_perf_read(int fd, perf_reading& out) noexcept {
    std::uint64_t v[3] = {0, 0, 0};
    const ssize_t n = ::read(fd, v, sizeof v);
    if (n != static_cast<ssize_t>(sizeof v)) return n < 0 ? errno : EIO;
    out.value = v[0];
    out.enabled_ns = v[1];
    out.running_ns = v[2];
    return 0;
}

inline void os_perf_close(int fd) noexcept { ::close(fd); }

/// \effects lists the threads of this process (/proc/self/task) into `tids`. \returns 0 or errno.
inline int os_thread_ids(std::vector<int>& tids) {
    tids.clear();
    DIR* d = ::opendir("/proc/self/task");
    if (!d) return errno != 0 ? errno : ENOENT;
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        tids.push_back(std::atoi(e->d_name));
    }
    ::closedir(d);
    return 0;
}

/// \returns kernel.perf_event_paranoid, or nothing when it cannot be read (no perf events, /proc hidden).
inline bool os_perf_event_paranoid(int& level) noexcept {
    const int fd = ::open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[16] = {};
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    level = std::atoi(buf);
    return true;
}

/// \returns whether this process has CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in its effective set, the
/// capabilities that lift perf_event_paranoid (read from /proc/self/status; false if unreadable).
inline bool os_perf_privileged() noexcept {
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char* p = std::strstr(buf, "CapEff:");
    if (!p) return false;
    const unsigned long long caps = std::strtoull(p + 7, nullptr, 16);
    return (caps >> 38 & 1u) != 0 || (caps >> 21 & 1u) != 0;
}

/// \returns whether the kernel exposes a PMU of the processor's core events (a `cpu`, `cpu_core` or
/// `armv8_pmuv3*` device under /sys/bus/event_source/devices); false in most VMs.
inline bool os_core_pmu_present() noexcept {
    DIR* d = ::opendir("/sys/bus/event_source/devices");
    if (!d) return false;
    bool found = false;
    while (dirent* e = ::readdir(d)) {
        const char* n = e->d_name;
        if (std::strcmp(n, "cpu") == 0 || std::strcmp(n, "cpu_core") == 0 || std::strcmp(n, "cpu_atom") == 0 ||
            std::strncmp(n, "armv8_", 6) == 0 || std::strncmp(n, "armv7_", 6) == 0)
            found = true;
    }
    ::closedir(d);
    return found;
}

/// \returns this process's seccomp mode from /proc/self/status (0 none, 1 strict, 2 filter; -1 unknown).
inline int os_seccomp_mode() noexcept {
    const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char* p = std::strstr(buf, "\nSeccomp:");
    return p ? std::atoi(p + 9) : -1;
}

/// \effects reads the first processor's vendor, family and model from /proc/cpuinfo (x86). \returns
/// false where there are none (another architecture, /proc hidden).
inline bool os_cpu_model(std::string& vendor, unsigned& family, unsigned& model) {
    const int fd = ::open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[2048];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char* v = std::strstr(buf, "vendor_id");
    const char* f = std::strstr(buf, "cpu family");
    const char* m = std::strstr(buf, "\nmodel\t");
    if (!v || !f || !m) return false;
    v = std::strchr(v, ':');
    f = std::strchr(f, ':');
    m = std::strchr(m, ':');
    if (!v || !f || !m) return false;
    vendor.assign(v + 2, std::strcspn(v + 2, "\n"));
    family = static_cast<unsigned>(std::atoi(f + 1));
    model = static_cast<unsigned>(std::atoi(m + 1));
    return true;
}

} // namespace detail
} // namespace numaplace

#endif
