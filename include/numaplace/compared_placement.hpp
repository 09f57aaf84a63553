#ifndef NUMAPLACE_COMPARED_PLACEMENT_HPP_INCLUDED
#define NUMAPLACE_COMPARED_PLACEMENT_HPP_INCLUDED

/// \file
/// The placements a benchmark compares, as values with readable names, and an array placed by one of
/// them: what `benchmark.hpp` registers one Google Benchmark per, and what the DGEMV demo prints one row
/// per. Core component (no oneTBB, no Google Benchmark). Why these six and how setup stays out of the
/// timed region: docs/benchmark.md.

#include "memory.hpp"
#include "partition.hpp"
#include "placement.hpp"
#include "topology.hpp"
#include "where.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {

/// How a compared placement decides where pages go.
enum class compared_kind {
    node_local,         ///< every page bound to one node (`on_node`)
    interleaved,        ///< pages round robin over every node (`interleaved`)
    serial_first_touch, ///< unbound pages, every one first written by the calling thread (the seeds' baseline)
    first_touch,        ///< unbound pages, first written by whatever thread the user's initialisation runs on
    partitioned,        ///< block k of the partition bound to node k (`partitioned`)
    partitioned_huge,   ///< the same with huge-page block edges, so the blocks may get huge pages
    partitioned_explicit, ///< the same on explicit huge pages of each node's own pool (`partitioned::with_pages`)
    custom              ///< a user's own placement value
};

/// One placement to compare: a kind, a name (a benchmark argument value: letters, digits, '_', '-', '.')
/// and, for `node_local`, a node; for `custom`, the user's placement value.
/// Copy only (moves copy): a moved-from placement keeps its name and allocates as before.
class compared_placement {
public:
    /// \effects copies the name and the placement; a moved-from placement keeps both.
    compared_placement(const compared_placement&) = default;
    /// \effects copies the name and the placement. \returns `*this`.
    compared_placement& operator=(const compared_placement&) = default;

    /// \returns every page on `node`. \throws unknown_node for an id `topology::get()` lacks;
    /// invalid_placement for a bad name. Default name "node_local" (node 0) or "node<k>".
    static compared_placement node_local(int node = 0, std::string name = {}) {
        const on_node check(node); // validates the id now, not at the first allocation
        (void)check;
        if (name.empty()) name = node == 0 ? "node_local" : "node" + std::to_string(node);
        return compared_placement(compared_kind::node_local, std::move(name), node, {});
    }
    /// \returns pages interleaved over every node.
    static compared_placement interleaved(std::string name = "interleaved") {
        return compared_placement(compared_kind::interleaved, std::move(name), -1, {});
    }
    /// \returns unbound pages, all first written by the thread that makes the array.
    static compared_placement serial_first_touch(std::string name = "serial_first_touch") {
        return compared_placement(compared_kind::serial_first_touch, std::move(name), -1, {});
    }
    /// \returns unbound pages left untouched: the user's initialisation places them by first touch.
    static compared_placement first_touch(std::string name = "first_touch") {
        return compared_placement(compared_kind::first_touch, std::move(name), -1, {});
    }
    /// \returns block k of the array's partition bound to node k.
    static compared_placement partitioned(std::string name = "partitioned") {
        return compared_placement(compared_kind::partitioned, std::move(name), -1, {});
    }
    /// \returns as `partitioned`, with the partition's edges on huge-page boundaries (`edge_alignment::huge`),
    /// so that under THP (`always`, or `madvise`: then requested) the blocks are made of huge pages.
    static compared_placement partitioned_huge(std::string name = "partitioned_huge") {
        return compared_placement(compared_kind::partitioned_huge, std::move(name), -1, {});
    }
    /// \returns as `partitioned`, every block on explicit huge pages of `pages` (explicit_2m, explicit_1g)
    /// from its own node's pool, edges on that page. Strict: an allocation the pools cannot serve throws
    /// (ask `unavailable` first). Default name "partitioned_explicit_2m" / "partitioned_explicit_1g".
    static compared_placement partitioned_explicit(page_size pages = page_size::explicit_2m, std::string name = {}) {
        if (name.empty()) name = pages == page_size::explicit_1g ? "partitioned_explicit_1g" : "partitioned_explicit_2m";
        compared_placement c(compared_kind::partitioned_explicit, std::move(name), -1, {});
        c.pages_ = pages;
        return c;
    }
    /// \returns the user's placement value `p` (the Placement concept, placement.hpp) under `name`.
    template <class Placement>
    static compared_placement custom(std::string name, Placement p) {
        return compared_placement(compared_kind::custom, std::move(name), -1,
                                  [p](std::size_t bytes) { return memory::allocate(bytes, p); });
    }

