#ifndef NUMAPLACE_DETAIL_SEGMENT_FILE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_SEGMENT_FILE_HPP_INCLUDED

/// \file
/// The file of a shared segment beside its parts (shared_segment.hpp): the trailer page after the parts
/// that says which layout made it, how the creator writes it without a SIGBUS on a full file system,
/// and how an opener waits for a creator still at work (the size is set, then the trailer written).

#include "linux.hpp"

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

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

} // namespace detail
} // namespace numaplace

#endif
