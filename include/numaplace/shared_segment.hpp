#ifndef NUMAPLACE_SHARED_SEGMENT_HPP_INCLUDED
#define NUMAPLACE_SHARED_SEGMENT_HPP_INCLUDED

/// \file
/// A shared-memory segment (memfd or POSIX shm) split into blocks of whole pages, one per process, each
/// placed on its process's node by the segment's shared memory policy.
///
/// Why not first touch: several processes map one `MAP_SHARED` segment and each owns a few pages of it.
/// First touch places a shmem page on the node of whoever faults it first, so placement depends on
/// who touches first and on the kernel faulting in more than one page at a time: a shmem huge page
/// (`/sys/kernel/mm/transparent_hugepage/shmem_enabled`) is allocated whole by its first toucher, and a
/// file-backed mapping reads ahead several pages on the reader's node. Here the creator `mbind`s each
/// block of the shared mapping to its node before anyone touches it; shmem keeps that policy per range
/// of the file (not per mapping), so every process's faults obey it, in any order. Every mapping of the
/// segment is marked `MADV_NOHUGEPAGE` unless every block edge falls on a huge page. On explicit huge
/// pages (`segment_layout::with_pages`) the parts are whole pages of a hugetlb file, bound and faulted in
/// by the creator (docs/huge-pages.md, "Shared segments").

#include "detail/linux.hpp"
#include "detail/segment_file.hpp"
#include "detail/segment_huge.hpp"
#include "huge_pages.hpp"
#include "error.hpp"
#include "place.hpp"
#include "topology.hpp"
#include "where.hpp"

#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace numaplace {

/// One process's part of a shared segment: `pages` whole pages placed on `node`.
struct segment_part {
    int node = -1;         ///< the node the part's pages are bound to
    std::size_t pages = 0; ///< how many pages
};

/// The layout of a shared segment: consecutive blocks of whole pages, one per process, in the order
/// given. A value: every process that maps the segment builds the same layout from the same arguments.
class segment_layout {
public:
    /// An empty layout (no part; a segment cannot be made of it).
    segment_layout() = default;

    /// \effects lays out `parts` one after the other, each starting on a page boundary. Node ids are
    /// checked against the topology by `create` (which binds), not here: an opener confined to another
    /// cpuset (ranks under Slurm) builds the creator's layout even when it cannot see the creator's nodes.
    /// \throws unknown_node for a negative node id (`topo` names the valid range); invalid_placement when
    /// there is no part or no page at all; std::bad_array_new_length when the size in bytes overflows (or
    /// exceeds what a file offset can hold).
    explicit segment_layout(std::vector<segment_part> parts, const topology& topo = topology::get())
        : parts_(std::move(parts)) {
        if (parts_.empty()) detail::throw_invalid("segment_layout: no part");
        const std::size_t page = detail::page_size();
        const std::size_t max_pages = static_cast<std::size_t>(std::numeric_limits<off_t>::max()) / page;
        offsets_.reserve(parts_.size() + 1);
        offsets_.push_back(0);
        std::size_t total = 0;
        for (const auto& p : parts_) {
            if (p.node < 0) detail::throw_unknown_node(p.node, topo.size());
            if (p.pages > max_pages - total) detail::throw_bad_length();
            total += p.pages;
            offsets_.push_back(total * page);
        }
        if (total == 0) detail::throw_invalid("segment_layout: zero pages");
    }