    /// \returns the name, as in the benchmark's `placement:<name>`.
    const std::string& name() const noexcept { return name_; }
    /// \returns the kind.
    compared_kind kind() const noexcept { return kind_; }
    /// \returns the node of `node_local`, -1 for the others.
    int node() const noexcept { return node_; }
    /// \returns whether pages are bound when mapped (the initialisation's threads do not decide).
    bool bound() const noexcept {
        return kind_ != compared_kind::serial_first_touch && kind_ != compared_kind::first_touch;
    }

    /// \returns the explicit page size of `partitioned_explicit` (`transparent` for the others).
    page_size pages() const noexcept { return pages_; }

    /// \returns why the pools cannot hold an array of `part` placed this way (a `partitioned_explicit` whose
    /// blocks own more pages of a node's pool than it has free, or a size the kernel lacks), naming the
    /// node, the page size and the free pages; empty when they can (and for every other kind). The count
    /// is the placement's own (`detail::explicit_pages_needed`): empty exactly when `allocate` maps it.
    template <class T>
    std::string unavailable(const partition<T>& part) const {
        if (kind_ != compared_kind::partitioned_explicit || part.empty()) return std::string();
        const std::size_t page = explicit_page_bytes(pages_);
        if (!explicit_page_supported(page)) return "the kernel has no " + page_bytes_name(page) + " pages";
        const partition<T> split = layout(part);
        const std::size_t bytes = split.element_count() * sizeof(T);
        const basic_partition of_bytes = split.untyped().for_bytes(bytes);
        int node = -1;
        return detail::pools_short(page, of_bytes.nodes(), detail::explicit_pages_needed(of_bytes, bytes, page), node);
    }

    /// \returns `unavailable(rows.elements())`: the matrix of a row partition.
    template <class T>
    std::string unavailable(const row_partition<T>& rows) const {
        return unavailable(rows.elements());
    }

    /// \returns the partition the array's pages and loops follow: `part`, or for `partitioned_huge` the same
    /// split (rows, nodes, weights) with huge-page edges, for `partitioned_explicit` with edges on its page.
    template <class T>
    partition<T> layout(const partition<T>& part) const {
        if (kind_ == compared_kind::partitioned_explicit && !part.empty())
            return partition<T>::from_untyped(numaplace::partitioned(part).with_pages(pages_).partition());
        if (kind_ != compared_kind::partitioned_huge || part.empty()) return part;
        const basic_partition& p = part.untyped();
        return partition<T>::from_untyped(p.remade(p.element_size(), p.unit_length(), edge_alignment::huge, p.geometry())).clipped(p.size());
    }

    /// \effects maps `bytes` and places them as this placement says, against `layout` (its `layout()`);
    /// nothing is touched. \returns the start (release it with `memory::unmap(p, bytes)`).
    /// \throws what `memory::allocate` / `memory::map` throw (placement_error, invalid_placement).
    template <class T>
    void* allocate(std::size_t bytes, const partition<T>& layout) const {
        switch (kind_) {
        case compared_kind::node_local: return memory::allocate(bytes, on_node(node_));
        case compared_kind::interleaved: return memory::allocate(bytes, numaplace::interleaved());
        case compared_kind::serial_first_touch:
        case compared_kind::first_touch: return memory::map(bytes, layout.empty() ? detail::page_size() : layout.alignment());
        case compared_kind::partitioned:
        case compared_kind::partitioned_huge: return memory::allocate(bytes, numaplace::partitioned(layout));
        case compared_kind::partitioned_explicit: return memory::allocate(bytes, numaplace::partitioned(layout).with_pages(pages_));
        case compared_kind::custom: return custom_(bytes);
        }
        return nullptr;
    }

private:
    compared_placement(compared_kind k, std::string name, int node, std::function<void*(std::size_t)> custom)
        : kind_(k), name_(std::move(name)), node_(node), custom_(std::move(custom)) {
        bool ok = !name_.empty();
        for (char c : name_)
            ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '-' || c == '.');
        if (!ok)
            detail::throw_invalid("compared_placement: name '" + name_ +
                                  "' must be non-empty letters, digits, '_', '-' or '.' (it becomes a benchmark argument)");
    }

    compared_kind kind_;
    std::string name_;
    int node_;
    std::function<void*(std::size_t)> custom_;
    page_size pages_ = page_size::transparent;
};

