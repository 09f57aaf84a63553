#ifndef NUMAPLACE_DETAIL_SEGMENT_HUGE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_SEGMENT_HUGE_HPP_INCLUDED

/// \file
/// A shared segment's file on explicit huge pages (shared_segment.hpp, docs/huge-pages.md): a
/// `memfd_create(MFD_HUGETLB)` file whose parts are bound to their nodes and faulted in at creation, so
/// that no process that maps it ever allocates a page of it (nor gets a SIGBUS). hugetlb has no shared
/// policy (a shmem file keeps its policy per range of the file; a hugetlb file does not): the creator's
/// binding holds for the pages it faults in, which are then the file's, whoever maps them.

#include "hugetlb.hpp"
#include "linux.hpp"
#include "segment_file.hpp"
#include "../huge_pages.hpp"
#include "../memory.hpp"
#include "../place.hpp"
#include "../topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// One part of a segment as the file sees it: its node and its bytes (whole explicit pages).
struct segment_span {
    int node = -1;
    std::size_t bytes = 0;
};

/// Why a segment could not be made on explicit pages: errno, the node concerned (-1: none), in words.
struct segment_refusal {
    int err = 0;
    int node = -1;
    std::string why;
};

/// \returns why the pools cannot hold `parts` on pages of `page` bytes, each part bound to its node and
/// the trailer page (one explicit page) to the last part's node (err 0: they can). Reads the pools, the
/// kernel's sizes and the hugetlb cgroup; maps nothing.
inline segment_refusal check_segment_pools(const std::vector<segment_span>& parts, std::size_t page) {
    segment_refusal r;
    const std::string size = page_bytes_name(page);
    if (!explicit_page_supported(page))
        return {EINVAL, -1, "explicit " + size + " pages: the kernel has no pool of that size (no /sys/kernel/mm/hugepages/hugepages-" +
                                std::to_string(page >> 10) + "kB)"};
    std::vector<std::size_t> need(topology::get().size(), 0);
    std::size_t total = 1; // the trailer page
    for (const segment_span& p : parts) {
        need[static_cast<std::size_t>(p.node)] += p.bytes / page;
        total += p.bytes / page;
    }
    need[static_cast<std::size_t>(parts.back().node)] += 1;
    for (std::size_t n = 0; n < need.size(); ++n) {
        if (need[n] == 0) continue;
        std::string why = pool_shortage(page, need[n], memory::policy_mode::bind, node_set{static_cast<int>(n)});
        if (!why.empty()) return {ENOMEM, static_cast<int>(n), std::move(why)};
    }
    const huge_page_usability use = cgroup_room_for(page, total * page);
    if (use.cgroup_room() < total * page)
        return {ENOMEM, -1, "explicit " + size + " pages: the hugetlb cgroup limit (" + use.cgroup_file + ") leaves " +
                                std::to_string(use.cgroup_room()) + " bytes of " + std::to_string(total * page)};
    return r;
}

/// \effects makes the file of a segment of `parts` (`bytes` in all) on explicit pages of `page` bytes: a
/// MFD_HUGETLB memfd of `bytes` + one page (the trailer page), mapped whole, each part bound to its node
/// (the trailer page to the last part's), every page faulted in under its binding (MADV_POPULATE_WRITE:
/// a pool emptied meanwhile is an error, never a SIGBUS), `t` written at the end of the trailer page,
/// which is then unmapped. The pools must have been checked (check_segment_pools).
/// \returns the refusal (err 0: `fd` is the file and `data` its mapping of `bytes`; otherwise nothing
/// is left: the file closed gives every page it took back to its pool).
inline segment_refusal make_huge_segment_file(const std::vector<segment_span>& parts, std::size_t bytes,
                                              std::size_t page, const segment_trailer& t, unique_fd& fd, void*& data) {
    const std::string size = "explicit " + page_bytes_name(page) + " pages: ";
    const int made = os_memfd_hugetlb("numaplace-segment", page);
    if (made < 0) return {-made, -1, size + "memfd_create(MFD_HUGETLB) refused (" + std::strerror(-made) + ")"};
    unique_fd file(made);
    if (const int err = os_resize(file.get(), bytes + page))
        return {err, -1, size + "ftruncate refused (" + std::string(std::strerror(err)) + ")"};
    void* p = nullptr;
    if (const int err = os_map_shared(file.get(), bytes + page, p))
        return {err, -1, size + "mmap refused (" + std::string(std::strerror(err)) + ")"};
    auto* c = static_cast<char*>(p);
    segment_refusal r;
    std::size_t at = 0;
    for (std::size_t k = 0; k <= parts.size() && r.err == 0; ++k) {
        const segment_span s = k < parts.size() ? parts[k] : segment_span{parts.back().node, page};
        if (s.bytes != 0) {
            if (const int err = memory::bind(c + at, s.bytes, memory::policy_mode::bind, node_set{s.node}))
                r = {err, s.node, size + "mbind of " + (k < parts.size() ? "part " + std::to_string(k) : std::string("the trailer page")) +
                                      " to node " + std::to_string(s.node) + " refused (" + std::strerror(err) + ")"};
        }
        at += s.bytes;
    }
    if (r.err == 0) {
        if (const int err = os_advise(p, bytes + page, page_advice::populate_write)) {
            r.err = err == EINVAL ? EINVAL : ENOMEM;
            r.why = err == EINVAL ? size + "MADV_POPULATE_WRITE unsupported (Linux < 5.14): they cannot be faulted in without risking SIGBUS"
                                  : size + "the pools could not serve every page at fault (" + std::strerror(err) + ")";
        }
    }
    if (r.err != 0) {
        os_unmap(p, bytes + page);
        return r;
    }
    std::memcpy(c + bytes + page - sizeof t, &t, sizeof t);
    os_unmap(c + bytes, page);
    fd = std::move(file);
    data = p;
    return r;
}

} // namespace detail
} // namespace numaplace

#endif
