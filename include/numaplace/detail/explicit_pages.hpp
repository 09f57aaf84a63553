#ifndef NUMAPLACE_DETAIL_EXPLICIT_PAGES_HPP_INCLUDED
#define NUMAPLACE_DETAIL_EXPLICIT_PAGES_HPP_INCLUDED

/// \file
/// What the placements do on explicit huge pages beyond one `place_on_pages` call (place.hpp): the
/// alignment they ask for, weighted runs of explicit pages, partitioned blocks on their own nodes'
/// pools with every pool checked before anything is mapped. Design: docs/huge-pages.md.

#include "buffer_record.hpp"
#include "../basic_partition.hpp"
#include "../diagnostics.hpp"
#include "../error.hpp"
#include "../huge_pages.hpp"
#include "../memory.hpp"
#include "../place.hpp"
#include "../topology.hpp"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <string>
#include <vector>

namespace numaplace {
namespace detail {
/// \returns the start alignment a placement on `pages` needs for `bytes`: a page for transparent pages and
/// requests below one explicit page, else the explicit page (for `largest_explicit`, 1 GiB from 1 GiB up).
inline std::size_t explicit_alignment(numaplace::page_size pages, std::size_t bytes) noexcept {
    const std::size_t page = pages == numaplace::page_size::largest_explicit
                                 ? (bytes >= (std::size_t(1) << 30) ? std::size_t(1) << 30 : std::size_t(2) << 20)
                                 : explicit_page_bytes(pages);
    return page != 0 && bytes >= page ? page : page_size();
}

/// \effects checks the pools for `need[k]` pages of `page` bytes on `nodes[k]` (bound). \returns the
/// first shortage in words (empty: none) and its node in `node`.
inline std::string pools_short(std::size_t page, const node_set& nodes, const std::vector<std::size_t>& need, int& node) {
    for (std::size_t k = 0; k < nodes.size(); ++k) {
        if (need[k] == 0) continue;
        std::string why = pool_shortage(page, need[k], memory::policy_mode::bind, node_set{nodes[k]});
        if (!why.empty()) {
            node = nodes[k];
            return why;
        }
    }
    node = -1;
    return std::string();
}

/// \effects weighted interleave on explicit pages: `weights[k]` consecutive explicit pages bound to
/// `nodes[k]`, round after round, the tail shorter than one page with the node whose run comes next.
/// The pools of every node are checked before anything is mapped. \returns false if degraded (recorded;
/// then the runs are of explicit pages where they could be, else small pages bound alike).
/// \throws placement_error (strict).
inline bool weighted_on_pages(void* p, std::size_t bytes, const node_set& nodes, std::vector<std::size_t> weights,
                              fallback fb, numaplace::page_size ps) {
    const numaplace::page_size run_pages = ps == numaplace::page_size::largest_explicit ? numaplace::page_size::explicit_2m : ps;
    const std::size_t page = explicit_page_bytes(run_pages);
    const std::size_t pages = bytes / page;
    for (std::size_t& w : weights) w = std::min(w, pages + 1); // one round at most: no overflow below
    std::vector<std::size_t> need(nodes.size(), 0);
    std::size_t period = 0;
    for (std::size_t w : weights) period += w;
    for (std::size_t k = 0, before = 0; k < nodes.size(); before += weights[k], ++k) // pages of node k
        need[k] = pages / period * weights[k] + std::min(weights[k], pages % period > before ? pages % period - before : 0);
    int node = -1;
    std::string why = pools_short(page, nodes, need, node);
    bool checked = why.empty();
    if (!checked && fb == fallback::strict)
        throw_placement(node, bytes, ENOMEM, "weighted interleave: " + why);
    if (!checked) detail::degradation_log::instance().record("weighted interleave: " + why + ": runs checked one by one");
    bool all = checked;
    auto* c = static_cast<char*>(p);
    std::size_t at = 0, k = 0;
    while (at < bytes) {
        while (weights[k] == 0) k = (k + 1) % nodes.size();
        const std::size_t run = std::min(bytes - at, weights[k] * page);
        all = place_on_pages(c + at, run, memory::policy_mode::bind, node_set{nodes[k]}, fb,
                             run >= page ? run_pages : numaplace::page_size::transparent, "weighted interleave: ", checked) && all;
        at += run;
        k = (k + 1) % nodes.size();
    }
    return all;
}

/// \returns the whole explicit pages of `page` bytes each block of `part` (the split of `bytes`, grain on
/// the explicit page) owns, one count per node of `part`: its `page_bytes` range in whole pages (the
/// allocation's tail below a page is on small pages). What `partitioned::with_pages` maps and what
/// `compared_placement::unavailable` predicts, decided here once.
inline std::vector<std::size_t> explicit_pages_needed(const basic_partition& part, std::size_t bytes, std::size_t page) {
    std::vector<std::size_t> need(part.block_count(), 0);
    for (std::size_t k = 0; k < part.block_count(); ++k) {
        const auto range = part.page_bytes(k, bytes);
        need[k] = (range.second - range.first) / page;
    }
    return need;
}

/// \effects `partitioned::apply` on explicit pages: the pages each block of `part` (the split of `bytes`,
/// grain on the explicit page) owns on `pages` from its own node's pool, every pool checked before
/// anything is mapped; `layout` recorded for replace (buffer_record.hpp). A block's range below one
/// explicit page (or its tail) is on small pages. Strict throws placement_error (ENOMEM: a pool short,
/// naming the node, page size and free pages); degrading records it and puts those blocks on transparent
/// pages. \returns false if degraded.
inline bool partitioned_on_pages(void* p, std::size_t bytes, const basic_partition& part, const basic_partition& layout,
                             fallback fb, numaplace::page_size pages) {
    const std::size_t page = part.alignment();
    const numaplace::page_size block_pages = pages == numaplace::page_size::largest_explicit ? numaplace::page_size::explicit_2m : pages;
    const node_set& nodes = part.nodes();
    std::vector<std::size_t> need = explicit_pages_needed(part, bytes, page);
    int short_node = -1;
    const std::string shortage = pools_short(page, nodes, need, short_node);
    if (fb == fallback::strict && !shortage.empty())
        throw_placement(short_node, bytes, ENOMEM, "partitioned: " + shortage);
    placed_buffers::instance().placed(p, memory::page_round(bytes), layout); // replace.hpp reads it
    if (!shortage.empty()) // which nodes: record each
        for (std::size_t k = 0; k < nodes.size(); ++k) {
            const std::string why = need[k] ? pool_shortage(page, need[k], memory::policy_mode::bind, node_set{nodes[k]}) : "";
            if (!why.empty()) {
                degradation_log::instance().record("partitioned: " + why + ": the block of node " + std::to_string(nodes[k]) +
                                                   " on transparent huge pages (THP " + topology::get().capabilities().thp + ") or small pages");
                need[k] = 0; // marks the block: transparent
            }
        }
    bool all = shortage.empty();
    auto* base = static_cast<char*>(p);
    for (std::size_t k = 0; k < part.block_count(); ++k) {
        const auto range = part.page_bytes(k, bytes);
        if (range.first == range.second) continue;
        // its whole explicit pages (place_on_pages puts a tail below one page on small pages), or none
        if (need[k] == 0) os_advise(base + range.first, range.second - range.first, page_advice::huge_pages);
        all = place_on_pages(base + range.first, range.second - range.first, memory::policy_mode::bind, node_set{nodes[k]},
                             fb, need[k] != 0 ? block_pages : numaplace::page_size::transparent, "partitioned: ", true) && all;
    }
    return all;
}

} // namespace detail
} // namespace numaplace

#endif
