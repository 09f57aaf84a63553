#ifndef NUMAPLACE_TEST_OWNED_PAGES_HPP_INCLUDED
#define NUMAPLACE_TEST_OWNED_PAGES_HPP_INCLUDED

// The pages a block owns in a placed range, for the multi-node tests that check each block's pages on its
// node. The rule (a grain belongs to the block holding its first byte) is the library's
// basic_partition::page_bytes, tested on its own against an oracle in test_partition.cpp; here it only
// says which pages to look at.

#include <numaplace/partition.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace numaplace_test {

/// The addresses [begin, end) of the pages block `k` of `part` owns in its range of part.element_count()
/// T's at `data` (`data`'s own lead into its first grain), within the pages the range overlaps.
struct owned_span {
    std::uintptr_t begin = 0, end = 0;
    std::size_t bytes() const noexcept { return end - begin; }
    bool empty() const noexcept { return begin >= end; }
};
template <class T>
owned_span owned_pages(const T* data, const numaplace::partition<T>& part, std::size_t k) {
    const numaplace::basic_partition& e = part.untyped();
    const std::size_t page = numaplace::detail::page_size(), grain = e.alignment();
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    const std::size_t lead = base % grain;
    const auto range = e.page_bytes(k, e.units() * e.unit_bytes(), lead);
    owned_span s;
    s.begin = std::max(base - lead + range.first, base / page * page);
    s.end = std::min(base - lead + range.second, (base + e.size() * sizeof(T) + page - 1) / page * page);
    if (s.end < s.begin) s.end = s.begin;
    return s;
}
/// \returns the page histogram of the pages block `k` owns (see owned_pages).
template <class T>
numaplace::page_histogram where_owned(const T* data, const numaplace::partition<T>& part, std::size_t k) {
    const owned_span s = owned_pages(data, part, k);
    return numaplace::where(reinterpret_cast<const void*>(s.begin), s.bytes());
}

// The pages each block owns, restated here on their own as the oracle (the library's rule is
// basic_partition::page_bytes, which where_owned uses): a placement grain (part.alignment() bytes at an
// address that is a multiple of it) belongs to the block holding its first byte in the range, and is
// shared when it also holds another block's bytes. Counts the small pages of [data, data +
// part.element_count()) each block owns, and the shared ones.
struct page_owners {
    std::vector<std::size_t> owned; // small pages per block, in block order
    std::size_t pages = 0, shared_pages = 0, shared_grains = 0;
};
template <class T>
page_owners expected_page_owners(const T* data, const numaplace::partition<T>& part) {
    const std::size_t small = numaplace::detail::page_size(), grain = part.alignment();
    const auto base = reinterpret_cast<std::uintptr_t>(data);
    const std::uintptr_t end = base + part.element_count() * sizeof(T);
    const auto owner = [&](std::uintptr_t byte) { // the block holding the element that holds `byte`
        const std::size_t i = (byte - base) / sizeof(T);
        for (std::size_t k = 0; k < part.block_count(); ++k)
            if (part.block(k).begin <= i && i < part.block(k).end) return k;
        ADD_FAILURE() << "no block holds element " << i;
        return std::size_t(0);
    };
    page_owners r;
    r.owned.assign(part.block_count(), 0);
    std::uintptr_t last_shared = 0;
    for (std::uintptr_t p = base / small * small; p < end; p += small) {
        const std::uintptr_t g = p / grain * grain;
        const std::size_t k = owner(std::max(g, base));
        ++r.pages;
        ++r.owned[k];
        if (owner(std::min(g + grain, end) - 1) != k) { // the grain holds two blocks' bytes
            if (r.shared_pages == 0 || g != last_shared) ++r.shared_grains;
            ++r.shared_pages;
            last_shared = g;
        }
    }
    return r;
}
// Every page of the touched range on its owner's node, exactly: block k owns (where_owned) the oracle's
// count of pages and all of them are on its node; the whole range's histogram is those counts per node and
// nothing on any other node; where(data, part) has no remote page and calls `shared` exactly the pages of
// grains holding two blocks' bytes, at most one grain per inner edge.
template <class T>
void expect_pages_on_their_owners(const T* data, const numaplace::partition<T>& part, const std::string& what) {
    SCOPED_TRACE(what);
    const page_owners want = expected_page_owners(data, part);
    const auto loc = numaplace::where(data, part);
    EXPECT_EQ(loc.histogram.pages, want.pages);
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.remote, 0u);
    EXPECT_EQ(loc.shared, want.shared_pages);
    EXPECT_EQ(loc.local, want.pages - want.shared_pages);
    std::size_t blocks = 0;
    for (const auto& b : part.blocks()) blocks += b.empty() ? 0 : 1;
    EXPECT_LE(want.shared_grains, blocks == 0 ? 0 : blocks - 1) << "at most one shared grain per inner edge";
    EXPECT_LE(want.shared_pages, want.shared_grains * (part.alignment() / numaplace::detail::page_size()));
    std::size_t owned = 0;
    for (std::size_t k = 0; k < part.block_count(); ++k) {
        const int node = part.block(k).node;
        const auto h = where_owned(data, part, k);
        EXPECT_EQ(h.pages, want.owned[k]) << "pages block " << k << " owns (node " << node << ")";
        EXPECT_EQ(h.on(node), h.pages) << "pages block " << k << " owns, on node " << node;
        EXPECT_EQ(loc.histogram.on(node), want.owned[k]) << "pages of the range on node " << node;
        owned += h.pages;
    }
    EXPECT_EQ(owned, want.pages) << "every page owned by exactly one block";
    for (const auto& n : numaplace::topology::get().nodes())
        if (!part.nodes().contains(n.id)) EXPECT_EQ(loc.histogram.on(n.id), 0u) << "node " << n.id << " holds no block";
}

} // namespace numaplace_test

#endif
