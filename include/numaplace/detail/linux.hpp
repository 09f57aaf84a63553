#ifndef NUMAPLACE_DETAIL_LINUX_HPP_INCLUDED
#define NUMAPLACE_DETAIL_LINUX_HPP_INCLUDED

/// \file
/// The platform layer: every system call numaplace makes (mmap, munmap, madvise, mincore, mbind,
/// get/set_mempolicy, move_pages, memfd_create, shm_open/shm_unlink, ftruncate, membarrier, perf_event_open,
/// MAP_HUGETLB and MFD_HUGETLB) is a named function
/// here, called directly (no libnuma), plus small /proc and /sys readers. Each returns 0 or the errno
/// and never throws: the layers above decide what a refusal means. Nothing else in include/ calls the
/// kernel (tests/header_deps checks it by grep); hwloc calls live in topology.hpp and arenas.hpp.

#include "strings.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator> // before <fstream>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <ctime>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
inline int os_mbind(void* addr, std::size_t len, int mode, const kernel_nodemask& mask, unsigned flags) noexcept {
    long r = ::syscall(SYS_mbind, addr, len, mode, mask.data(), mask.data() ? mask.maxnode() : 0ul, flags);
    return r == 0 ? 0 : errno;
}

/// Queries (never moves, never faults in) the nodes of `count` pages: `status[i]` is the OS node or a
/// negative errno (`-ENOENT`: not present). \returns 0 or errno.
inline int os_query_pages(unsigned long count, void** pages, int* status) noexcept {
    long r = ::syscall(SYS_move_pages, 0, count, pages, nullptr, status, 0);
    return r < 0 ? errno : 0;
}

/// Moves `count` pages of the calling process to the OS nodes `nodes[i]` (MPOL_MF_MOVE: pages mapped by
/// this process only). `status[i]` becomes the page's OS node or a negative errno (-EBUSY, -EACCES,
/// -ENOMEM, -ENOENT: not present, -EFAULT: not mapped or the zero page).
/// \returns 0; a positive count of pages the kernel failed to migrate (their and later statuses are then
/// not written); or -errno when the whole call was refused (EPERM under seccomp, ENODEV, E2BIG, ...).
inline long os_move_pages(unsigned long count, void** pages, const int* nodes, int* status) noexcept {
    long r = ::syscall(SYS_move_pages, 0, count, pages, nodes, status, mpol_mf_move);
    return r < 0 ? -static_cast<long>(errno) : r;
}

/// \effects reads the calling thread's memory policy into `mode` and `mask` (whose words must be sized
/// for the nodes asked about). \returns 0 or errno.
inline int os_get_mempolicy(int& mode, kernel_nodemask& mask) noexcept {
    long r = ::syscall(SYS_get_mempolicy, &mode, mask.words.data(), mask.maxnode() - 1, nullptr, 0ul);
    return r == 0 ? 0 : errno;
}

/// \effects sets the calling thread's memory policy (`mpol_default` with an empty mask clears it).
/// \returns 0 or errno.
inline int os_set_mempolicy(int mode, const kernel_nodemask& mask) noexcept {
    long r = ::syscall(SYS_set_mempolicy, mode, mask.data(), mask.data() ? mask.maxnode() : 0ul);
    return r == 0 ? 0 : errno;
}

/// \effects maps `length` bytes of private anonymous memory, reserving no swap (MAP_NORESERVE).
/// \returns 0 and the start in `out`, or the errno of mmap (`out` null).
inline int os_map_anonymous(std::size_t length, void*& out) noexcept {
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    out = p == MAP_FAILED ? nullptr : p;
    return p == MAP_FAILED ? (errno == 0 ? ENOMEM : errno) : 0;
}

/// \effects maps `length` bytes of the file `fd` shared and read-write from `offset` (a page multiple).
/// \returns 0 and the start in `out`, or the errno of mmap (`out` null).
inline int os_map_shared(int fd, std::size_t length, void*& out, std::size_t offset = 0) noexcept {
    void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
    out = p == MAP_FAILED ? nullptr : p;
    return p == MAP_FAILED ? (errno == 0 ? ENOMEM : errno) : 0;
}