namespace detail {
/// \throws invalid_placement naming `who` when two of `placements` share a name (names are benchmark
/// arguments and table rows: two alike could not be told apart).
inline void check_distinct_names(const std::vector<compared_placement>& placements, const char* who) {
    for (std::size_t i = 0; i < placements.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (placements[i].name() == placements[j].name())
                throw_invalid(std::string(who) + ": two placements named '" + placements[i].name() + "'");
}
} // namespace detail

/// \returns the five placements issue 32 compares: node_local (node 0), interleaved, serial_first_touch,
/// partitioned, partitioned_huge.
inline std::vector<compared_placement> standard_placements() {
    return {compared_placement::node_local(), compared_placement::interleaved(),
            compared_placement::serial_first_touch(), compared_placement::partitioned(),
            compared_placement::partitioned_huge()};
}

/// The pages a placed array is made of, whatever its placement advises: a benchmark that holds a kernel
/// against a read limit measured on one kind of page makes both arrays of that kind.
enum class page_choice {
    as_placed, ///< what the placement advises (partitioned_huge may ask for huge pages)
    small,     ///< MADV_NOHUGEPAGE before the first write: small pages whatever THP's mode
    huge       ///< MADV_HUGEPAGE before the first write: what THP in `madvise` mode gives
};

/// \returns "as placed", "small pages" or "MADV_HUGEPAGE".
inline const char* name(page_choice c) noexcept {
    return c == page_choice::small ? "small pages" : c == page_choice::huge ? "MADV_HUGEPAGE" : "as placed";
}

/// An array of `part.element_count()` T's placed by one compared placement: the setup of one
/// benchmark, made before its timed region. Not copyable; the memory is unmapped on destruction.
template <class T>
class placed_array {
    static_assert(std::is_trivially_default_constructible<T>::value && std::is_trivially_destructible<T>::value,
                  "placed_array holds raw memory that the initialisation writes: trivial element types only");

public:
    /// \effects maps and places the array (`how.allocate`), advises its pages as `pages` says (before
    /// any write); for `serial_first_touch` then writes every page
    /// from the calling thread (`memory::touch`), so every page is on this thread's node before any
    /// initialisation; other kinds are left untouched (bound pages go where the binding says at the first
    /// write, `first_touch` pages where the initialising thread runs).
    /// \throws as `compared_placement::allocate`; invalid_placement when the byte size overflows.
    placed_array(compared_placement how, const partition<T>& part, page_choice pages = page_choice::as_placed)
        : how_(std::move(how)), layout_(how_.layout(part)), count_(layout_.element_count()), pages_(pages) {
        if (count_ > SIZE_MAX / sizeof(T))
            detail::throw_invalid("placed_array: " + std::to_string(count_) + " elements overflow a size_t of bytes");
        data_ = static_cast<T*>(how_.allocate(bytes(), layout_));
        if (pages != page_choice::as_placed)
            detail::os_advise(data_, memory::page_round(bytes()),
                              pages == page_choice::huge ? detail::page_advice::huge_pages : detail::page_advice::no_huge_pages);
        if (how_.kind() == compared_kind::serial_first_touch) memory::touch(data_, bytes());
    }
    /// \effects the array of the matrix of `rows` (its `elements()`), as above.
    placed_array(compared_placement how, const row_partition<T>& rows, page_choice pages = page_choice::as_placed)
        : placed_array(std::move(how), rows.elements(), pages) {}
    ~placed_array() { memory::unmap(data_, bytes()); }
    placed_array(const placed_array&) = delete;
    placed_array& operator=(const placed_array&) = delete;

    /// \returns the first element.
    T* data() noexcept { return data_; }
    /// \returns the first element.
    const T* data() const noexcept { return data_; }
    /// \returns the elements: `layout().element_count()`.
    std::size_t size() const noexcept { return count_; }
    /// \returns `size() * sizeof(T)`.
    std::size_t bytes() const noexcept { return count_ * sizeof(T); }
    /// \returns the placement that made the array.
    const compared_placement& placement() const noexcept { return how_; }
    /// \returns small or huge pages, as asked.
    page_choice pages() const noexcept { return pages_; }
    /// \returns the partition the pages follow (`placement().layout(part)`): loops should use it.
    const partition<T>& layout() const noexcept { return layout_; }
    /// \returns where() of the array against `layout()`: pages per node, and the fraction on their block's node.
    /// \throws std::system_error when the kernel refuses the query.
    partition_locality locality() const { return where(static_cast<const T*>(data_), layout_); }

private:
    compared_placement how_;
    partition<T> layout_;
    std::size_t count_;
    page_choice pages_;
    T* data_ = nullptr;
};

} // namespace numaplace

#endif
