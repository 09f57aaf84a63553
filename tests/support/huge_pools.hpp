// Explicit huge page pools for the tests: each node's sysfs files read and written, and pools reserved for
// a scope (then set back). Reserving needs root: the guests, or a host where a test asks for it.
#ifndef NUMAPLACE_TEST_HUGE_POOLS_HPP
#define NUMAPLACE_TEST_HUGE_POOLS_HPP

#include <numaplace/topology.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace numaplace_test {

constexpr std::size_t two_mib = std::size_t(2) << 20;

/// \returns the sysfs file `name` (nr_hugepages, free_hugepages, ...) of node `node`'s pool of `page` bytes.
inline std::string pool_file(int node, const char* name, std::size_t page = two_mib) {
    return "/sys/devices/system/node/node" + std::to_string(numaplace::topology::get().at(node).os_index) +
           "/hugepages/hugepages-" + std::to_string(page >> 10) + "kB/" + name;
}
/// \returns the number in the file at `path`, or -1.
inline long read_count(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    long v = -1;
    if (f) {
        if (std::fscanf(f, "%ld", &v) != 1) v = -1;
        std::fclose(f);
    }
    return v;
}
/// \effects writes `v` to the file at `path`. \returns whether it could.
inline bool write_count(const std::string& path, long v) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    const bool ok = std::fprintf(f, "%ld\n", v) > 0;
    return std::fclose(f) == 0 && ok;
}
/// \returns node `node`'s free 2 MiB pages, or -1.
inline long free_pages(int node) { return read_count(pool_file(node, "free_hugepages")); }
/// \returns every node's free 2 MiB pages, in node order.
inline std::vector<long> frees() {
    std::vector<long> f;
    for (int k = 0; k < static_cast<int>(numaplace::topology::get().size()); ++k) f.push_back(free_pages(k));
    return f;
}

/// \returns whether a test may reserve pools: in a guest (NUMAPLACE_GUEST_LAYOUT set; its test process is
/// root), or on a host that asks for it (NUMAPLACE_TEST_RESERVE_HUGE_PAGES=1).
inline bool may_reserve() {
    const char* guest = std::getenv("NUMAPLACE_GUEST_LAYOUT");
    const char* asked = std::getenv("NUMAPLACE_TEST_RESERVE_HUGE_PAGES");
    return (guest && *guest) || (asked && std::strcmp(asked, "1") == 0);
}

/// \effects moves this process into the cgroup v2 `/sys/fs/cgroup/<name>`, made with the hugetlb
/// controller and `hugetlb.2MB.max` of `limit_bytes` (cgroup2 mounted first where it is not). Guests only,
/// in a child (run_child): it changes the machine's cgroups. \returns 0, or the step that failed: 80 the
/// mount, 81 enabling the controller, 82 the limit, 83 moving the process.
inline int enter_hugetlb_cgroup(const std::string& name, long limit_bytes) {
    if (::access("/sys/fs/cgroup/cgroup.controllers", R_OK) != 0 && ::mount("none", "/sys/fs/cgroup", "cgroup2", 0, nullptr) != 0)
        return 80;
    std::FILE* f = std::fopen("/sys/fs/cgroup/cgroup.subtree_control", "w");
    if (!f) return 81;
    const bool enabled = std::fputs("+hugetlb", f) >= 0;
    if (std::fclose(f) != 0 || !enabled) return 81;
    const std::string dir = "/sys/fs/cgroup/" + name;
    ::mkdir(dir.c_str(), 0755); // may exist from an earlier run
    if (!write_count(dir + "/hugetlb.2MB.max", limit_bytes)) return 82;
    if (!write_count(dir + "/cgroup.procs", ::getpid())) return 83;
    return 0;
}

/// Sets node k's pool of 2 MiB pages to counts[k] pages, and back when it ends.
class reserved_pools {
public:
    explicit reserved_pools(const std::vector<long>& counts) {
        for (int k = 0; k < static_cast<int>(counts.size()); ++k) {
            const std::string f = pool_file(k, "nr_hugepages");
            saved_.emplace_back(f, read_count(f));
            ok_ = write_count(f, counts[static_cast<std::size_t>(k)]) && free_pages(k) == counts[static_cast<std::size_t>(k)] && ok_;
        }
    }
    ~reserved_pools() {
        for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) write_count(it->first, it->second);
    }
    reserved_pools(const reserved_pools&) = delete;
    reserved_pools& operator=(const reserved_pools&) = delete;
    /// \returns whether every pool holds exactly its count, all free.
    bool ok() const { return ok_; }

private:
    std::vector<std::pair<std::string, long>> saved_;
    bool ok_ = true;
};

} // namespace numaplace_test

// Reserves the pools `counts` for the rest of the test as `name`, or skips where no pool may be reserved.
#define NUMAPLACE_RESERVE_OR_SKIP(name, ...)                                                                             \
    if (!numaplace_test::may_reserve())                                                                              \
        GTEST_SKIP() << "reserves huge page pools: guests only (NUMAPLACE_TEST_RESERVE_HUGE_PAGES=1 on a host)";      \
    numaplace_test::reserved_pools name(__VA_ARGS__);                                                                \
    ASSERT_TRUE(name.ok()) << "could not reserve 2 MiB pages through " << numaplace_test::pool_file(0, "nr_hugepages")

#endif
