#ifndef NUMAPLACE_DETAIL_HUGETLB_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HUGETLB_HPP_INCLUDED

/// \file
/// Explicit huge pages (hugetlb): the sysfs, procfs and cgroup readers of the per-node pools and the
/// limits on them (the system calls themselves, mmap with MAP_HUGETLB and memfd_create with MFD_HUGETLB,
/// are detail/linux.hpp's os_map_hugetlb_fixed, os_map_small_fixed, os_dont_fork, os_memfd_hugetlb). Each function returns 0 or an errno (or a value read, -1 when unreadable) and never
/// throws; huge_pages.hpp and place.hpp decide what a refusal means. Design: docs/huge-pages.md.

#include "linux.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace numaplace {
namespace detail {


/// \returns the huge page sizes the kernel has a pool (an hstate) for, in bytes, ascending: the
/// directories /sys/kernel/mm/hugepages/hugepages-<kB>kB. Empty without hugetlb (or /sys hidden).
inline std::vector<std::size_t> os_hugetlb_sizes() {
    std::vector<std::size_t> sizes;
    DIR* d = ::opendir("/sys/kernel/mm/hugepages");
    if (!d) return sizes;
    while (const dirent* e = ::readdir(d)) {
        unsigned long kb = 0;
        if (std::sscanf(e->d_name, "hugepages-%lukB", &kb) == 1 && kb != 0) sizes.push_back(kb << 10);
    }
    ::closedir(d);
    for (std::size_t i = 1; i < sizes.size(); ++i) // insertion sort: two or three sizes
        for (std::size_t j = i; j > 0 && sizes[j - 1] > sizes[j]; --j) std::swap(sizes[j - 1], sizes[j]);
    return sizes;
}

/// The counters of one pool (a page size on a node, or system-wide), as the kernel reports them; -1 where
/// a counter could not be read.
struct hugetlb_counts {
    long total = -1;   ///< nr_hugepages: pages in the pool (persistent and surplus)
    long free = -1;    ///< free_hugepages: pages no mapping holds
    long surplus = -1; ///< surplus_hugepages: pages above the persistent count (overcommit)
};

/// \returns the number in the first line of `path`, or -1.
inline long os_read_count(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return -1;
    long v = -1;
    if (std::fscanf(f, "%ld", &v) != 1) v = -1;
    std::fclose(f);
    return v;
}

/// \returns the directory of the pool of `bytes` pages on node `os_node` (sysfs).
inline std::string hugetlb_node_dir(unsigned os_node, std::size_t bytes) {
    return "/sys/devices/system/node/node" + std::to_string(os_node) + "/hugepages/hugepages-" +
           std::to_string(bytes >> 10) + "kB/";
}

/// \returns the counters of the pool of `bytes` pages on node `os_node` (all -1: no such pool).
inline hugetlb_counts os_hugetlb_node_counts(unsigned os_node, std::size_t bytes) {
    const std::string dir = hugetlb_node_dir(os_node, bytes);
    hugetlb_counts c;
    c.total = os_read_count(dir + "nr_hugepages");
    c.free = os_read_count(dir + "free_hugepages");
    c.surplus = os_read_count(dir + "surplus_hugepages");
    return c;
}

/// \returns the page size of the file open at `fd`: its st_blksize, which hugetlbfs (and a MFD_HUGETLB
/// memfd) sets to its huge page size and tmpfs to the small page; 0 when fstat fails.
inline std::size_t os_file_page_bytes(int fd) noexcept {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_blksize <= 0) return 0;
    return static_cast<std::size_t>(st.st_blksize);
}

/// \returns this process's id (a forked child's differs from its parent's).
inline int os_process_id() noexcept { return ::getpid(); }

/// \returns RLIMIT_MEMLOCK's soft limit in bytes (SIZE_MAX: unlimited or unreadable).
inline std::size_t os_memlock_limit() noexcept {
    rlimit r{};
    if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    return r.rlim_cur;
}

/// \returns whether a hugetlbfs is mounted (/proc/mounts). MAP_HUGETLB needs none (the kernel's own
/// internal mount serves it); shared huge-page files do.
inline bool os_hugetlbfs_mounted() {
    std::FILE* f = std::fopen("/proc/mounts", "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) {
        char dev[128], dir[256], type[64];
        found = std::sscanf(line, "%127s %255s %63s", dev, dir, type) == 3 && std::strcmp(type, "hugetlbfs") == 0;
    }
    std::fclose(f);
    return found;
}

/// The hugetlb controller's limit of this process's cgroup for one page size: cgroup v2's
/// `hugetlb.<size>.max` and `.current`, or v1's `limit_in_bytes` and `usage_in_bytes`.
struct hugetlb_cgroup_limit {
    bool visible = false;  ///< a hugetlb controller file of this cgroup could be read
    bool limited = false;  ///< the limit is not "max" (v2) or the v1 maximum
    std::size_t limit = 0; ///< bytes (when limited)
    std::size_t usage = 0; ///< bytes charged now
    std::string file;      ///< the file read
};