    /// \effects this layout on explicit huge pages: each part rounded up to whole pages of `ps` (a hugetlb
    /// file holds no smaller page), the offsets with them; `largest_explicit` means `explicit_2m` (every
    /// process builds the same layout, whatever the pools); `transparent` gives the small-page layout.
    /// \returns the layout. \throws std::bad_array_new_length when the rounded size overflows.
    segment_layout with_pages(page_size ps) const {
        segment_layout l = *this;
        l.pages_ = ps == page_size::largest_explicit ? page_size::explicit_2m : ps;
        const std::size_t small = detail::page_size(), per = explicit_page_bytes(l.pages_) / small;
        if (per <= 1 || parts_.empty()) return l;
        const std::size_t max_pages = static_cast<std::size_t>(std::numeric_limits<off_t>::max()) / small / per * per;
        std::size_t total = 0;
        for (std::size_t k = 0; k < l.parts_.size(); ++k) {
            std::size_t& n = l.parts_[k].pages;
            if (n > max_pages - total) detail::throw_bad_length();
            n = (n + per - 1) / per * per;
            if (n > max_pages - total) detail::throw_bad_length();
            total += n;
            l.offsets_[k + 1] = total * small;
        }
        return l;
    }
    /// \returns the pages of the segment: `transparent` (small pages, the default) or an explicit size.
    page_size pages() const noexcept { return pages_; }
    /// \returns the bytes of one page of the segment's file: the explicit size, or the small page.
    std::size_t page_bytes() const noexcept {
        return pages_ == page_size::transparent ? detail::page_size() : explicit_page_bytes(pages_);
    }
    /// \returns the number of parts.
    std::size_t size() const noexcept { return parts_.size(); }
    const std::vector<segment_part>& parts() const noexcept { return parts_; } ///< \returns the parts, in block order.
    /// \returns the whole segment's size in bytes.
    std::size_t bytes() const noexcept { return offsets_.empty() ? 0 : offsets_.back(); }
    /// \returns the byte offset of part `k` (`k == size()` gives `bytes()`). \requires k <= size().
    std::size_t offset(std::size_t k) const noexcept { return offsets_[k]; }
    /// \returns the size of part `k` in bytes. \requires k < size().
    std::size_t bytes(std::size_t k) const noexcept { return offsets_[k + 1] - offsets_[k]; }
    /// \returns whether every part edge falls on a huge page (then huge pages cannot straddle two parts).
    bool huge_page_edges() const noexcept {
        for (std::size_t o : offsets_)
            if (o % detail::huge_page_size() != 0) return false;
        return true;
    }

    /// \returns a digest of the parts' page counts, in order (FNV-1a, 64 bits). Node ids are not in it:
    /// processes in other cpusets number the nodes differently; nor is the page size (an opener checks the file's).
    std::uint64_t digest() const noexcept {
        std::uint64_t h = 14695981039346656037ull;
        auto mix = [&h](std::uint64_t v) {
            for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
        };
        mix(parts_.size());
        for (const auto& p : parts_) mix(p.pages);
        return h;
    }

    friend bool operator==(const segment_layout& a, const segment_layout& b) noexcept {
        if (a.parts_.size() != b.parts_.size() || a.pages_ != b.pages_) return false;
        for (std::size_t k = 0; k < a.parts_.size(); ++k)
            if (a.parts_[k].node != b.parts_[k].node || a.parts_[k].pages != b.parts_[k].pages) return false;
        return true;
    }
    friend bool operator!=(const segment_layout& a, const segment_layout& b) noexcept { return !(a == b); }

private:
    std::vector<segment_part> parts_;
    std::vector<std::size_t> offsets_;
    page_size pages_ = page_size::transparent;
};

/// A block of a mapped segment.
struct segment_block {
    char* data = nullptr;  ///< the block's first byte in this process
    std::size_t bytes = 0; ///< its size
    int node = -1;         ///< its node
};

/// A shared-memory segment laid out by a `segment_layout`, mapped read-write in this process. Created
/// by one process (`create`), opened by the others by name (`open`) or by a file descriptor they
/// inherited or received (`open_fd`). Movable, not copyable; a moved-from segment is empty (`data()`
/// null, `fd()` -1) and may be destroyed or assigned.
class shared_segment {
public:
    /// An empty segment (nothing mapped).
    shared_segment() noexcept = default;

    /// \effects creates an anonymous segment (`memfd_create`) of `layout.bytes()` (and a trailer page that
    /// records the layout's part sizes, checked by openers), maps it and binds
    /// each part to its node (`mbind(MPOL_BIND)` on the shared mapping: the policy lives in the segment,
    /// so it holds for every process that maps it, whoever touches first). Share it by `fd()` (inherited
    /// across fork, or sent over a Unix socket) and `open_fd`.
    /// \throws placement_error when the kernel refuses the segment or the mapping (errno; ENOSPC when its
    /// file system, /dev/shm for a named one, has less room than the segment), or, if `fb` is
    /// strict, the binding (e.g. EPERM under a seccomp filter; ENOMEM when a part exceeds its node's
    /// memory); a degrading segment then leaves the pages to first touch and records it in
    /// `degradations()`. Nothing is left behind when it throws. \returns the segment, mapped.
    /// On explicit pages (`layout.pages()`), a `memfd_create(MFD_HUGETLB)` file instead: every node's pool
    /// is checked first (the trailer is one explicit page, on the last part's node), then each part is
    /// bound to its node and faulted in (MADV_POPULATE_WRITE), so openers never fault a page in. A pool
    /// short, no pool of the size, a cgroup limit or a refused binding: strict throws placement_error
    /// (ENOMEM naming the node, page size, pages needed and free, before any pool page is taken; EINVAL:
    /// no such size), degrading records why and makes a small-page segment of the same layout.
    static shared_segment create(const segment_layout& layout, fallback fb = fallback::strict) {
        check_layout(layout);
        check_nodes(layout);
        if (layout.pages() != page_size::transparent) {
            shared_segment s = make_huge(layout, fb);
            if (s.data_) return s;
        }
        const int made = detail::os_memfd("numaplace-segment");
        if (made < 0) detail::throw_placement(-1, layout.bytes(), -made, "shared_segment: memfd_create failed");
        detail::unique_fd fd(made);
        return make_created(std::move(fd), layout, fb, std::string());
    }

