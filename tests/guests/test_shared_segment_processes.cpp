// Guest-only: several processes pinned to different nodes share one MAP_SHARED region, each owning the
// notes' 4, 3 and 3 pages. Reproduces the notes' pitfall (a first toucher faults in its neighbours'
// pages on its own node) where the 6.1 kernel shows it, and shows what fixes it. Skips on one node.
// What was observed, and why, is written up in tests/guests/README.md ("Shared segments").
#include <numaplace/shared_segment.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace numaplace;

namespace {
const std::size_t page = detail::page_size();
constexpr std::size_t first[3] = {0, 4, 7};
constexpr std::size_t count[3] = {4, 3, 3};

#define REQUIRE_TWO_CPU_NODES()                                                                          \
    do {                                                                                                 \
        if (topology::get().with_cpus().size() < 2) GTEST_SKIP() << "needs two nodes with CPUs (guests)"; \
    } while (0)

// Process k's node: the nodes with CPUs in turn (2node: 0 1 0, 4node: 0 1 2, memonly: 0 1 0).
int node_of(std::size_t k) {
    node_set nodes = topology::get().with_cpus();
    return nodes[k % nodes.size()];
}

// Runs process k pinned to a CPU of node_of(k): it reads or writes one byte of each of its pages.
void run_processes(char* p, bool write, const std::vector<std::size_t>& order = {0, 1, 2}) {
    for (std::size_t k : order) {
        pid_t pid = ::fork();
        if (pid == 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(topology::get().at(node_of(k)).cpus.front(), &set);
            if (::sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(2);
            volatile char sink = 0;
            for (std::size_t i = 0; i < count[k]; ++i) {
                char* q = p + (first[k] + i) * page;
                if (write) *q = static_cast<char>(k + 1);
                else sink = sink + *q;
            }
            ::_exit(0);
        }
        int status = 0;
        ::waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "process " << k;
    }
}

// The node of each of the 10 pages as this process's page query sees them (-1: no page), after
// mapping here every page the region already holds (mincore), so nothing is allocated by asking.
std::vector<int> nodes_of_pages(char* p) {
    unsigned char resident[10] = {};
    EXPECT_EQ(::mincore(p, 10 * page, resident), 0);
    std::vector<int> nodes;
    for (std::size_t i = 0; i < 10; ++i) {
        if (resident[i] & 1) (void)*static_cast<volatile char*>(p + i * page);
        page_histogram h = where(p + i * page, page);
        int n = -1;
        for (std::size_t id = 0; id < h.per_node.size(); ++id)
            if (h.per_node[id]) n = static_cast<int>(id);
        nodes.push_back(n);
    }
    return nodes;
}

// Every page on its owner's node.
std::vector<int> owners() {
    std::vector<int> v;
    for (std::size_t k = 0; k < 3; ++k) v.insert(v.end(), count[k], node_of(k));
    return v;
}

std::string read_first_line(const char* path) { return detail::read_line(path, "?"); }

bool write_file(const char* path, const char* value) {
    std::ofstream out(path);
    return static_cast<bool>(out << value << std::flush);
}

// Sets shmem_enabled for the lifetime of the object (the guests run as root).
class shmem_thp {
public:
    explicit shmem_thp(const char* mode) : old_(detail::bracketed(read_first_line(path))) {
        ok_ = write_file(path, mode) && detail::bracketed(read_first_line(path)) == mode;
    }
    ~shmem_thp() { write_file(path, old_.c_str()); }
    bool ok() const { return ok_; }

private:
    static constexpr const char* path = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
    std::string old_;
    bool ok_ = false;
};

// The read-ahead test's file: 256 pages made for the test (not this binary's own pages: a Release build's
// loader has read its last pages, a Debug build's not, so such a test depended on the build type), on a
// file system whose page cache read-ahead fills (not tmpfs, which has no read-ahead). Where its directory
// is writable (a multi-node host) the test writes it fresh, fsyncs it and drops it from the page cache;
// in the guests every writable directory is a tmpfs, so the build wrote it on the host
// (tests/CMakeLists.txt) and the guest reads it over 9p, dropping whatever it cached. NUMAPLACE_READAHEAD_FILE
// (environment) overrides the path. \returns a read-only fd with no page of the file cached, or -1.
constexpr std::size_t readahead_file_pages = 256;

std::string readahead_test_path() {
    const char* given = std::getenv("NUMAPLACE_READAHEAD_FILE");
    return given && *given ? given : NUMAPLACE_READAHEAD_FILE;
}

// Whether `path`'s directory is on a tmpfs or an overlay of one (the guests' /tmp is the host's /tmp under
// a tmpfs overlay: a file written there would be a tmpfs copy, without read-ahead; the host's copy, read
// through the overlay from 9p, has it).
bool on_memory_file_system(const std::string& path) {
    const std::string dir = path.substr(0, path.find_last_of('/') + 1);
    struct statfs fs {};
    if (::statfs(dir.empty() ? "." : dir.c_str(), &fs) != 0) return false;
    const auto type = static_cast<unsigned long>(fs.f_type);
    return type == 0x01021994ul /* TMPFS_MAGIC */ || type == 0x794c7630ul /* OVERLAYFS_SUPER_MAGIC */;
}

int readahead_test_file() {
    const std::string path = readahead_test_path();
    const int out = on_memory_file_system(path) ? -1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0 && on_memory_file_system(path)) errno = EROFS; // read the host's copy
    if (out >= 0) { // fresh: every page its own bytes
        std::vector<char> buf(page);
        bool ok = true;
        for (std::size_t i = 0; i < readahead_file_pages && ok; ++i) {
            std::snprintf(buf.data(), buf.size(), "numaplace read-ahead test page %zu\n", i);
            ok = ::write(out, buf.data(), page) == static_cast<ssize_t>(page);
        }
        ok = ok && ::fsync(out) == 0;
        ::close(out);
        EXPECT_TRUE(ok) << "cannot write " << path << ": " << std::strerror(errno);
        if (!ok) return -1;
    } else {
        EXPECT_TRUE(errno == EROFS || errno == EACCES || errno == EPERM)
            << "cannot write " << path << ": " << std::strerror(errno);
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno) << " (the build writes it: reconfigure)";
    if (fd < 0) return -1;
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    EXPECT_GE(static_cast<std::size_t>(st.st_size), readahead_file_pages * page) << path;
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0) << path;
    if (static_cast<std::size_t>(st.st_size) < readahead_file_pages * page) {
        ::close(fd);
        return -1;
    }
    return fd;
}

