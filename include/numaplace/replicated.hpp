#ifndef NUMAPLACE_REPLICATED_HPP_INCLUDED
#define NUMAPLACE_REPLICATED_HPP_INCLUDED

/// \file
/// `replicated<T>`: a read-mostly array with one copy per node of a node set (a lookup table, the x
/// vector of SpMV, model weights), so that every node reads its local copy.
///
/// Placement. Each copy is its own mapping, bound to its node (MPOL_BIND) before it is written, so it
/// lands on its node whoever writes it; it is then written from that node's arena (a memory-only node's
/// copy from the nearest node with CPUs), all copies at once, each by its node's cores. Strict: a refused
/// binding throws `placement_error` and releases everything. Degrading: the copy is left to first touch
/// from its node's arena (so it still lands there when the arena is pinned) and `degradations()` says
/// so; `where(node)` shows where it really is.
///
/// Reading. `copy_for(node)` is the copy on `node`, or for a node without one the nearest copy by
/// distance (ties: the lower node id); `local()` is `copy_for` of the node the calling thread runs a
/// `parallel_for` block of, or else of the node of the CPU it runs on (`topology::current_node()`). A
/// loop body uses `copy_for(subrange.node())`.
///
/// Writing. Only through `assign` (new contents from a source) and `update` (edit one copy in place,
/// then refresh the others from it): both refresh every copy before returning, in parallel, each copy
/// from its own node. They must not run concurrently with readers (as any write to shared data).
///
/// Memory. size() × sizeof(T) rounded up to pages, once per copy: `bytes()`; `where()` gives each
/// copy's page histogram; `report()` prints both.

#include "binding.hpp"
#include "detail/linux.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "place.hpp"
#include "parallel_for.hpp"
#include "partition.hpp"
#include "topology.hpp"
#include "where.hpp"

#include <oneapi/tbb/blocked_range.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {

/// One copy per node of an array of trivially copyable `T`. Move-only; a moved-from or default
/// constructed `replicated` is empty (size 0, no copy): `copy_for` and `local` return nullptr.
template <class T>
class replicated {
    static_assert(std::is_trivially_copyable<T>::value, "replicated<T>: copies are made with memcpy");

public:
    /// One copy: its node, its data, whether binding it was refused (degrading).
    struct copy {
        /// the node the copy is on.
        int node = -1;
        /// the copy.
        T* data = nullptr;
        /// whether the copy is bound to its node (false: degraded, recorded).
        bool bound = false;
    };

    /// Empty: no copy.
    replicated() noexcept = default;

    /// \effects makes one copy of [source, source + n) on each node of `nodes` (default: the nodes of the
    /// process's binding, `cpu_binding::of()`; memory-only nodes may be listed), all filled at once, each from its node's arena.
    /// \throws unknown_node for an id not in the topology; invalid_placement for an empty node set;
    /// std::bad_array_new_length when n × sizeof(T) overflows; std::invalid_argument for a null source
    /// with n > 0; placement_error when a mapping fails, or a
    /// binding is refused and `fb` is strict (nothing is kept). With `pages` explicit, each copy's whole
    /// pages come from its own node's pool and its tail below one page stays on small pages of its node,
    /// whatever THP's mode (`detail::place_on_pages`: strict throws ENOMEM naming the node and the free
    /// pages; degrading records it and keeps that copy on transparent pages).
    replicated(const T* source, std::size_t n, const node_set& nodes = cpu_binding::of().nodes(),
               fallback fb = fallback::strict, page_size pages = page_size::transparent)
        : fallback_(fb), pages_(pages) {
        const topology& topo = topology::get();
        topo.check(nodes);
        if (nodes.empty()) detail::throw_invalid("replicated: empty node set");
        if (source == nullptr && n != 0) throw std::invalid_argument("replicated: null source of " + std::to_string(n) + " elements");
        if (n > std::numeric_limits<std::size_t>::max() / sizeof(T) ||
            memory::page_round(n * sizeof(T)) < n * sizeof(T))
            detail::throw_bad_length();
        size_ = n;
        nodes_ = nodes;
        try {
            for (int node : nodes) {
                copy c;
                c.node = node;
                if (bytes_per_copy() != 0) {
                    c.data = static_cast<T*>(memory::map(mapped_bytes(), copy_alignment()));
                    if (!huge_copies() && explicit_page() == 0 && topology::get().capabilities().thp != "never")
                        memory::forbid_huge_pages(c.data, mapped_bytes());
                    copies_.push_back(c); // owned from here on
                    copies_.back().bound = bind(copies_.back());
                } else {
                    copies_.push_back(c);
                }
            }
            index_nearest(topo);
            fill_from(source);
        } catch (...) {
            release();
            throw;
        }
    }
    /// \effects `replicated(r.data(), r.size(), nodes, fb)` for a contiguous range of T.
    template <class Range, class = std::enable_if_t<std::is_convertible<decltype(std::declval<const Range&>().data()), const T*>::value>,
              class = decltype(std::declval<const Range&>().size())>
    explicit replicated(const Range& r, const node_set& nodes = cpu_binding::of().nodes(), fallback fb = fallback::strict,
                        page_size pages = page_size::transparent)
        : replicated(r.data(), r.size(), nodes, fb, pages) {}