/// \effects reads the CPUs the calling thread may run on into `set`. \returns 0 or errno.
inline int os_thread_affinity(cpu_set_t& set) noexcept {
    CPU_ZERO(&set);
    return ::sched_getaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
}
/// \effects unmaps [p, p+length). \returns 0 or errno (ENOMEM: unmapping the middle of a mapping
/// would exceed vm.max_map_count; the range then stays mapped).
inline int os_unmap(void* p, std::size_t length) noexcept { return ::munmap(p, length) == 0 ? 0 : errno; }

/// What `os_advise` tells the kernel about a page range.
enum class page_advice : int {
    dont_need = MADV_DONTNEED,      ///< drop the pages (anonymous private: zero-filled on next touch)
    no_huge_pages = MADV_NOHUGEPAGE, ///< no transparent huge page here
    huge_pages = MADV_HUGEPAGE,      ///< transparent huge pages wanted (THP "madvise" mode)
    cold = MADV_COLD,                ///< deactivate (also splits a huge page that straddles the edge)
    random = MADV_RANDOM,            ///< no read-ahead
    populate_write = 23              ///< MADV_POPULATE_WRITE (Linux 5.14): fault in writable now; a fault
                                     ///< that would raise SIGBUS (a full tmpfs) is EFAULT instead
};

/// \effects `madvise(p, length, advice)`. \returns 0 or errno.
inline int os_advise(void* p, std::size_t length, page_advice advice) noexcept {
    return ::madvise(p, length, static_cast<int>(advice)) == 0 ? 0 : errno;
}

/// \effects `mincore`: bit 0 of `vec[i]` tells whether page i of [p, p+length) is resident.
/// \returns 0 or errno (ENOMEM: part of the range is not mapped).
inline int os_resident(const void* p, std::size_t length, unsigned char* vec) noexcept {
    return ::mincore(const_cast<void*>(p), length, vec) == 0 ? 0 : errno;
}

/// \returns a new anonymous memory file (close-on-exec, and `flags`: MFD_HUGETLB...), or -errno.
inline int os_memfd(const char* name, unsigned flags = 0) noexcept {
    const long r = ::syscall(SYS_memfd_create, name, MFD_CLOEXEC | flags);
    return r < 0 ? -(errno == 0 ? EINVAL : errno) : static_cast<int>(r);
}