char* map_memfd(int& fd) {
    fd = static_cast<int>(::syscall(SYS_memfd_create, "pitfall", MFD_CLOEXEC));
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(10 * page)), 0);
    void* p = ::mmap(nullptr, 10 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<char*>(p);
}
} // namespace

// shmem_enabled=never (the Debian default) and fault-around on: plain first touch is exact. Fault-around
// (do_fault_around -> filemap_map_pages) only maps pages the file already holds, it allocates none, and
// shmem has no read-ahead; each shmem page is allocated by the process that faults it, on its node.
TEST(shared_segment_processes, small_shmem_pages_follow_their_first_toucher) {
    REQUIRE_TWO_CPU_NODES();
    EXPECT_EQ(detail::bracketed(read_first_line("/sys/kernel/mm/transparent_hugepage/shmem_enabled")), "never");
    ::mount("debugfs", "/sys/kernel/debug", "debugfs", 0, nullptr); // may be mounted already
    const std::string around = read_first_line("/sys/kernel/debug/fault_around_bytes");
    EXPECT_EQ(around, "65536") << "fault-around is on (16 pages) in the 6.1 guest kernel";
    for (bool write : {true, false})
        for (const auto& order : {std::vector<std::size_t>{0, 1, 2}, std::vector<std::size_t>{2, 1, 0}}) {
            int fd = -1;
            char* p = map_memfd(fd);
            run_processes(p, write, order);
            EXPECT_EQ(nodes_of_pages(p), owners()) << (write ? "write" : "read") << " order " << order[0];
            ::munmap(p, 10 * page);
            ::close(fd);
        }
}