    /// \effects as `create(layout, fb)`, but a POSIX shared memory object named `name` ("/name",
    /// `shm_open`), which must not exist yet. This object unlinks the name when it is destroyed in the
    /// creating process (mappings and descriptors others hold stay valid).
    /// \throws invalid_placement for a malformed name; std::system_error when `shm_open` fails (EEXIST:
    /// the name exists); as `create` otherwise (the name is unlinked again); placement_error ENOTSUP for a
    /// layout on explicit pages when strict (a named segment is tmpfs, /dev/shm: no explicit page; share
    /// an anonymous one's `fd()`), recorded and made on small pages when degrading. \returns the segment, mapped.
    static shared_segment create(const std::string& name, const segment_layout& layout,
                                 fallback fb = fallback::strict) {
        detail::check_shm_name(name);
        check_layout(layout);
        check_nodes(layout);
        if (layout.pages() != page_size::transparent)
            detail::refused(ENOTSUP, -1, layout.bytes(), fb,
                            "shared_segment: " + name + " on explicit " + page_bytes_name(layout.page_bytes()) +
                                " pages (POSIX shared memory is tmpfs, without explicit pages; hugetlbfs " +
                                (detail::os_hugetlbfs_mounted() ? "mounted but not used" : "not mounted") + ")",
                            "made on small pages");
        const int made = detail::os_shm_open(name.c_str(), true);
        if (made < 0) throw std::system_error(-made, std::generic_category(), "numaplace: shm_open " + name);
        detail::unique_fd fd(made);
        try {
            return make_created(std::move(fd), layout, fb, name);
        } catch (...) {
            detail::os_shm_unlink(name.c_str());
            throw;
        }
    }

    /// \effects removes the name `name` (e.g. a segment left behind by a creator that was killed);
    /// processes that have it mapped or open keep it. \returns false if no segment had that name.
    /// \throws invalid_placement for a malformed name; std::system_error when the kernel refuses (EACCES).
    static bool remove(const std::string& name) {
        detail::check_shm_name(name);
        const int err = detail::os_shm_unlink(name.c_str());
        if (err == ENOENT) return false;
        if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace: shm_unlink " + name);
        return true;
    }

    /// \effects maps the existing segment named `name`, whose layout must be `layout` (the policy is
    /// the segment's, set by its creator: nothing is bound here).
    /// A segment still being created (no size yet, or no trailer) is waited for, up to 2 s.
    /// \throws invalid_placement for a malformed name or when the segment's size is not
    /// `layout.bytes()` (+ its trailer page) or another layout made it; std::system_error when `shm_open`
    /// fails (ENOENT: no such name yet), or EAGAIN when the creator did not finish in time;
    /// placement_error when mapping fails. \returns the segment, mapped.
    static shared_segment open(const std::string& name, const segment_layout& layout) {
        detail::check_shm_name(name);
        check_layout(layout);
        const int opened = detail::os_shm_open(name.c_str(), false);
        if (opened < 0) throw std::system_error(-opened, std::generic_category(), "numaplace: shm_open " + name);
        detail::unique_fd fd(opened);
        return make_opened(std::move(fd), layout);
    }