    replicated(const replicated&) = delete;
    replicated& operator=(const replicated&) = delete;
    /// \effects takes `other`'s copies; `other` is left empty.
    replicated(replicated&& other) noexcept { steal(other); }
    /// \effects frees this object's copies and takes `other`'s; `other` is left empty. \returns `*this`.
    replicated& operator=(replicated&& other) noexcept {
        if (this != &other) {
            release();
            steal(other);
        }
        return *this;
    }
    ~replicated() { release(); }

    /// \returns the number of elements of each copy.
    std::size_t size() const noexcept { return size_; }
    /// \returns whether it holds no element.
    bool empty() const noexcept { return size_ == 0; }
    /// \returns the nodes that hold a copy (in order).
    const node_set& nodes() const noexcept { return nodes_; }
    /// \returns the copies, in node order.
    const std::vector<copy>& copies() const noexcept { return copies_; }
    /// \returns the bytes one copy takes (whole pages); `bytes()` is all copies together.
    std::size_t bytes_per_copy() const noexcept { return memory::page_round(size_ * sizeof(T)); }
    /// \returns the bytes of every copy together.
    std::size_t bytes() const noexcept { return bytes_per_copy() * copies_.size(); }
    /// \returns whether some copy's binding was refused (degrading: left to first touch).
    bool degraded() const noexcept {
        for (const auto& c : copies_)
            if (refused(c)) return true;
        return false;
    }

    /// \returns the copy on `node`, or the nearest copy to it (distance; ties: lower id); nullptr when
    /// empty. \throws unknown_node for an id not in the topology.
    const T* copy_for(int node) const {
        if (copies_.empty()) return nullptr;
        topology::get().check(node);
        return copies_[nearest_[static_cast<std::size_t>(node)]].data;
    }
    /// \returns the node whose copy `copy_for(node)` returns (-1 when empty). \throws unknown_node.
    int copy_node_for(int node) const {
        if (copies_.empty()) return -1;
        topology::get().check(node);
        return copies_[nearest_[static_cast<std::size_t>(node)]].node;
    }
    /// \returns the copy for the calling thread: of the node whose `parallel_for` block it runs, or else
    /// of the node of its CPU (the first copy when that is unknown); nullptr when empty.
    const T* local() const noexcept {
        if (copies_.empty()) return nullptr;
        int node = detail::current_block_node();
        if (node < 0) node = topology::get().current_node();
        if (node < 0 || static_cast<std::size_t>(node) >= nearest_.size()) return copies_.front().data;
        return copies_[nearest_[static_cast<std::size_t>(node)]].data;
    }