// The pitfall on shmem: with shmem huge pages (shmem_enabled=advise + MADV_HUGEPAGE, or always), the
// first toucher's fault allocates one 2 MiB folio that holds all 10 pages, on its node; MADV_RANDOM
// changes nothing (it only turns off file read-ahead). The numaplace segment keeps huge pages off its
// mappings (MADV_NOHUGEPAGE, unless every part edge is huge-page aligned) and binds each part: exact.
TEST(shared_segment_processes, shmem_huge_page_puts_every_part_on_the_first_touchers_node) {
    REQUIRE_TWO_CPU_NODES();
    for (const char* mode : {"advise", "always", "force"}) {
        shmem_thp thp(mode);
        ASSERT_TRUE(thp.ok()) << "cannot set shmem_enabled=" << mode << " (not root?)";
        for (int advice : {0, MADV_RANDOM}) {
            int fd = -1;
            char* p = map_memfd(fd);
            ASSERT_EQ(::madvise(p, 10 * page, MADV_HUGEPAGE), 0);
            if (advice) ASSERT_EQ(::madvise(p, 10 * page, advice), 0);
            run_processes(p, true);
            EXPECT_EQ(nodes_of_pages(p), std::vector<int>(10, node_of(0))) << mode << " advice " << advice;
            ::munmap(p, 10 * page);
            ::close(fd);
        }
        for (const auto& order : {std::vector<std::size_t>{0, 1, 2}, std::vector<std::size_t>{2, 1, 0}}) {
            shared_segment s = shared_segment::create(
                segment_layout({{node_of(0), 4}, {node_of(1), 3}, {node_of(2), 3}}));
            ASSERT_TRUE(s.bound());
            run_processes(s.data(), true, order);
            EXPECT_EQ(nodes_of_pages(s.data()), owners()) << mode << " order " << order[0];
            for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(s.where(k).on(node_of(k)), count[k]);
        }
    }
}

// The notes' read-ahead pitfall, on a file-backed MAP_SHARED mapping (a file made for the test, read
// over 9p in the guests: see readahead_test_file): the first reader's fault reads ahead a window of pages
// into the page cache on its node, the other processes then find theirs there. MADV_RANDOM turns
// read-ahead off: each fault reads its own page, on its reader's node.
TEST(shared_segment_processes, file_read_ahead_and_madv_random) {
    REQUIRE_TWO_CPU_NODES();
    const int fd = readahead_test_file();
    ASSERT_GE(fd, 0);
    // two disjoint 10-page windows, each far from the other's read-ahead and dropped again before use
    for (int advice : {0, MADV_RANDOM}) {
        const off_t offset = static_cast<off_t>((advice ? 192 : 48) * page);
        ASSERT_EQ(::posix_fadvise(fd, offset, static_cast<off_t>(10 * page), POSIX_FADV_DONTNEED), 0);
        void* m = ::mmap(nullptr, 10 * page, PROT_READ, MAP_SHARED, fd, offset);
        ASSERT_NE(m, MAP_FAILED);
        char* p = static_cast<char*>(m);
        if (advice) ASSERT_EQ(::madvise(p, 10 * page, advice), 0);
        unsigned char resident[10] = {};
        ASSERT_EQ(::mincore(p, 10 * page, resident), 0);
        for (unsigned char r : resident)
            ASSERT_EQ(r & 1, 0) << "the window is still in the page cache after POSIX_FADV_DONTNEED (a tmpfs file, "
                                   "or mapped elsewhere?): " << readahead_test_path();
        run_processes(p, false);
        EXPECT_EQ(nodes_of_pages(p), advice ? owners() : std::vector<int>(10, node_of(0)))
            << (advice ? "MADV_RANDOM" : "default read-ahead");
        ::munmap(p, 10 * page);
    }
    ::close(fd);
}