/// \returns the kernel's name of a hugetlb page size in cgroup files: "2MB", "1GB", "64KB".
inline std::string hugetlb_cgroup_size_name(std::size_t bytes) {
    if (bytes >= (std::size_t(1) << 30)) return std::to_string(bytes >> 30) + "GB";
    if (bytes >= (std::size_t(1) << 20)) return std::to_string(bytes >> 20) + "MB";
    return std::to_string(bytes >> 10) + "KB";
}

/// \returns the hugetlb cgroup limit of this process for pages of `bytes` (not visible: no controller
/// file found, the common case outside containers).
inline hugetlb_cgroup_limit os_hugetlb_cgroup_limit(std::size_t bytes) {
    hugetlb_cgroup_limit r;
    std::FILE* f = std::fopen("/proc/self/cgroup", "r");
    if (!f) return r;
    char line[1024];
    std::string v2, v1;
    while (std::fgets(line, sizeof line, f)) {
        std::string s(line);
        if (!s.empty() && s.back() == '\n') s.pop_back();
        const auto a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = s.substr(a + 1, b - a - 1), path = s.substr(b + 1);
        if (s.compare(0, a, "0") == 0 && controllers.empty()) v2 = path;
        else if (controllers.find("hugetlb") != std::string::npos) v1 = path;
    }
    std::fclose(f);
    const std::string size = hugetlb_cgroup_size_name(bytes);
    const auto read_value = [](const std::string& path, std::string& out) {
        std::FILE* g = std::fopen(path.c_str(), "r");
        if (!g) return false;
        char buf[64] = {};
        const bool ok = std::fgets(buf, sizeof buf, g) != nullptr;
        std::fclose(g);
        out = buf;
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
        return ok;
    };
    std::string value, current;
    if (!v1.empty()) {
        r.file = "/sys/fs/cgroup/hugetlb" + v1 + "/hugetlb." + size + ".limit_in_bytes";
        if (read_value(r.file, value)) {
            r.visible = true;
            const unsigned long long v = std::strtoull(value.c_str(), nullptr, 10);
            r.limited = v < (1ull << 62); // v1's "no limit" is PAGE_COUNTER_MAX pages in bytes
            r.limit = static_cast<std::size_t>(v);
            if (read_value("/sys/fs/cgroup/hugetlb" + v1 + "/hugetlb." + size + ".usage_in_bytes", current))
                r.usage = static_cast<std::size_t>(std::strtoull(current.c_str(), nullptr, 10));
            return r;
        }
    }
    r.file = "/sys/fs/cgroup" + (v2 == "/" ? std::string() : v2) + "/hugetlb." + size + ".max";
    if (read_value(r.file, value)) {
        r.visible = true;
        r.limited = value != "max";
        if (r.limited) r.limit = static_cast<std::size_t>(std::strtoull(value.c_str(), nullptr, 10));
        std::string cur_file = r.file.substr(0, r.file.size() - 3) + "current";
        if (read_value(cur_file, current)) r.usage = static_cast<std::size_t>(std::strtoull(current.c_str(), nullptr, 10));
    }
    return r;
}

/// Bytes of a range by the page size the kernel maps them with (/proc/self/smaps).
struct mapped_page_sizes {
    std::vector<std::pair<std::size_t, std::size_t>> by_size; ///< {KernelPageSize bytes, bytes of the range}
    std::size_t transparent_huge = 0; ///< AnonHugePages of mappings wholly inside the range (bytes)
};

/// \effects reads /proc/self/smaps for the mappings overlapping [lo, hi). \returns false when unreadable.
inline bool os_mapped_page_sizes(std::uintptr_t lo, std::uintptr_t hi, mapped_page_sizes& out) {
    std::FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[256];
    bool at_start = true;
    unsigned long a = 0, b = 0;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long x = 0, y = 0, kb = 0;
        if (at_start && std::sscanf(line, "%lx-%lx ", &x, &y) == 2) {
            a = x;
            b = y;
        } else if (at_start && b > lo && a < hi && std::sscanf(line, "KernelPageSize: %lu kB", &kb) == 1) {
            const std::size_t bytes = (b < hi ? b : hi) - (a > lo ? a : lo), page = kb << 10;
            bool found = false;
            for (auto& e : out.by_size)
                if (e.first == page) e.second += bytes, found = true;
            if (!found) out.by_size.emplace_back(page, bytes);
        } else if (at_start && a >= lo && b <= hi && std::sscanf(line, "AnonHugePages: %lu kB", &kb) == 1) {
            out.transparent_huge += kb << 10;
        }
        at_start = std::strchr(line, '\n') != nullptr;
    }
    std::fclose(f);
    return true;
}

} // namespace detail
} // namespace numaplace

#endif
