#ifndef NUMAPLACE_DETAIL_LINUX_HPP_INCLUDED
#define NUMAPLACE_DETAIL_LINUX_HPP_INCLUDED

// The Linux system calls numaplace uses, called directly (no libnuma): mbind, move_pages, and small
// /proc and /sys readers. This and detail/hwloc.hpp are the only platform code.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <iterator> // before <fstream>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <fstream>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace numaplace {
namespace detail {

// Memory policy modes, from <linux/mempolicy.h> (not all libcs ship the newer ones).
enum : int {
    mpol_default = 0,
    mpol_preferred = 1,
    mpol_bind = 2,
    mpol_interleave = 3,
    mpol_local = 4,
    mpol_preferred_many = 5,     // Linux 5.15
    mpol_weighted_interleave = 6 // Linux 6.9
};
/// Mode flag: with MPOL_BIND, automatic NUMA balancing may migrate pages among the bound nodes (5.12).
constexpr int mpol_f_numa_balancing = 1 << 13;
constexpr unsigned mpol_mf_strict = 1u << 0;
constexpr unsigned mpol_mf_move = 1u << 1;

/// A node mask in the kernel's format: bit k is OS node k.
struct kernel_nodemask {
    std::vector<unsigned long> words;
    void set(unsigned os_node) {
        constexpr unsigned bits = sizeof(unsigned long) * 8;
        if (words.size() <= os_node / bits) words.resize(os_node / bits + 1, 0ul);
        words[os_node / bits] |= 1ul << (os_node % bits);
    }
    // maxnode counts bits; the kernel ignores the last one of the count it is given (historic off-by-one),
    // so pass one more than we use.
    unsigned long maxnode() const { return words.size() * sizeof(unsigned long) * 8 + 1; }
    const unsigned long* data() const { return words.empty() ? nullptr : words.data(); }
};

/// \returns 0 or the errno of `mbind(2)`.
inline int sys_mbind(void* addr, std::size_t len, int mode, const kernel_nodemask& mask, unsigned flags) noexcept {
    long r = ::syscall(SYS_mbind, addr, len, mode, mask.data(), mask.data() ? mask.maxnode() : 0ul, flags);
    return r == 0 ? 0 : errno;
}

/// Queries (never moves, never faults in) the nodes of `count` pages: `status[i]` is the OS node or a
/// negative errno (`-ENOENT`: not present). \returns 0 or errno.
inline int sys_move_pages_query(unsigned long count, void** pages, int* status) noexcept {
    long r = ::syscall(SYS_move_pages, 0, count, pages, nullptr, status, 0);
    return r < 0 ? errno : 0;
}

/// Moves `count` pages of the calling process to the OS nodes `nodes[i]` (MPOL_MF_MOVE: pages mapped by
/// this process only). `status[i]` becomes the page's OS node or a negative errno (-EBUSY, -EACCES,
/// -ENOMEM, -ENOENT: not present, -EFAULT: not mapped or the zero page).
/// \returns 0; a positive count of pages the kernel failed to migrate (their and later statuses are then
/// not written); or -errno when the whole call was refused (EPERM under seccomp, ENODEV, E2BIG, ...).
inline long sys_move_pages(unsigned long count, void** pages, const int* nodes, int* status) noexcept {
    long r = ::syscall(SYS_move_pages, 0, count, pages, nodes, status, mpol_mf_move);
    return r < 0 ? -static_cast<long>(errno) : r;
}

// The two sizes below are cached in constant-initialised atomics, not function-local statics: a C++
// initialisation guard held by another thread at fork() is never released in the child, whose next
// partition would wait on it forever (test_attack_fork: ForkWhileAnotherThreadMakesTheGlobals...). Two
// threads computing a size at once both store the same value.
inline std::size_t page_size() noexcept {
    static std::atomic<std::size_t> cached{0};
    std::size_t size = cached.load(std::memory_order_relaxed);
    if (size == 0) {
        size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
        cached.store(size, std::memory_order_relaxed);
    }
    return size;
}

/// The PMD huge page size of transparent huge pages (2 MiB on x86-64).
inline std::size_t huge_page_size() noexcept {
    static std::atomic<std::size_t> cached{0};
    std::size_t size = cached.load(std::memory_order_relaxed);
    if (size == 0) {
        std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
        if (!(in >> size) || size == 0) size = std::size_t(2) << 20;
        cached.store(size, std::memory_order_relaxed);
    }
    return size;
}

/// First line of a file, or `fallback` when it cannot be read.
inline std::string read_line(const char* path, const std::string& fallback = std::string()) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) return fallback;
    return line;
}

/// The selected word in a sysfs choice list such as "always [madvise] never".
inline std::string bracketed(const std::string& line) {
    auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return line;
    return line.substr(open + 1, close - open - 1);
}

constexpr std::size_t round_up(std::size_t value, std::size_t to) noexcept {
    return (value + to - 1) / to * to;
}

} // namespace detail
} // namespace numaplace

#endif