/// \returns the POSIX shared memory object `name` opened read-write (created, exclusively, with mode
/// 0600 when `create`), close-on-exec; or -errno.
inline int os_shm_open(const char* name, bool create) noexcept {
    const int fd = create ? ::shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                          : ::shm_open(name, O_RDWR | O_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

/// \effects removes the name of a POSIX shared memory object. \returns 0 or errno.
inline int os_shm_unlink(const char* name) noexcept { return ::shm_unlink(name) == 0 ? 0 : errno; }

/// \effects sets the size of the file `fd`. \returns 0 or errno.
inline int os_resize(int fd, std::size_t bytes) noexcept {
    return ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

/// \effects reads `bytes` into `data` from the file `fd` at `offset` (all of them, or an error; EIO at
/// the end of the file). \returns 0 or errno.
inline int os_read_at(int fd, void* data, std::size_t bytes, std::size_t offset) noexcept {
    auto* p = static_cast<char*>(data);
    while (bytes != 0) {
        const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        p += n, offset += static_cast<std::size_t>(n), bytes -= static_cast<std::size_t>(n);
    }
    return 0;
}

/// \returns 0 and the size of the file `fd` in `bytes` (and in `regular`, when given, whether it is a
/// regular file: not a device, directory or pipe), or errno.
inline int os_file_size(int fd, std::size_t& bytes, bool* regular = nullptr) noexcept {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errno;
    bytes = static_cast<std::size_t>(st.st_size);
    if (regular) *regular = S_ISREG(st.st_mode);
    return 0;
}

/// \returns 0 when `count` more file descriptors can be open at once (each opened and closed again),
/// else the errno of the first that could not (EMFILE: RLIMIT_NOFILE, `ulimit -n`; ENFILE).
inline int os_descriptors_free(int count) noexcept {
    int fds[8];
    int opened = 0, err = 0;
    for (; opened < count && opened < 8; ++opened) {
        fds[opened] = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fds[opened] < 0) {
            err = errno;
            break;
        }
    }
    while (opened > 0) ::close(fds[--opened]);
    return err;
}

/// \returns 0 and the bytes an unprivileged writer may still use on the file system of `fd` in
/// `bytes_free` (SIZE_MAX when it sets no size, as the kernel's own tmpfs of memfd_create), or errno.
inline int os_file_system_free(int fd, std::size_t& bytes_free) noexcept {
    struct statvfs st {};
    if (::fstatvfs(fd, &st) != 0) return errno;
    const std::size_t blocks = st.f_bavail, block_bytes = st.f_frsize;
    bytes_free = st.f_blocks == 0 ? SIZE_MAX : blocks * block_bytes;
    return 0;
}

/// \returns the address-space limit (RLIMIT_AS, `ulimit -v`) in bytes; SIZE_MAX when there is none or
/// it cannot be read.
inline std::size_t os_address_space_limit() noexcept {
    struct rlimit r {};
    if (::getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    const std::size_t limit = r.rlim_cur; // rlim_t is 64-bit unsigned on the 64-bit targets numaplace builds for
    return limit;
}

// PAGEMAP_SCAN (Linux 6.7, <linux/fs.h>), declared here: older uapi headers lack it.
struct pagemap_region {
    std::uint64_t start, end, categories;
};
struct pagemap_scan_arg {
    std::uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
        category_anyof_mask, return_mask;
};
constexpr std::uint64_t pagemap_is_pfn_zero = 1u << 5, pagemap_is_huge = 1u << 6;
constexpr unsigned long pagemap_scan_request = _IOWR('f', 16, pagemap_scan_arg);

/// \returns /proc/self/pagemap opened where the kernel has PAGEMAP_SCAN (Linux 6.7: an empty scan
/// succeeds), else -1.
inline int os_open_pagemap_scan() noexcept {
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    pagemap_scan_arg arg{};
    arg.size = sizeof arg;
    arg.return_mask = pagemap_is_huge;
    if (::ioctl(fd, pagemap_scan_request, &arg) < 0) { // EINVAL or ENOTTY: no PAGEMAP_SCAN
        ::close(fd);
        return -1;
    }
    return fd;
}
/// \returns whether [start, end) holds a transparent huge page mapped huge, not the huge zero page (1
/// or 0), asked of `fd` (os_open_pagemap_scan); -1 when the kernel refused.
inline int os_pagemap_scan_huge(int fd, std::uintptr_t start, std::uintptr_t end) noexcept {
    pagemap_region r{};
    pagemap_scan_arg arg{};
    arg.size = sizeof arg;
    arg.start = start;
    arg.end = end;
    arg.vec = reinterpret_cast<std::uintptr_t>(&r);
    arg.vec_len = 1;
    arg.category_mask = pagemap_is_huge | pagemap_is_pfn_zero; // huge, not the huge zero page
    arg.category_inverted = pagemap_is_pfn_zero;
    arg.return_mask = pagemap_is_huge;
    const int n = ::ioctl(fd, pagemap_scan_request, &arg);
    return n < 0 ? -1 : n > 0 ? 1 : 0;
}
inline void os_close(int fd) noexcept { ::close(fd); }
/// MAP_HUGETLB's size field (MAP_HUGE_SHIFT, <linux/mman.h>); the log2 of the page size goes there.
constexpr int hugetlb_size_shift = 26;

/// \returns log2 of `bytes` (a power of two), or 0 for anything else.
constexpr unsigned page_shift_of(std::size_t bytes) noexcept {
    return bytes != 0 && (bytes & (bytes - 1)) == 0 ? static_cast<unsigned>(__builtin_ctzll(bytes)) : 0u;
}

/// \effects replaces [at, at + length) (a range of this process's own, `at` and `length` multiples of
/// `bytes`) by a private anonymous mapping of explicit huge pages of `bytes`, without reservation
/// (MAP_NORESERVE: pages are taken at fault, from the pool of the node the range's policy names).
/// \returns 0, or the errno of mmap: EINVAL (no pool of that size: no hstate), ENOMEM, EPERM (seccomp).
/// \notes On failure the range may have been unmapped: callers put a small-page mapping back
/// (`os_map_small_fixed`).
inline int os_map_hugetlb_fixed(void* at, std::size_t length, std::size_t bytes) noexcept {
    const int size_flag = static_cast<int>(page_shift_of(bytes)) << hugetlb_size_shift;
    void* p = ::mmap(at, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB | MAP_NORESERVE | size_flag, -1, 0);
    return p == MAP_FAILED ? (errno == 0 ? ENOMEM : errno) : 0;
}

/// \effects replaces [at, at + length) (this process's own, page-aligned) by a fresh private anonymous
/// small-page mapping (as os_map_anonymous: untouched, no reservation). \returns 0 or the errno of mmap.
inline int os_map_small_fixed(void* at, std::size_t length) noexcept {
    void* p = ::mmap(at, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? (errno == 0 ? ENOMEM : errno) : 0;
}

/// \effects a forked child does not inherit [p, p + length) (MADV_DONTFORK; MADV_WIPEONFORK is EINVAL on
/// hugetlb): the parent keeps its huge pages to itself, so no copy-on-write of a huge page (which needs a
/// free page of the pool, and raises SIGBUS where there is none) can ever happen in the parent.
/// \returns 0 or the errno of madvise.
inline int os_dont_fork(void* p, std::size_t length) noexcept {
    return ::madvise(p, length, MADV_DONTFORK) == 0 ? 0 : errno;
}

/// \effects creates an anonymous file of explicit huge pages of `bytes` (`memfd_create` with MFD_HUGETLB
/// and the size's MFD_HUGE_* bits, close-on-exec; its pages come from the pools at fault).
/// \returns the descriptor, or -errno: EINVAL (no pool of that size), ENOSYS, EPERM (seccomp).
inline int os_memfd_hugetlb(const char* name, std::size_t bytes) noexcept {
    return os_memfd(name, MFD_HUGETLB | (page_shift_of(bytes) << hugetlb_size_shift));
}

/// \effects `perf_event_open(attr, pid, cpu, no group, FD_CLOEXEC)` with `attr` a filled perf_event_attr
/// (detail/perf_event.hpp fills it). \returns the descriptor or -errno.
inline int os_perf_event_open(void* attr, int pid, int cpu) noexcept {
    constexpr unsigned long fd_cloexec = 1UL << 3; // PERF_FLAG_FD_CLOEXEC (<linux/perf_event.h>)
    const long fd = ::syscall(SYS_perf_event_open, attr, pid, cpu, -1, fd_cloexec);
    return fd < 0 ? -(errno != 0 ? errno : EINVAL) : static_cast<int>(fd);
}

/// What the kernel lets this process do with memory policies and page queries, probed on one page of
/// its own (mapped, bound, queried, unmapped; nothing else changes). Where no page can be mapped (an
/// address-space limit reached), a page of static storage, never touched, is probed instead: a probe
/// that tried nothing would report every capability refused for the rest of the process.
struct policy_probe {
    bool mapped = false;              ///< a probe page was found (else nothing below was tried)
    int bind_errno = 0;               ///< mbind(MPOL_BIND): 0 or why not
    bool preferred_many = false;      ///< MPOL_PREFERRED_MANY accepted
    bool weighted_interleave = false; ///< MPOL_WEIGHTED_INTERLEAVE accepted
    bool numa_balancing_bind = false; ///< MPOL_BIND | MPOL_F_NUMA_BALANCING accepted
    int query_errno = 0;              ///< move_pages query: 0 or why not
};

/// \returns what binding to OS node `os_node` and querying pages can do here.
inline policy_probe os_probe_policies(unsigned os_node) noexcept {
    policy_probe r;
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::size_t bytes = page > 0 ? static_cast<std::size_t>(page) : 4096u;
    alignas(65536) static char spare[65536]; // the largest page size of x86-64 and AArch64 Linux
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const bool own = p != MAP_FAILED;
    if (!own) p = spare;
    r.mapped = own || bytes <= sizeof spare;
    if (!r.mapped) return r;
    try {
        kernel_nodemask mask;
        mask.set(os_node);
        r.bind_errno = os_mbind(p, bytes, mpol_bind, mask, 0);
        r.preferred_many = os_mbind(p, bytes, mpol_preferred_many, mask, 0) == 0;
        r.weighted_interleave = os_mbind(p, bytes, mpol_weighted_interleave, mask, 0) == 0;
        r.numa_balancing_bind = os_mbind(p, bytes, mpol_bind | mpol_f_numa_balancing, mask, 0) == 0;
        os_mbind(p, bytes, mpol_default, kernel_nodemask{}, 0);
    } catch (...) { // the mask's vector could not grow: binding untested, reported as refused
        r.bind_errno = ENOMEM;
    }
    void* pages[1] = {p};
    int status[1] = {0};
    r.query_errno = os_query_pages(1, pages, status);
    if (own) ::munmap(p, bytes);
    return r;
}

// The two sizes below are cached in constant-initialised atomics, not function-local statics: a C++
// initialisation guard held by another thread at fork() is never released in the child, whose next
// partition would wait on it forever (tests/stress/test_fork.cpp: fork_attack.fork_while_another_thread_makes_the_globals_for_the_first_time). Two
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
        if (!(in >> size) || size == 0) {
            size = std::size_t(2) << 20;
            if (!in.is_open() && os_descriptors_free(1) != 0) return size; // at the descriptor limit: not kept
        }
        cached.store(size, std::memory_order_relaxed);
    }
    return size;
}

/// \returns a monotonic clock in milliseconds, coarse (the last tick: a few ms), cheap (no system call
/// on Linux's vDSO).
inline std::int64_t os_now_ms() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const std::int64_t seconds = ts.tv_sec, nanoseconds = ts.tv_nsec;
    return seconds * 1000 + nanoseconds / 1000000;
}

/// \effects every running thread of the process runs a full barrier (membarrier, registered on need). \returns false: refused.
inline bool os_barrier_all_threads() noexcept {
    const auto call = [](int command) { return ::syscall(SYS_membarrier, command, 0u, 0) == 0; }; // 8: expedited, 16: register
    return call(8) || (errno == EPERM && call(16) && call(8));
}
/// First line of a file, or `fallback` when it cannot be read.
inline std::string read_line(const char* path, const std::string& fallback = std::string()) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) return fallback;
    return line;
}

