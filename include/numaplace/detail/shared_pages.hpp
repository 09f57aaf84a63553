#ifndef NUMAPLACE_DETAIL_SHARED_PAGES_HPP_INCLUDED
#define NUMAPLACE_DETAIL_SHARED_PAGES_HPP_INCLUDED

// Pages of a file that several processes map (an MPI shared window's segments): where a segment may
// start so that no page the kernel allocates for it is shared with a neighbour, and which nodes a
// process may allocate on. Rationale and measurements: docs/mpi.md ("Shared huge pages", "Cpusets").

#include "linux.hpp"
#include "strings.hpp"

#include <fcntl.h>

#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace numaplace {
namespace detail {

// \returns the unit that a segment of a shared file is aligned and sized to: the PMD huge page size
// where the kernel may back shared memory (tmpfs, /dev/shm) with transparent huge pages at all, else
// the page size. A shmem huge page is allocated under the policy of its first small page and covers
// 2 MiB of the file, whichever process faults it; the mount option (huge=always) and the sysfs setting
// (shmem_enabled=force) can change at any time, so only "deny" (no shmem huge page anywhere) lets the
// page size do; where the setting cannot be read (/sys hidden, or a kernel without THP) the huge page
// is kept: its padding costs address space, never memory.
inline std::size_t shared_segment_unit() {
    const std::string mode = read_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    if (mode.find("[deny]") != std::string::npos) return page_size();
    return huge_page_size() > page_size() ? huge_page_size() : page_size();
}

// \returns true and the offset in its file of the byte at `p` in `offset`, from /proc/self/maps;
// false when `p` is in no file mapping or /proc cannot be read.
inline bool mapped_file_offset(const void* p, std::uint64_t& offset) {
    std::ifstream maps("/proc/self/maps");
    if (!maps.is_open()) return false;
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream in(line);
        std::uintptr_t start = 0, end = 0;
        std::uint64_t pgoff = 0;
        char dash = 0;
        std::string perms;
        if (!(in >> std::hex >> start >> dash >> end >> perms >> pgoff)) continue;
        if (a < start || a >= end) continue;
        offset = pgoff + (a - start);
        return true;
    }
    return false;
}

// \returns the first address at or after `base` whose offset in its file is a multiple of `unit` (a
// power of two, at least a page): the same byte of the file in every process that maps it. Where the
// offset cannot be read, the address itself is aligned (the kernel places a shmem mapping that may
// hold huge pages at an address congruent to its offset).
inline void* shared_unit_start(void* base, std::size_t unit) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(base);
    std::uint64_t offset = a;
    if (unit > page_size() && !mapped_file_offset(base, offset)) offset = a;
    const std::uint64_t skip = (unit - offset % unit) % unit;
    return static_cast<char*>(base) + skip;
}

// Words of a bit set of the kernel's node numbers: the nodes this process may allocate on.
constexpr unsigned node_mask_words = 16; // 1024 nodes, MAX_NUMNODES of the largest kernels

// \effects sets in `words` (node_mask_words of them) the kernel's numbers of the nodes this process may
// allocate memory on (Mems_allowed_list: its cpuset's cpuset.mems).
// \returns false when /proc cannot be read (nothing known: a caller must assume any node may be missing).
inline bool allowed_memory_nodes(unsigned long long* words) {
    for (unsigned w = 0; w < node_mask_words; ++w) words[w] = 0;
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("Mems_allowed_list:", 0) != 0) continue;
        for (unsigned n : parse_id_list(line.substr(line.find(':') + 1)))
            if (n < node_mask_words * 64) words[n / 64] |= 1ull << (n % 64);
        return true;
    }
    return false;
}

// \returns the directory where the MPI library makes the files of shared windows: Open MPI's
// osc_sm_backing_directory where the environment sets it (OMPI_MCA_osc_sm_backing_directory), else
// /dev/shm (Open MPI's default on Linux, and MPICH's).
inline std::string shared_window_directory() {
    const char* dir = std::getenv("OMPI_MCA_osc_sm_backing_directory");
    return dir != nullptr && *dir != '\0' ? dir : "/dev/shm";
}

// \returns true and the bytes an unprivileged process may still write to the file system of `dir` in
// `bytes` (through os_file_system_free: SIZE_MAX where it sets no size); false when it cannot be
// read (no such directory: nothing to check).
inline bool directory_free_bytes(const std::string& dir, unsigned long long& bytes) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    std::size_t free_bytes = 0;
    const int err = os_file_system_free(fd, free_bytes);
    os_close(fd);
    if (err != 0) return false;
    bytes = free_bytes;
    return true;
}

} // namespace detail
} // namespace numaplace

#endif