// The adversary: every part is first touched by a process pinned to another node (part k by the
// process of part k+1), by reads (shmem allocates on a read fault too) or writes. The segment's policy
// wins over first touch in every case; plain first touch puts every part on its toucher's node.
TEST(shared_segment_processes, parts_touched_from_the_wrong_node) {
    REQUIRE_TWO_CPU_NODES();
    for (bool bound : {true, false})
        for (bool write : {true, false}) {
            std::vector<segment_part> parts{{node_of(0), 4}, {node_of(1), 3}, {node_of(2), 3}};
            shared_segment s = bound ? shared_segment::create(segment_layout(parts))
                                     : shared_segment::create(segment_layout(parts), fallback::degrade);
            if (!bound) { // the same segment without its policy: plain first touch
                detail::kernel_nodemask none;
                ASSERT_EQ(detail::os_mbind(s.data(), s.bytes(), detail::mpol_default, none, 0), 0);
            }
            std::vector<int> toucher_nodes;
            for (std::size_t k = 0; k < 3; ++k) {
                const int toucher = node_of(k + 1) != node_of(k) ? node_of(k + 1) : node_of(k + 2);
                ASSERT_NE(toucher, node_of(k));
                toucher_nodes.insert(toucher_nodes.end(), count[k], toucher);
                pid_t pid = ::fork();
                if (pid == 0) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    CPU_SET(topology::get().at(toucher).cpus.front(), &set);
                    if (::sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(2);
                    shared_segment mine = shared_segment::open_fd(s.fd(), s.layout());
                    segment_block b = mine.block(k);
                    volatile char sink = 0;
                    for (std::size_t i = 0; i < b.bytes; i += page) {
                        if (write) b.data[i] = 1;
                        else sink = sink + b.data[i];
                    }
                    ::_exit(0);
                }
                int status = 0;
                ::waitpid(pid, &status, 0);
                ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            }
            EXPECT_EQ(nodes_of_pages(s.data()), bound ? owners() : toucher_nodes)
                << (bound ? "segment" : "first touch") << (write ? " writes" : " reads");
        }
}

namespace {
std::size_t shmem_huge_kb() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::size_t value = 0;
    while (in >> key >> value) {
        if (key == "ShmemHugePages:") return value;
        in.ignore(64, '\n');
    }
    return 0;
}
} // namespace

// Huge-page aligned parts keep shmem huge pages (no MADV_NOHUGEPAGE): with shmem_enabled=always each
// part of 2 MiB is one huge page, allocated under its own part's policy, so it is on its node even when
// another node's process touches it first.
TEST(shared_segment_processes, huge_page_aligned_parts_keep_huge_pages_on_their_nodes) {
    REQUIRE_TWO_CPU_NODES();
    shmem_thp thp("always");
    ASSERT_TRUE(thp.ok());
    const std::size_t per_huge = detail::huge_page_size() / page;
    const std::size_t huge_before = shmem_huge_kb();
    {
        shared_segment s = shared_segment::create(segment_layout({{node_of(0), per_huge}, {node_of(1), per_huge}}));
        for (std::size_t k = 0; k < 2; ++k) {
            pid_t pid = ::fork();
            if (pid == 0) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(topology::get().at(node_of(1 - k)).cpus.front(), &set); // the other part's node
                if (::sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(2);
                segment_block b = s.block(k);
                std::memset(b.data, 1, b.bytes);
                ::_exit(0);
            }
            int status = 0;
            ::waitpid(pid, &status, 0);
            ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        EXPECT_EQ(shmem_huge_kb() - huge_before, 2 * detail::huge_page_size() / 1024) << "two shmem huge pages";
        for (std::size_t k = 0; k < 2; ++k) EXPECT_EQ(s.where(k).on(node_of(k)), per_huge) << "part " << k;
    }
    EXPECT_EQ(shmem_huge_kb(), huge_before);
}
