#ifndef NUMAPLACE_DETAIL_SEGMENT_FILE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_SEGMENT_FILE_HPP_INCLUDED

/// \file
/// The file of a shared segment beside its parts (shared_segment.hpp): the trailer page after the parts
/// that says which layout made it, how the creator writes it without a SIGBUS on a full file system,
/// and how an opener waits for a creator still at work (the size is set, then the trailer written) and
/// checks the file (its page size, size and trailer); the owned descriptor, the name check, the read
/// of resident pages that lets `where` see pages other processes faulted in.

#include "linux.hpp"
#include "../error.hpp"
#include "../huge_pages.hpp"

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sched.h>

namespace numaplace {
namespace detail {

/// The last bytes of the trailer page: which layout (parts and digest) made the segment.
struct segment_trailer {
    char magic[16];
    std::uint64_t parts;
    std::uint64_t digest;
    static segment_trailer of(std::uint64_t parts, std::uint64_t digest) noexcept {
        segment_trailer t{};
        std::memcpy(t.magic, "numaplace-seg-1", 16);
        t.parts = parts;
        t.digest = digest;
        return t;
    }
    bool written() const noexcept { return magic[0] != 0; }
};

/// How long an opener waits for a creator to set the size and write the trailer.
constexpr std::int64_t segment_creator_wait_ms = 2000;

/// \effects writes `t` at the end of the page at `offset` of the file `fd`, through a mapping of that
/// page alone with huge pages off (a write(2) could make shmem with THP `always` allocate a huge page
/// over the parts, placed by the first part's policy), faulted in first (MADV_POPULATE_WRITE) so that a
/// file system without room is an error, not a SIGBUS. \returns 0 or errno (ENOSPC: no room for the page).
inline int write_segment_trailer(int fd, std::size_t offset, const segment_trailer& t) noexcept {
    const std::size_t page = page_size();
    void* p = nullptr;
    if (const int err = os_map_shared(fd, page, p, offset)) return err;
    os_advise(p, page, page_advice::no_huge_pages);
    int err = os_advise(p, page, page_advice::populate_write);
    if (err == EINVAL) err = 0; // before Linux 5.14: the caller checked the free space beforehand
    if (err == EFAULT) err = ENOSPC;
    if (err == 0) std::memcpy(static_cast<char*>(p) + page - sizeof t, &t, sizeof t);
    os_unmap(p, page);
    return err;
}

/// \effects publishes a small-page segment file at `fd` whose parts are `bytes`: checks its file system's
/// room (a full /dev/shm would be a SIGBUS at touch), gives the file its size (openers wait for it), then
/// writes `t` in the trailer page after the parts. \throws placement_error (ENOSPC: no room; the errno of
/// ftruncate or of the trailer's write).
inline void publish_segment_file(int fd, std::size_t bytes, const segment_trailer& t) {
    const std::size_t page = page_size();
    std::size_t room = 0;
    if (os_file_system_free(fd, room) == 0 && room < bytes + page)
        throw_placement(-1, bytes, ENOSPC,
                        "shared_segment: its file system has " + std::to_string(room) + " bytes free, the segment needs " +
                            std::to_string(bytes + page));
    if (const int err = os_resize(fd, bytes + page))
        throw_placement(-1, bytes, err, "shared_segment: ftruncate failed");
    if (const int err = write_segment_trailer(fd, bytes, t))
        throw_placement(-1, bytes, err, "shared_segment: writing the layout trailer page failed");
}

/// \effects waits, up to segment_creator_wait_ms, while `ready()` is false (sched_yield, then 1 ms
/// sleeps). \returns whether it became true.
template <class Ready>
bool wait_for_segment_creator(Ready&& ready) {
    const std::int64_t start = os_now_ms();
    for (int tries = 0;; ++tries) {
        if (ready()) return true;
        if (os_now_ms() - start > segment_creator_wait_ms) return false;
        if (tries < 1000) ::sched_yield();
        else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

/// \effects an opener's checks of the segment file at `fd` for a layout of `bytes` on pages of
/// `layout_page` (explicit or not): waits for a creator at work (the size set, then the trailer written),
/// then checks the file's page size (a hugetlb file's st_blksize; a small-page file under an explicit
/// layout is a creator that degraded), its size (`bytes` + one of its pages) and the trailer against `want`.
/// \returns the file's page size. \throws invalid_placement (another size, page size or layout; not a
/// regular file); std::system_error (fstat or pread refused; EAGAIN: the creator did not finish in time).
inline std::size_t check_opened_segment(int fd, std::size_t bytes, std::size_t layout_page, bool layout_explicit,
                                        const segment_trailer& want) {
    // The creator binds, sets the size, writes the trailer: a size 0 or a zero trailer is a creator at work.
    std::size_t size = 0;
    bool regular = true;
    int err = 0;
    const bool sized = wait_for_segment_creator(
        [&] { return (err = os_file_size(fd, size, &regular)) != 0 || size != 0 || !regular; });
    if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace: fstat of shared segment");
    if (!regular) throw_invalid("shared_segment: not a shared memory file (a device, directory or pipe)");
    if (!sized)
        throw std::system_error(EAGAIN, std::generic_category(),
                                "numaplace: the shared segment has no size yet: its creator did not finish within " +
                                    std::to_string(segment_creator_wait_ms) + " ms (or died; `remove` its name)");
    // A hugetlb file's pages are its st_blksize: the layout must be on them (a small-page file under an
    // explicit layout is a creator that degraded). Its trailer page is one of its pages.
    std::size_t page = os_file_page_bytes(fd);
    if (page == 0) page = page_size();
    if (page != page_size() && page != layout_page)
        throw_invalid("shared_segment: the segment is on explicit " + page_bytes_name(page) + " pages, the layout on " +
                      (layout_explicit ? page_bytes_name(layout_page) : std::string("small")) + " pages");
    if (size != bytes + page)
        throw_invalid("shared_segment: the segment has " + std::to_string(size) +
                      " bytes, the layout needs " + std::to_string(bytes) + " + a trailer page");
    segment_trailer t{};
    wait_for_segment_creator([&] {
        return (err = os_read_at(fd, &t, sizeof t, bytes + page - sizeof t)) != 0 || t.written();
    });
    if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace: reading the shared segment's trailer");
    if (std::memcmp(t.magic, want.magic, sizeof t.magic) != 0)
        throw_invalid("shared_segment: not a numaplace segment (no layout trailer)");
    if (t.parts != want.parts || t.digest != want.digest)
        throw_invalid("shared_segment: the segment was made with another layout (" + std::to_string(t.parts) +
                      " parts) than this one (" + std::to_string(want.parts) + " parts of the same total size)");
    return page;
}

/// An owned file descriptor.
class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    ~unique_fd() { reset(); }
    int get() const noexcept { return fd_; }
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0) detail::os_close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

/// \throws invalid_placement unless `name` is a valid POSIX shm name.
inline void check_shm_name(const std::string& name) {
    if (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' || name.find('/', 1) != std::string::npos ||
        name.find('\0') != std::string::npos || name == "/." || name == "/..")
        throw_invalid("shared_segment: name '" + name + "' must be '/' followed by 1.." + std::to_string(NAME_MAX - 1) +
                      " characters without '/', and not '.' or '..'");
}

/// \effects reads every page of [p, p+bytes) that the segment holds, so that this process maps it.
/// \throws std::system_error when mincore fails.
inline void map_resident(const char* p, std::size_t bytes) {
    const std::size_t page = detail::page_size();
    const std::size_t pages = bytes / page;
    std::vector<unsigned char> resident(pages);
    if (pages == 0) return;
    if (const int err = detail::os_resident(p, bytes, resident.data()))
        throw std::system_error(err, std::generic_category(), "numaplace: mincore of shared segment");
    for (std::size_t i = 0; i < pages; ++i)
        if (resident[i] & 1) (void)*static_cast<const volatile char*>(p + i * page);
}

} // namespace detail
} // namespace numaplace

#endif