    /// \effects refreshes every copy from [source, source + size()). \requires no concurrent reader.
    void assign(const T* source) { fill_from(source); }
    /// \effects calls `edit(T* data, std::size_t size)` on the first copy from the calling thread, then
    /// refreshes every other copy from it. \requires no concurrent reader. \throws what `edit` throws (the
    /// other copies are then left as they were: refresh them with `assign`).
    template <class Edit>
    void update(Edit&& edit) {
        if (copies_.empty()) return;
        edit(copies_.front().data, size_);
        fill_from(copies_.front().data, 1);
    }

    /// \returns the page histogram of the copy on `nodes()[k]` (`k` is the copy's index, not a node id).
    /// \throws std::out_of_range when `k` >= the number of copies (as shared_segment::where(k)).
    page_histogram where(std::size_t k) const {
        if (k >= copies_.size())
            throw std::out_of_range("numaplace: replicated::where(" + std::to_string(k) + "): there are " +
                                    std::to_string(copies_.size()) + " copies (k is an index into nodes())");
        return numaplace::where(copies_[k].data, size_ * sizeof(T));
    }
    /// \returns the page histogram of every copy, in node order.
    std::vector<page_histogram> where() const {
        std::vector<page_histogram> v;
        for (std::size_t k = 0; k < copies_.size(); ++k) v.push_back(where(k));
        return v;
    }
    /// \effects prints the memory cost and where each copy is.
    void report(std::ostream& os) const {
        os << "replicated: " << size_ << " elements of " << sizeof(T) << " bytes, " << copies_.size() << " copies x "
           << bytes_per_copy() << " bytes = " << bytes() << " bytes\n";
        for (std::size_t k = 0; k < copies_.size(); ++k) {
            page_histogram h;
            try {
                h = where(k);
            } catch (const std::exception& e) { // page queries refused (a container's seccomp profile)
                os << "  copy on node " << copies_[k].node << (refused(copies_[k]) ? " (NOT bound: binding refused)" : "")
                   << ": placement unknown (" << e.what() << ")\n";
                continue;
            }
            os << "  copy on node " << copies_[k].node << (refused(copies_[k]) ? " (NOT bound: binding refused)" : "") << ": "
               << h.on(copies_[k].node) << " of " << h.pages << " pages there";
            if (h.untouched) os << ", " << h.untouched << " untouched";
            os << '\n';
        }
    }

private:
    // Whether binding copy c was refused (a copy of no bytes has no pages to bind: never).
    static bool refused(const copy& c) noexcept { return c.data && !c.bound; }
    // Admitted and bound through the one placement path (degrading: written from its node's arena).
    bool bind(const copy& c) {
        return detail::place_on_pages(c.data, mapped_bytes(), memory::policy_mode::bind, node_set{c.node}, fallback_, pages_,
                                      "replicated: ");
    }
    // The explicit page a copy is placed on (0: transparent pages, or a copy shorter than one page).
    std::size_t explicit_page() const noexcept {
        const std::size_t e = pages_ == page_size::largest_explicit ? explicit_page_bytes(page_size::explicit_2m) : explicit_page_bytes(pages_);
        return bytes_per_copy() >= e ? e : 0;
    }
    // Copies never share a huge page: with THP on, a copy of at least a huge page starts on a huge-page
    // boundary and spans whole huge pages; a smaller one has huge pages kept off (its own mapping flags,
    // so it never merges with a neighbour's). Either way first touch from its arena keeps it local when
    // the binding is refused. A copy on explicit pages is not rounded up (whatever THP's mode): it starts
    // on an explicit page, its whole pages come from the pool and its tail stays on small pages of its
    // node, as for every placement (docs/huge-pages.md, "Sizes: never rounded up").
    bool huge_copies() const noexcept {
        return explicit_page() == 0 && topology::get().capabilities().thp != "never" && bytes_per_copy() >= detail::huge_page_size();
    }
    std::size_t copy_alignment() const noexcept {
        std::size_t a = alignof(T) > detail::page_size() ? alignof(T) : detail::page_size();
        if (huge_copies() && a < detail::huge_page_size()) a = detail::huge_page_size();
        const std::size_t e = explicit_page();
        return e != 0 && a < e ? e : a; // explicit pages: a copy starts on one
    }
    std::size_t mapped_bytes() const noexcept {
        if (!huge_copies()) return bytes_per_copy();
        const std::size_t h = detail::huge_page_size();
        return bytes_per_copy() > std::numeric_limits<std::size_t>::max() - h ? bytes_per_copy()
                                                                            : detail::round_up(bytes_per_copy(), h);
    }
    void index_nearest(const topology& topo) {
        nearest_.assign(topo.size(), 0);
        for (std::size_t n = 0; n < topo.size(); ++n) {
            std::size_t best = 0;
            for (std::size_t k = 1; k < copies_.size(); ++k) {
                const int a = copies_[k].node, b = copies_[best].node;
                const unsigned da = topo.distance(static_cast<int>(n), a), db = topo.distance(static_cast<int>(n), b);
                if (da < db || (da == db && a < b)) best = k;
            }
            nearest_[n] = best;
        }
    }
    // Writes every copy from `first` on (skipping the source itself), each from its node's arena.
    void fill_from(const T* source, std::size_t first = 0) {
        const std::size_t bytes = size_ * sizeof(T);
        if (bytes == 0 || copies_.size() <= first) return;
        // One unit (a page) per copy written: block j of this partition is unit j, copy first + j, and
        // runs in the arena of that copy's node (nodes_ is sorted, so is the subset).
        std::vector<int> ids;
        for (std::size_t k = first; k < copies_.size(); ++k) ids.push_back(copies_[k].node);
        const node_set nodes(ids);
        const page_geometry g;
        const basic_partition part(nodes.size(), g.page, 1, nodes, std::vector<std::size_t>(nodes.size(), 1),
                                   edge_alignment::page, topology::get(), g);
        const std::size_t chunk = std::size_t(1) << 20;
        const auto* src = reinterpret_cast<const char*>(source);
        detail::run_blocks(part, [&](const block& b) {
            char* dst = reinterpret_cast<char*>(copies_[first + b.begin].data);
            if (reinterpret_cast<const char*>(dst) == src) return;
            NUMAPLACE_HANDOVER_RELEASE();
            detail::for_range(0, (bytes + chunk - 1) / chunk, 1, [&](const tbb::blocked_range<std::size_t>& r) {
                NUMAPLACE_HANDOVER_ACQUIRE();
                const std::size_t lo = r.begin() * chunk, hi = std::min(bytes, r.end() * chunk);
                std::memcpy(dst + lo, src + lo, hi - lo);
                NUMAPLACE_HANDOVER_RELEASE();
            });
            NUMAPLACE_HANDOVER_ACQUIRE();
        });
    }
    void release() noexcept {
        for (auto& c : copies_)
            if (c.data) memory::unmap(c.data, mapped_bytes());
        copies_.clear();
        nearest_.clear();
        nodes_ = node_set();
        size_ = 0;
    }
    void steal(replicated& other) noexcept {
        size_ = std::exchange(other.size_, 0);
        fallback_ = other.fallback_;
        pages_ = other.pages_;
        nodes_ = std::move(other.nodes_);
        copies_ = std::move(other.copies_);
        nearest_ = std::move(other.nearest_);
        other.nodes_ = node_set();
        other.copies_.clear();
        other.nearest_.clear();
    }

    std::size_t size_ = 0;
    fallback fallback_ = fallback::strict;
    page_size pages_ = page_size::transparent;
    node_set nodes_;
    std::vector<copy> copies_;
    std::vector<std::size_t> nearest_; // node id -> index of its copy
};

} // namespace numaplace

#endif