/// \effects reads the kernel's list of the CPUs of node `os_node` (sysfs) into `cpus`.
/// \returns false when it cannot be read (/sys hidden).
inline bool os_node_cpus(unsigned os_node, std::vector<unsigned>& cpus) {
    const std::string path = "/sys/devices/system/node/node" + std::to_string(os_node) + "/cpulist";
    std::ifstream in(path);
    std::string line;
    if (!in.is_open()) return false;
    std::getline(in, line);
    cpus = parse_id_list(line);
    return true;
}

constexpr std::size_t round_up(std::size_t value, std::size_t to) noexcept { return (value + to - 1) / to * to; }
constexpr bool is_power_of_two(std::size_t n) noexcept { return n != 0 && (n & (n - 1)) == 0; }

/// \returns true if [p, p + bytes) rounded out to whole pages ends within the address space (its end
/// rounded up to a page does not wrap: a range reaching into the last page is refused). An empty range fits.
inline bool range_end_fits(const void* p, std::size_t bytes) noexcept {
    const std::uintptr_t top = UINTPTR_MAX - (page_size() - 1), a = reinterpret_cast<std::uintptr_t>(p);
    return bytes == 0 || (a <= top && bytes <= top - a);
}

} // namespace detail
} // namespace numaplace

#endif
