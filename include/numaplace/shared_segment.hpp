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
/// segment is marked `MADV_NOHUGEPAGE` unless every block edge falls on a huge page.

#include "detail/linux.hpp"
#include "detail/segment_file.hpp"
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
    /// processes in other cpusets number the nodes differently.
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
        if (a.parts_.size() != b.parts_.size()) return false;
        for (std::size_t k = 0; k < a.parts_.size(); ++k)
            if (a.parts_[k].node != b.parts_[k].node || a.parts_[k].pages != b.parts_[k].pages) return false;
        return true;
    }
    friend bool operator!=(const segment_layout& a, const segment_layout& b) noexcept { return !(a == b); }

private:
    std::vector<segment_part> parts_;
    std::vector<std::size_t> offsets_;
};

/// A block of a mapped segment.
struct segment_block {
    char* data = nullptr;  ///< the block's first byte in this process
    std::size_t bytes = 0; ///< its size
    int node = -1;         ///< its node
};

namespace detail {
// An owned file descriptor.
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

inline void check_shm_name(const std::string& name) {
    if (name.size() < 2 || name.size() > NAME_MAX || name[0] != '/' || name.find('/', 1) != std::string::npos ||
        name.find('\0') != std::string::npos || name == "/." || name == "/..")
        throw_invalid("shared_segment: name '" + name + "' must be '/' followed by 1.." + std::to_string(NAME_MAX - 1) +
                      " characters without '/', and not '.' or '..'");
}
} // namespace detail

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
    static shared_segment create(const segment_layout& layout, fallback fb = fallback::strict) {
        check_layout(layout);
        check_nodes(layout);
        const int made = detail::os_memfd("numaplace-segment");
        if (made < 0) detail::throw_placement(-1, layout.bytes(), -made, "shared_segment: memfd_create failed");
        detail::unique_fd fd(made);
        return make_created(std::move(fd), layout, fb, std::string());
    }

    /// \effects as `create(layout, fb)`, but a POSIX shared memory object named `name` ("/name",
    /// `shm_open`), which must not exist yet. This object unlinks the name when it is destroyed in the
    /// creating process (mappings and descriptors others hold stay valid).
    /// \throws invalid_placement for a malformed name; std::system_error when `shm_open` fails (EEXIST:
    /// the name exists); as `create` otherwise (the name is unlinked again). \returns the segment, mapped.
    static shared_segment create(const std::string& name, const segment_layout& layout,
                                 fallback fb = fallback::strict) {
        detail::check_shm_name(name);
        check_layout(layout);
        check_nodes(layout);
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
          bound_(std::exchange(o.bound_, false)) {
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
        map_resident(b.data, b.bytes);
        return numaplace::where(b.data, b.bytes);
    }
    /// \returns the pages of the whole segment per node (see `where(k)`).
    page_histogram where() const {
        if (!data_) return numaplace::where(nullptr, 0);
        map_resident(data_, layout_.bytes());
        return numaplace::where(data_, layout_.bytes());
    }

private:
    static void check_layout(const segment_layout& layout) {
        if (layout.size() == 0) detail::throw_invalid("shared_segment: empty layout");
        // the parts and the trailer page must fit a file offset
        if (layout.bytes() > static_cast<std::size_t>(std::numeric_limits<off_t>::max()) - detail::page_size())
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
        shared_segment s = map(fd, layout);
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
        // Then the file gets its size, which publishes the segment (openers wait for it), and the trailer
        // page after the parts says which layout made it (detail/segment_file.hpp). A file system with less
        // room than the segment (a full /dev/shm) is refused first: its pages would be a SIGBUS at touch.
        const std::size_t page = detail::page_size();
        std::size_t room = 0;
        if (detail::os_file_system_free(s.fd_.get(), room) == 0 && room < layout.bytes() + page)
            detail::throw_placement(-1, layout.bytes(), ENOSPC,
                                    "shared_segment: its file system has " + std::to_string(room) +
                                        " bytes free, the segment needs " + std::to_string(layout.bytes() + page));
        if (const int err = detail::os_resize(s.fd_.get(), layout.bytes() + page))
            detail::throw_placement(-1, layout.bytes(), err, "shared_segment: ftruncate failed");
        if (const int err = detail::write_segment_trailer(s.fd_.get(), layout.bytes(), trailer_of(layout)))
            detail::throw_placement(-1, layout.bytes(), err, "shared_segment: writing the layout trailer page failed");
        s.bound_ = bound;
        own_name();
        return s;
    }

    static shared_segment make_opened(detail::unique_fd fd, const segment_layout& layout) {
        // The creator binds, sets the size, writes the trailer: a size 0 or a zero trailer is a creator at work.
        std::size_t size = 0;
        bool regular = true;
        int err = 0;
        const bool sized = detail::wait_for_segment_creator(
            [&] { return (err = detail::os_file_size(fd.get(), size, &regular)) != 0 || size != 0 || !regular; });
        if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace: fstat of shared segment");
        if (!regular) detail::throw_invalid("shared_segment: not a shared memory file (a device, directory or pipe)");
        if (!sized)
            throw std::system_error(EAGAIN, std::generic_category(),
                                    "numaplace: the shared segment has no size yet: its creator did not finish within " +
                                        std::to_string(detail::segment_creator_wait_ms) + " ms (or died; `remove` its name)");
        const std::size_t page = detail::page_size();
        if (size != layout.bytes() + page)
            detail::throw_invalid("shared_segment: the segment has " + std::to_string(size) +
                                  " bytes, the layout needs " + std::to_string(layout.bytes()) + " + a trailer page");
        detail::segment_trailer t{};
        const detail::segment_trailer want = trailer_of(layout);
        detail::wait_for_segment_creator([&] {
            return (err = detail::os_read_at(fd.get(), &t, sizeof t, layout.bytes() + page - sizeof t)) != 0 || t.written();
        });
        if (err != 0) throw std::system_error(err, std::generic_category(), "numaplace: reading the shared segment's trailer");
        if (std::memcmp(t.magic, want.magic, sizeof t.magic) != 0)
            detail::throw_invalid("shared_segment: not a numaplace segment (no layout trailer)");
        if (t.parts != want.parts || t.digest != want.digest)
            detail::throw_invalid("shared_segment: the segment was made with another layout (" + std::to_string(t.parts) +
                                  " parts) than this one (" + std::to_string(want.parts) + " parts of the same total size)");
        return map(fd, layout);
    }

    static detail::segment_trailer trailer_of(const segment_layout& layout) noexcept {
        return detail::segment_trailer::of(layout.size(), layout.digest());
    }

    static shared_segment map(detail::unique_fd& fd, const segment_layout& layout) {
        void* p = nullptr;
        if (const int err = detail::os_map_shared(fd.get(), layout.bytes(), p))
            detail::throw_placement(-1, layout.bytes(), err, "shared_segment: mmap failed: " + detail::refusal_reason(err, true));
        // A shmem huge page is allocated whole by its first toucher (and under the policy of its first
        // small page): keep huge pages off unless no huge page can straddle two parts. Advice only.
        if (!layout.huge_page_edges()) detail::os_advise(p, layout.bytes(), detail::page_advice::no_huge_pages);
        shared_segment s;
        s.fd_ = std::move(fd);
        s.data_ = static_cast<char*>(p);
        s.layout_ = layout;
        return s;
    }

    // Reads every page of [p, p+bytes) that the segment holds, so that this process maps it.
    static void map_resident(const char* p, std::size_t bytes) {
        const std::size_t page = detail::page_size();
        const std::size_t pages = bytes / page;
        std::vector<unsigned char> resident(pages);
        if (pages == 0) return;
        if (const int err = detail::os_resident(p, bytes, resident.data()))
            throw std::system_error(err, std::generic_category(), "numaplace: mincore of shared segment");
        for (std::size_t i = 0; i < pages; ++i)
            if (resident[i] & 1) (void)*static_cast<const volatile char*>(p + i * page);
    }

    void release() noexcept {
        if (data_) detail::os_unmap(data_, layout_.bytes());
        data_ = nullptr;
        fd_.reset();
        if (!name_.empty() && creator_pid_ == ::getpid()) detail::os_shm_unlink(name_.c_str());
        name_.clear();
        creator_pid_ = 0;
        bound_ = false;
    }
    detail::unique_fd fd_;
    char* data_ = nullptr;
    segment_layout layout_;
    std::string name_;
    pid_t creator_pid_ = 0; // unlinks the name; a forked copy of the creator does not
    bool bound_ = false;
};

} // namespace numaplace

#endif