    /// \effects maps the segment open at `fd` (duplicated: the caller keeps `fd`; layout `layout`).
    /// \returns it, mapped. \throws as `open`; std::system_error when `fd` cannot be duplicated or examined.
    static shared_segment open_fd(int fd, const segment_layout& layout) {
        check_layout(layout);
        detail::unique_fd own(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
        if (own.get() < 0) throw std::system_error(errno, std::generic_category(), "numaplace: dup of segment fd");
        return make_opened(std::move(own), layout);
    }
    /// \effects takes `o`'s mapping; `o` is left empty.
    shared_segment(shared_segment&& o) noexcept
        : fd_(std::move(o.fd_)), data_(std::exchange(o.data_, nullptr)), layout_(std::move(o.layout_)),
          name_(std::move(o.name_)), creator_pid_(std::exchange(o.creator_pid_, 0)),
          bound_(std::exchange(o.bound_, false)), page_(std::exchange(o.page_, 0)) {
        o.layout_ = segment_layout();
        o.name_.clear();
    }
    /// \effects unmaps this segment and takes `o`'s mapping; `o` is left empty. \returns `*this`.
    shared_segment& operator=(shared_segment&& o) noexcept {
        if (this != &o) {
            release();
            fd_ = std::move(o.fd_);
            data_ = std::exchange(o.data_, nullptr);
            layout_ = std::move(o.layout_);
            name_ = std::move(o.name_);
            creator_pid_ = std::exchange(o.creator_pid_, 0);
            bound_ = std::exchange(o.bound_, false);
            page_ = std::exchange(o.page_, 0);
            o.layout_ = segment_layout();
            o.name_.clear();
        }
        return *this;
    }
    shared_segment(const shared_segment&) = delete;
    shared_segment& operator=(const shared_segment&) = delete;
    /// \effects unmaps and closes; in the process that created a named segment, unlinks the name.
    ~shared_segment() { release(); }

    /// \returns the start of the mapping (page aligned), or null when empty.
    char* data() const noexcept { return data_; }
    /// \returns the segment's size in bytes (0 when empty).
    std::size_t bytes() const noexcept { return data_ ? layout_.bytes() : 0; }
    /// \returns the layout (empty when the segment is).
    const segment_layout& layout() const noexcept { return layout_; }
    /// \returns the segment's file descriptor (-1 when empty); valid as long as this object.
    int fd() const noexcept { return fd_.get(); }
    /// \returns the bytes of a page of the segment's file: the explicit size on explicit pages, the small
    /// page otherwise (a degraded segment's too); 0 when empty.
    std::size_t page_bytes() const noexcept { return data_ ? page_ : 0; }
    /// \returns the POSIX name, or "" for a memfd segment.
    const std::string& name() const noexcept { return name_; }
    /// \returns whether the creator bound the parts to their nodes (false: a degrading segment fell
    /// back to first touch, or this process opened the segment and did not bind anything itself).
    bool bound() const noexcept { return bound_; }

    /// \returns part `k`: its bytes in this process's mapping and its node.
    /// \throws std::out_of_range unless k < layout().size().
    segment_block block(std::size_t k) const {
        if (!data_ || k >= layout_.size()) throw std::out_of_range("numaplace: shared_segment::block " + std::to_string(k));
        return {data_ + layout_.offset(k), layout_.bytes(k), layout_.parts()[k].node};
    }

    /// \returns the pages of part `k` per node, as they are in the segment (pages another process
    /// faulted in included). It first reads, in this process, each page of the part that the segment
    /// already holds (`mincore`), so this mapping sees it: `move_pages` only reports pages the calling
    /// process has mapped. It never allocates a page: holes stay holes and count as untouched.
    /// \throws std::out_of_range as `block`; std::system_error when the kernel refuses the query.
    page_histogram where(std::size_t k) const {
        segment_block b = block(k);
        detail::map_resident(b.data, b.bytes);
        return numaplace::where(b.data, b.bytes);
    }
    /// \returns the pages of the whole segment per node (see `where(k)`).
    page_histogram where() const {
        if (!data_) return numaplace::where(nullptr, 0);
        detail::map_resident(data_, layout_.bytes());
        return numaplace::where(data_, layout_.bytes());
    }

private:
    static void check_layout(const segment_layout& layout) {
        if (layout.size() == 0) detail::throw_invalid("shared_segment: empty layout");
        // the parts and the trailer page must fit a file offset
        if (layout.bytes() > static_cast<std::size_t>(std::numeric_limits<off_t>::max()) - layout.page_bytes())
            detail::throw_bad_length();
    }
    static void check_nodes(const segment_layout& layout) {
        for (const auto& part : layout.parts()) topology::get().check(part.node);
    }

    static shared_segment make_created(detail::unique_fd fd, const segment_layout& layout, fallback fb,
                                       const std::string& name) {
        const auto& topo = topology::get();
        // Every node's parts are admitted together (two parts on one node must fit there at once).
        std::vector<std::size_t> per_node(topo.size(), 0);
        for (std::size_t k = 0; k < layout.size(); ++k) per_node[static_cast<std::size_t>(layout.parts()[k].node)] += layout.bytes(k);
        for (std::size_t n = 0; n < per_node.size(); ++n)
            if (per_node[n] != 0)
                detail::admit_or_throw(nullptr, per_node[n], memory::policy_mode::bind, node_set{static_cast<int>(n)},
                                       "shared_segment: ", detail::range_origin::foreign);
        // Mapped and bound before the file has its size: an opener (which checks the size) can map it
        // only once every part is bound, so whoever touches first, the policy holds.
        shared_segment s = map(fd, layout, detail::page_size());
        // The name is owned (unlinked by the destructor) only once this returns: until then the caller
        // unlinks it on failure, exactly once.
        auto own_name = [&s, &name] {
            s.name_ = name;
            s.creator_pid_ = ::getpid();
        };
        // A refusal leaves earlier parts bound; a degrading segment resets them all to the default
        // policy so that its placement is uniformly first touch.
        bool bound = true;
        for (std::size_t k = 0; k < layout.size() && bound; ++k) {
            const segment_part& part = layout.parts()[k];
            if (part.pages == 0) continue;
            const int err = memory::bind(s.data_ + layout.offset(k), layout.bytes(k), memory::policy_mode::bind,
                                         node_set{part.node}, topo);
            if (err == 0) continue;
            bound = detail::refused(err, part.node, layout.bytes(k), fb,
                                    "shared_segment: mbind of part " + std::to_string(k) + " to node " +
                                        std::to_string(part.node));
            memory::unbind(s.data_, layout.bytes());
        }
        // Then the file gets its size (openers wait for it) and its trailer (detail/segment_file.hpp).
        detail::publish_segment_file(s.fd_.get(), layout.bytes(), trailer_of(layout));
        s.bound_ = bound;
        own_name();
        return s;
    }

    // A segment on explicit pages (detail/segment_huge.hpp); empty when it degraded (recorded).
    static shared_segment make_huge(const segment_layout& layout, fallback fb) {
        std::vector<detail::segment_span> spans;
        for (std::size_t k = 0; k < layout.size(); ++k) spans.push_back({layout.parts()[k].node, layout.bytes(k)});
        const std::size_t page = layout.page_bytes();
        detail::unique_fd fd;
        void* p = nullptr;
        detail::segment_refusal r = detail::check_segment_pools(spans, page);
        if (r.err == 0) r = detail::make_huge_segment_file(spans, layout.bytes(), page, trailer_of(layout), fd, p);
        if (r.err != 0) {
            if (fb == fallback::strict) detail::throw_placement(r.node, layout.bytes(), r.err, "shared_segment: " + r.why);
            detail::degradation_log::instance().record("shared_segment: " + r.why + ": a segment of small pages instead");
            return shared_segment();
        }
        shared_segment s = map(fd, layout, page, p);
        s.bound_ = true;
        return s;
    }

    static shared_segment make_opened(detail::unique_fd fd, const segment_layout& layout) {
        const std::size_t page = detail::check_opened_segment(fd.get(), layout.bytes(), layout.page_bytes(),
                                                              layout.pages() != page_size::transparent, trailer_of(layout));
        return map(fd, layout, page);
    }

    static detail::segment_trailer trailer_of(const segment_layout& layout) noexcept {
        return detail::segment_trailer::of(layout.size(), layout.digest());
    }

    // Maps the segment at `fd` (or takes `p`, the creator's mapping of it).
    static shared_segment map(detail::unique_fd& fd, const segment_layout& layout, std::size_t page, void* p = nullptr) {
        if (const int err = p ? 0 : detail::os_map_shared(fd.get(), layout.bytes(), p))
            detail::throw_placement(-1, layout.bytes(), err, "shared_segment: mmap failed: " + detail::refusal_reason(err, true));
        // A shmem huge page is allocated whole by its first toucher (and under the policy of its first
        // small page): keep huge pages off unless no huge page can straddle two parts. Advice only.
        if (page == detail::page_size() && !layout.huge_page_edges()) detail::os_advise(p, layout.bytes(), detail::page_advice::no_huge_pages);
        shared_segment s;
        s.fd_ = std::move(fd);
        s.data_ = static_cast<char*>(p);
        s.layout_ = layout;
        s.page_ = page;
        return s;
    }

    void release() noexcept {
        if (data_) detail::os_unmap(data_, layout_.bytes());
        data_ = nullptr;
        fd_.reset();
        if (!name_.empty() && creator_pid_ == ::getpid()) detail::os_shm_unlink(name_.c_str());
        name_.clear();
        creator_pid_ = 0;
        bound_ = false;
        page_ = 0;
    }
    detail::unique_fd fd_;
    char* data_ = nullptr;
    segment_layout layout_;
    std::string name_;
    pid_t creator_pid_ = 0; // unlinks the name; a forked copy of the creator does not
    bool bound_ = false;
    std::size_t page_ = 0; // the file's page size
};

} // namespace numaplace

#endif
