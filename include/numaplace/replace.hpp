#ifndef NUMAPLACE_REPLACE_HPP_INCLUDED
#define NUMAPLACE_REPLACE_HPP_INCLUDED

/// \file
/// `replace`: moves the pages of existing data so they match a target placement (a partition: block k to
/// node k; a node; an interleave), keeping the contents, and reports what moved.
///
/// Mechanism. For the pages the range overlaps, in batches of at most 4096 pages (16 MiB, ending on
/// huge-page boundaries) from `resume_at`:
/// 1. the new policy is set first, one `mbind` per run of pages with one target (one per block; one for
///    a node; one MPOL_INTERLEAVE for an interleave), without MPOL_MF_MOVE, on the pages wholly inside
///    the range, so pages faulted later (or while moving) go to the right node too. A range the kernel
///    keeps as one VMA becomes one VMA per block, never more (later mbinds of a batch carry the same
///    policy, which the kernel does not split for);
/// 2. `move_pages(2)` with nodes = NULL queries where each page is (the `before` histogram);
/// 3. `move_pages(2)` with explicit target nodes moves only the pages that are present and elsewhere;
///    its per-page status gives the `after` histogram and, per errno, the pages that could not move.
///    A page reported failed is queried again (a huge page moves whole: its tail pages report EBUSY while
///    the head moves) and counted by where it is then.
/// Why not `mbind(MPOL_MF_MOVE)`, measured (benchmarks/replace.cpp, host, 1 GiB already in place, one
/// run): the kernel skips a placed page about 4x faster under mbind MF_MOVE (33 ms) than under
/// move_pages (120-200 ms; libnuma's numa_move_pages 161 ms; replace 140 ms, i.e. one query pass), but
/// mbind reports no per-page result, and it is silently wrong where it matters: in the guests (Linux
/// 6.1) `mbind(MPOL_MF_MOVE | MPOL_MF_STRICT)` over pages shared copy-on-write with a child process
/// returned 0 and left all of them where they were, where `move_pages` reports -EACCES for each. A
/// replace that must never fail silently therefore uses `move_pages` (per-page errno, batches, budgets,
/// progress) and mbind only for the policy (without MPOL_MF_MOVE: no page walk).
///
/// Huge pages. A transparent huge page straddling a block edge would move whole (move_pages migrates a
/// THP as one folio) to the node of whichever block is moved first, and a later move of the other block
/// would drag it back: pages of one block would end up on the other node. So, when THP is not `never`
/// and a change of target falls inside a huge-page-aligned region, `replace` first sets MADV_NOHUGEPAGE
/// on the range (no new THP, no khugepaged collapse across the edge) and splits the huge page in place
/// with `madvise(MADV_COLD)` on one small page at the edge (the kernel splits a THP only partly covered
/// by MADV_COLD; contents, mapping and concurrent access are unaffected; the pages are only aged on the
/// LRU). Huge pages wholly inside one block stay huge and move whole. An interleave target splits every
/// THP of the range (its target changes every page).
///
/// Partial pages. A range that does not start or end on a page boundary shares its first and last page
/// with other data: those pages move (contents of the other data move with them, unchanged) to the node
/// of the element at the page's start (element 0 for the first page), the rule `where(data, part)` counts
/// locality by, but they keep their policy (the policy belongs to the other data too).
///
/// Containers and the loop. A container whose allocator is partitioned carries the layout its pages were
/// placed by; `parallel_for(c, body)`, `first_touch(c)` and `where(c.data(), partition_of(c))` follow
/// `partition_of(c)`. `replace(c, new_partition)` moves all of c's capacity by the new layout's split of it
/// (the split the allocator would have made) and records the new layout for c's buffer, so
/// `partition_of(c)` and every loop over c follow the pages from then on. The record belongs to the
/// buffer: a reallocation (growth, `shrink_to_fit`, a copy) gets the allocator's layout again, placed by
/// the allocator, so the loop and the pages still agree. To keep the invariant "no public call sequence
/// makes the loop and the pages disagree silently": a partitioned container is re-placed only by a
/// partition (a node or an interleave target does not compile for it), a buffer below one page (in its
/// node's small-object heap) is refused, and the raw-range overloads refuse a range that overlaps any
/// partitioned buffer (`invalid_placement`).
///
/// Budgets. `replace_options::page_budget` caps the pages moved per call and `time_budget` the time
/// (checked between batches); a call that stops early returns `resume_at`, where the next call continues
/// (`opts.resume_at = report.resume_at`). Pages are examined in address order, each page at most once per
/// pass, so a pass over P pages with at most M misplaced completes in at most ceil(M / page_budget) + 1
/// calls. `progress` is called after every batch (return false to stop). The page budget counts the
/// small pages handed to the kernel: a huge page moves whole, so a call may move up to 511 more small
/// pages than its budget (the next call finds them in place).
///
/// Refusals. A policy, query or move the kernel refuses (EPERM under Docker's seccomp profile, EACCES for
/// a page another process maps too, EBUSY for a pinned page, ENOMEM for a full node) is counted per errno
/// in the report, never silently: strict throws `replace_error` (a `placement_error`) carrying the whole
/// report after doing what it could; degrading records a degradation and returns the report. Contents
/// never change either way.

#include "detail/linux.hpp"
#include "detail/buffer_record.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "placement.hpp"
#include "topology.hpp"
#include "where.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>

namespace numaplace {

/// What `replace` has done so far (passed to the progress callback after every batch).
struct replace_progress {
    std::size_t pages = 0;    ///< pages the range overlaps
    std::size_t scanned = 0;  ///< pages examined by this call so far
    std::size_t moved = 0;    ///< pages moved by this call so far
    std::size_t failed = 0;   ///< pages that could not move, so far
    std::size_t position = 0; ///< the next page to examine
};

/// How one `replace` call runs.
struct replace_options {
    /// At most this many pages handed to the kernel to move per call (0: no limit).
    std::size_t page_budget = 0;
    /// Stop after the batch during which this much time has passed (0: no limit).
    std::chrono::nanoseconds time_budget{0};
    /// The page (index in the range's pages) to start at: a previous report's `resume_at`.
    std::size_t resume_at = 0;
    /// Set the target's policy on the range (pages faulted later go to the target too).
    bool keep_policy = true;
    /// Called after every batch; returning false stops the call (as a budget does).
    std::function<bool(const replace_progress&)> progress;
};

/// Pages that could not move, for one errno.
struct replace_failure {
    int error = 0;         ///< EPERM, EACCES, EBUSY, ENOMEM, ...
    std::size_t pages = 0;
};

/// What a `replace` call did, over the pages it examined: [first_page, resume_at) of the range's pages.
struct replace_report {
    std::size_t page_size = 0;
    std::size_t pages = 0;       ///< pages the range overlaps
    std::size_t first_page = 0;  ///< where this call started (options.resume_at)
    std::size_t resume_at = 0;   ///< where the next call continues; == pages when the range is done
    page_histogram before;       ///< the examined pages before
    page_histogram after;        ///< the examined pages after
    std::size_t moved = 0;       ///< pages moved to their target
    std::size_t in_place = 0;    ///< present pages already on their target
    std::size_t untouched = 0;   ///< pages not faulted in (or the zero page): placed by the policy on touch
    std::vector<replace_failure> failures; ///< pages that could not move, per errno (ascending)
    bool policy_kept = false;    ///< the target's policy is set on the whole pages of the range (false: none)
    int policy_errno = 0;        ///< why not (0 when kept or not asked)
    int query_errno = 0;         ///< the page query was refused (nothing examined; every page counted failed)
    std::size_t huge_pages_split = 0; ///< THPs split at a change of target (MADV_COLD at the edge)
    std::chrono::nanoseconds elapsed{0};

    /// \returns the pages that could not move.
    std::size_t failed_pages() const noexcept {
        std::size_t n = 0;
        for (const auto& f : failures) n += f.pages;
        return n;
    }
    /// \returns the pages that could not move with `error`.
    std::size_t failed(int error) const noexcept {
        for (const auto& f : failures)
            if (f.error == error) return f.pages;
        return 0;
    }
    /// \returns whether every page of the range has been examined (no budget left pages behind).
    bool done() const noexcept { return resume_at >= pages; }
    /// \returns whether the range is done, every page moved or in place, and the policy kept as asked.
    bool complete() const noexcept { return done() && failures.empty() && policy_errno == 0; }
    /// \returns one line: pages moved, in place, untouched, failed per errno, policy.
    std::string summary() const {
        std::ostringstream os;
        os << "replace: " << pages << " pages, examined " << (resume_at - first_page) << " (from " << first_page
           << "): moved " << moved << ", in place " << in_place;
        os << ", untouched " << untouched << ", failed "
           << failed_pages();
        for (const auto& f : failures) os << " [" << std::strerror(f.error) << " (errno " << f.error << "): " << f.pages << ']';
        os << "; policy " << (policy_kept ? "kept" : policy_errno ? "REFUSED (errno " + std::to_string(policy_errno) + ")" : "not set");
        if (huge_pages_split) os << "; " << huge_pages_split << " huge pages split at edges";
        if (!done()) os << "; stopped by budget, resume at page " << resume_at;
        return os.str();
    }
    /// \effects prints the summary and the per-node pages before and after.
    void print(std::ostream& os) const {
        os << summary() << '\n';
        const std::size_t n = std::max(before.per_node.size(), after.per_node.size());
        for (std::size_t k = 0; k < n; ++k)
            os << "  node " << k << ": " << before.on(static_cast<int>(k)) << " -> " << after.on(static_cast<int>(k))
               << " pages\n";
        os << "  untouched: " << before.untouched << " -> " << after.untouched << '\n';
    }
};

/// A strict `replace` that could not place every page (or set the policy): carries the whole report.
/// Copies share the report (never throw).
class replace_error : public placement_error {
public:
    replace_error(int node, std::size_t bytes, int error_number, const std::string& what,
                  std::shared_ptr<const replace_report> report)
        : placement_error(node, bytes, error_number, what), report_(std::move(report)) {}
    replace_error(const replace_error&) noexcept = default;
    replace_error& operator=(const replace_error&) noexcept = default;
    /// \returns what the call did (pages per node before and after, failures per errno).
    const replace_report& report() const noexcept { return *report_; }

private:
    std::shared_ptr<const replace_report> report_;
};
static_assert(std::is_nothrow_copy_constructible<replace_error>::value, "exceptions must copy without throwing");

namespace detail {

constexpr std::size_t replace_batch = 4096;

// The target of every page: runs of pages with one node (partition, node) or a node per page (interleave).
struct replace_plan {
    const topology* topo = nullptr;
    std::uintptr_t first = 0;  // address of page 0 (page-aligned)
    std::uintptr_t begin = 0;  // the range [begin, end)
    std::uintptr_t end = 0;
    std::size_t pages = 0;
    // runs: page index where each run starts and its node id (partition / node targets)
    std::vector<std::pair<std::size_t, int>> runs;
    // interleave: nodes ordered by OS index (the kernel's order), per page (address / page) % size
    std::vector<int> interleave;
    int mode = mpol_bind;
    std::string what; // for messages

    std::size_t page_size() const noexcept { return numaplace::detail::page_size(); }
    int node_of(std::size_t page) const noexcept {
        if (!interleave.empty())
            return interleave[((first / page_size()) + page) % interleave.size()];
        // runs are few (one per block): linear from the back is fine, binary for many
        auto it = std::upper_bound(runs.begin(), runs.end(), page,
                                   [](std::size_t p, const std::pair<std::size_t, int>& r) { return p < r.first; });
        return it == runs.begin() ? runs.front().second : std::prev(it)->second;
    }
};

inline replace_plan make_plan(const void* p, std::size_t bytes, const topology& topo) {
    replace_plan plan;
    plan.topo = &topo;
    const std::size_t page = page_size();
    plan.begin = reinterpret_cast<std::uintptr_t>(p);
    if (bytes > std::numeric_limits<std::uintptr_t>::max() - plan.begin - page)
        throw_invalid("replace: range of " + std::to_string(bytes) + " bytes wraps the address space");
    plan.end = plan.begin + bytes;
    plan.first = plan.begin / page * page;
    plan.pages = bytes == 0 ? 0 : (round_up(plan.end, page) - plan.first) / page;
    return plan;
}

// Runs of a partition over `count` elements of `element_size` bytes at plan.begin: page i goes to the
// block of the element at its start (element 0 for the first page).
inline void plan_partition(replace_plan& plan, const basic_partition& e /* element indexes */, std::size_t element_size) {
    const std::size_t page = plan.page_size();
    const std::size_t count = e.size();
    std::size_t k = 0;
    const std::size_t blocks = e.block_count();
    for (std::size_t i = 0; i < plan.pages; ++i) {
        const std::uintptr_t addr = plan.first + i * page;
        std::size_t index = addr <= plan.begin ? 0 : (addr - plan.begin) / element_size;
        if (count != 0 && index >= count) index = count - 1;
        while (k + 1 < blocks && (e.block(k).empty() || e.block(k).end <= index)) ++k;
        int node = e.block(k).node;
        if (e.block(k).empty()) { // index past every non-empty block: the last non-empty one
            for (std::size_t j = blocks; j-- > 0;)
                if (!e.block(j).empty()) { node = e.block(j).node; break; }
        }
        if (plan.runs.empty() || plan.runs.back().second != node) plan.runs.emplace_back(i, node);
        // jump to the next page that could change block
        if (k + 1 < blocks && !e.block(k).empty()) {
            const std::uintptr_t next = plan.begin + e.block(k).end * element_size; // first address of the next block
            if (next > addr + page) {
                const std::size_t j = (next - plan.first) / page; // the page holding `next` starts in block k
                if (j > i + 1) i = std::min(j, plan.pages) - 1;
            }
        }
    }
}

// target_os[j] = OS node of page first + j, for j < count (runs walked once, not searched per page).
inline void fill_targets(const replace_plan& plan, const topology& topo, std::size_t first, std::size_t count,
                         std::vector<unsigned>& target_os) {
    if (!plan.interleave.empty()) {
        const std::size_t n = plan.interleave.size();
        std::size_t k = ((plan.first / plan.page_size()) + first) % n;
        for (std::size_t j = 0; j < count; ++j) {
            target_os[j] = topo.at(plan.interleave[k]).os_index;
            if (++k == n) k = 0;
        }
        return;
    }
    auto run = std::upper_bound(plan.runs.begin(), plan.runs.end(), first,
                                [](std::size_t p, const std::pair<std::size_t, int>& r) { return p < r.first; });
    if (run != plan.runs.begin()) --run;
    std::size_t j = 0;
    while (j < count) {
        const unsigned os = topo.at(run->second).os_index;
        const auto next = std::next(run);
        const std::size_t end = next == plan.runs.end() ? count : std::min(count, next->first - first);
        for (; j < end; ++j) target_os[j] = os;
        if (next == plan.runs.end()) break;
        run = next;
    }
}

inline void record_failure(std::vector<replace_failure>& failures, int error, std::size_t pages) {
    if (pages == 0) return;
    for (auto& f : failures)
        if (f.error == error) {
            f.pages += pages;
            return;
        }
    failures.push_back(replace_failure{error, pages});
    std::sort(failures.begin(), failures.end(),
              [](const replace_failure& a, const replace_failure& b) { return a.error < b.error; });
}

// THP: split huge pages in which the target changes (see the file comment). \returns the splits made.
inline std::size_t split_huge_at_edges(const replace_plan& plan) {
    const std::string& thp = plan.topo->capabilities().thp;
    if (thp == "never" || plan.pages == 0) return 0;
    const std::size_t page = plan.page_size(), huge = huge_page_size();
    std::vector<std::uintptr_t> edges; // addresses of pages where the target differs from the page before
    if (!plan.interleave.empty()) {
        if (plan.interleave.size() > 1)
            for (std::uintptr_t r = plan.first / huge * huge; r < plan.first + plan.pages * page; r += huge)
                edges.push_back(std::max<std::uintptr_t>(r, plan.first) + (r < plan.first ? 0 : page));
    } else {
        for (std::size_t r = 1; r < plan.runs.size(); ++r) edges.push_back(plan.first + plan.runs[r].first * page);
    }
    std::size_t split = 0;
    bool advised = false;
    std::uintptr_t last_region = ~std::uintptr_t(0);
    for (std::uintptr_t a : edges) {
        if (a % huge == 0) continue; // the edge is a huge-page boundary: no THP straddles it
        if (!advised) {
            // whole pages of the range only (partial pages belong to other data too)
            const std::uintptr_t b = round_up(plan.begin, page), e = plan.end / page * page;
            if (e > b) os_advise(reinterpret_cast<void*>(b), e - b, page_advice::no_huge_pages);
            advised = true;
        }
        if (a / huge == last_region) continue;
        last_region = a / huge;
        // The kernel splits a THP that MADV_COLD covers only partly (PMD- or PTE-mapped, mapped once);
        // nothing happens to small pages but LRU aging.
        if (os_advise(reinterpret_cast<void*>(a), page, page_advice::cold) == 0) ++split;
    }
    return split;
}

// Sets the policy: one mbind per run (interleave: one) over the whole pages inside the range.
inline int set_policy(const replace_plan& plan, const node_set& interleave_nodes) {
    const std::size_t page = plan.page_size();
    const std::uintptr_t lo = round_up(plan.begin, page), hi = plan.end / page * page;
    if (hi <= lo) return 0;
    const topology& topo = *plan.topo;
    auto mbind_range = [&](std::uintptr_t b, std::uintptr_t e, const node_set& nodes) {
        b = std::max(b, lo);
        e = std::min(e, hi);
        if (e <= b) return 0;
        kernel_nodemask mask;
        for (int id : nodes) mask.set(topo.at(id).os_index);
        return os_mbind(reinterpret_cast<void*>(b), e - b, plan.mode, mask, 0);
    };
    if (!plan.interleave.empty()) return mbind_range(lo, hi, interleave_nodes);
    for (std::size_t r = 0; r < plan.runs.size(); ++r) {
        const std::uintptr_t b = plan.first + plan.runs[r].first * page;
        const std::uintptr_t e = r + 1 < plan.runs.size() ? plan.first + plan.runs[r + 1].first * page
                                                          : plan.first + plan.pages * page;
        if (int err = mbind_range(b, e, node_set{plan.runs[r].second})) return err;
    }
    return 0;
}

inline replace_report run_replace(const replace_plan& plan, const node_set& interleave_nodes, fallback fb,
                                  const replace_options& opts) {
    const auto start = std::chrono::steady_clock::now();
    const topology& topo = *plan.topo;
    replace_report rep;
    rep.page_size = plan.page_size();
    rep.pages = plan.pages;
    rep.first_page = rep.resume_at = std::min(opts.resume_at, plan.pages);
    rep.before = detail::empty_histogram(topo);
    rep.after = detail::empty_histogram(topo);
    if (plan.pages == 0 || rep.first_page == plan.pages) return rep;

    rep.huge_pages_split = split_huge_at_edges(plan);
    if (opts.keep_policy) {
        const std::size_t page = plan.page_size();
        rep.policy_errno = set_policy(plan, interleave_nodes);
        rep.policy_kept = rep.policy_errno == 0 && plan.end / page * page > round_up(plan.begin, page);
    }

    const std::size_t page = plan.page_size();
    std::vector<void*> addresses(std::min(replace_batch, plan.pages - rep.first_page));
    std::vector<int> status(addresses.size());
    std::vector<void*> move_addr;
    std::vector<int> move_node, move_status;
    std::vector<std::size_t> move_index;
    move_addr.reserve(addresses.size());
    move_node.reserve(addresses.size());
    move_status.reserve(addresses.size());
    move_index.reserve(addresses.size());
    std::vector<int> after_status(addresses.size());
    std::vector<unsigned> target_os(addresses.size());

    std::size_t i = rep.first_page;
    std::size_t attempted = 0; // pages handed to move_pages: what the page budget counts
    replace_progress progress;
    progress.pages = plan.pages;
    while (i < plan.pages) {
        std::size_t count = std::min(replace_batch, plan.pages - i);
        if (i + count < plan.pages) {
            // End batches on a huge-page boundary: a THP moves whole, and one straddling two batches would
            // already be moved when the second batch is examined.
            const std::size_t huge = huge_page_size();
            const std::uintptr_t e = (plan.first + (i + count) * page) / huge * huge;
            if (e > plan.first + i * page) count = (e - plan.first) / page - i;
        }
        for (std::size_t j = 0; j < count; ++j) addresses[j] = reinterpret_cast<void*>(plan.first + (i + j) * page);
        if (int err = os_query_pages(count, addresses.data(), status.data())) {
            // Nothing can be examined (EPERM under seccomp): every remaining page is counted failed.
            rep.query_errno = err;
            record_failure(rep.failures, err, plan.pages - i);
            i = plan.pages;
            break;
        }
        // Which pages move; with a page budget, stop before the first mover beyond it.
        const std::size_t allowed = opts.page_budget == 0 ? count : opts.page_budget - attempted;
        std::size_t cut = count;
        move_addr.clear();
        move_node.clear();
        move_index.clear();
        fill_targets(plan, topo, i, count, target_os);
        for (std::size_t j = 0; j < count; ++j) {
            const unsigned os = target_os[j];
            if (status[j] >= 0 && static_cast<unsigned>(status[j]) != os) {
                if (move_addr.size() == allowed) {
                    cut = j;
                    break;
                }
                move_addr.push_back(addresses[j]);
                move_node.push_back(static_cast<int>(os));
                move_index.push_back(j);
            }
        }
        for (std::size_t j = 0; j < cut; ++j) {
            count_page(rep.before, status[j], topo);
            after_status[j] = status[j];
            if (status[j] < 0) ++rep.untouched;
        }
        attempted += move_addr.size();
        if (!move_addr.empty()) {
            move_status.assign(move_addr.size(), std::numeric_limits<int>::min()); // "not written"
            const long r = os_move_pages(move_addr.size(), move_addr.data(), move_node.data(), move_status.data());
            const int call_error = r < 0 ? static_cast<int>(-r) : 0;
            // Pages not reported on their target are asked again: a THP's tail pages report EBUSY while
            // the head moves; a positive return leaves statuses unwritten.
            std::vector<void*> again;
            std::vector<std::size_t> again_at;
            for (std::size_t m = 0; m < move_addr.size(); ++m)
                if (move_status[m] != move_node[m]) {
                    again.push_back(move_addr[m]);
                    again_at.push_back(m);
                }
            std::vector<int> now(again.size(), std::numeric_limits<int>::min());
            if (!again.empty() && os_query_pages(again.size(), again.data(), now.data()) != 0)
                std::fill(now.begin(), now.end(), std::numeric_limits<int>::min());
            for (std::size_t a = 0; a < again.size(); ++a) {
                const std::size_t m = again_at[a];
                if (now[a] == move_node[m] || now[a] < 0) {
                    move_status[m] = now[a]; // moved after all, or gone (not present)
                    continue;
                }
                int err = move_status[m] < 0 && move_status[m] != std::numeric_limits<int>::min() ? -move_status[m]
                          : call_error                                                             ? call_error
                                                                                                   : EBUSY;
                record_failure(rep.failures, err, 1);
                move_status[m] = now[a] == std::numeric_limits<int>::min() ? status[move_index[m]] : now[a];
            }
            for (std::size_t m = 0; m < move_addr.size(); ++m) {
                if (move_status[m] == move_node[m]) ++rep.moved;
                after_status[move_index[m]] = move_status[m];
            }
        }
        for (std::size_t j = 0; j < cut; ++j) {
            count_page(rep.after, after_status[j], topo);
            if (status[j] >= 0 && static_cast<unsigned>(status[j]) == target_os[j]) ++rep.in_place;
        }
        i += cut;
        progress.scanned = i - rep.first_page;
        progress.moved = rep.moved;
        progress.failed = rep.failed_pages();
        progress.position = i;
        const bool go_on = !opts.progress || opts.progress(progress); // after every batch, the last too
        if (!go_on || cut < count) break;                            // stopped, or page budget reached
        if (opts.page_budget != 0 && attempted >= opts.page_budget) break;
        if (opts.time_budget.count() > 0 && std::chrono::steady_clock::now() - start >= opts.time_budget) break;
    }
    rep.resume_at = i;
    rep.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);

    if (!rep.failures.empty() || rep.policy_errno != 0) {
        const int err = rep.query_errno ? rep.query_errno
                        : !rep.failures.empty() ? rep.failures.front().error : rep.policy_errno;
        const std::string what = "replace to " + plan.what + ": " + rep.summary();
        if (fb == fallback::strict)
            throw replace_error(-1, plan.end - plan.begin, err, what, std::make_shared<const replace_report>(rep));
        std::string why;
        for (const auto& f : rep.failures) why += " errno " + std::to_string(f.error) + ": " + std::to_string(f.pages) + ";";
        degradation_log::instance().record("replace to " + plan.what + ": " + std::to_string(rep.failed_pages()) +
                                           " pages could not move (" + why + " left where they were), policy " +
                                           (rep.policy_errno ? "refused (errno " + std::to_string(rep.policy_errno) + ")"
                                                             : std::string(rep.policy_kept ? "kept" : "not set")));
    }
    return rep;
}

inline void refuse_partitioned_overlap(const void* p, std::size_t bytes) {
    if (placed_buffers::instance().overlaps(p, bytes))
        throw_invalid("replace: the range overlaps a partitioned container's buffer; re-place the container "
                      "(replace(container, partition)) so that its loop follows its pages");
}

inline std::string nodes_text(const node_set& nodes) {
    std::string s;
    for (std::size_t k = 0; k < nodes.size(); ++k) s += (k ? "," : "") + std::to_string(nodes[k]);
    return s;
}

inline replace_report replace_node(const void* p, std::size_t bytes, const on_node& target, const replace_options& opts) {
    const topology& topo = topology::get();
    replace_plan plan = make_plan(p, bytes, topo);
    plan.mode = target.policy() == node_policy::bind ? mpol_bind : mpol_preferred;
    plan.what = "node " + std::to_string(target.node());
    if (plan.pages) plan.runs.emplace_back(0, target.node());
    return run_replace(plan, node_set{}, target.on_refusal(), opts);
}

inline replace_report replace_interleaved(const void* p, std::size_t bytes, const interleaved& target,
                                          const replace_options& opts) {
    const topology& topo = topology::get();
    replace_plan plan = make_plan(p, bytes, topo);
    plan.what = "interleave over nodes " + nodes_text(target.nodes());
    if (!target.weights().empty()) {
        // Weighted: runs of weights[k] pages from the range's first page; no per-range kernel policy
        // exists without one VMA per run, so the policy is left as it is.
        std::size_t period = 0;
        for (auto w : target.weights()) period += w;
        for (std::size_t i = 0; i < plan.pages; ++i) {
            std::size_t pos = i % period, k = 0;
            while (pos >= target.weights()[k]) pos -= target.weights()[k++];
            const int node = target.nodes()[k];
            if (plan.runs.empty() || plan.runs.back().second != node) plan.runs.emplace_back(i, node);
        }
        replace_options o = opts;
        o.keep_policy = false;
        return run_replace(plan, node_set{}, target.on_refusal(), o);
    }
    // The kernel's interleave of an anonymous private mapping: page at address a goes to the
    // ((a / page) % n)-th node of the mask in OS-index order.
    std::vector<std::pair<unsigned, int>> by_os;
    for (int id : target.nodes()) by_os.emplace_back(topo.at(id).os_index, id);
    std::sort(by_os.begin(), by_os.end());
    for (const auto& n : by_os) plan.interleave.push_back(n.second);
    plan.mode = mpol_interleave;
    return run_replace(plan, target.nodes(), target.on_refusal(), opts);
}

} // namespace detail

/// \effects moves the pages [p, p + bytes) overlaps to `target.node()` and (options.keep_policy) binds
/// the whole pages inside the range to it (or prefers it, per `target.policy()`). See the file comment.
/// \returns what moved. \throws replace_error (strict `target`) when a page could not move or the policy
/// was refused; invalid_placement when the range overlaps a partitioned container's buffer or wraps.
inline replace_report replace(const void* p, std::size_t bytes, const on_node& target, const replace_options& opts = {}) {
    detail::refuse_partitioned_overlap(p, bytes);
    return detail::replace_node(p, bytes, target, opts);
}

/// \effects moves the pages [p, p + bytes) overlaps round robin over `target.nodes()` as the kernel's
/// MPOL_INTERLEAVE would place them (page at address a on node (a / page) mod n, in OS-index order) and
/// sets that policy; weighted: runs of weights[k] pages from the range's first page, policy left as is.
/// \returns what moved. \throws as the `on_node` overload.
inline replace_report replace(const void* p, std::size_t bytes, const interleaved& target, const replace_options& opts = {}) {
    detail::refuse_partitioned_overlap(p, bytes);
    return detail::replace_interleaved(p, bytes, target, opts);
}

/// \effects moves the pages of the `part.element_count()` elements at `data` so that the page holding
/// element i's page start is on the node of i's block (every page of block k on node k when `data` is
/// aligned as numaplace allocations are), and (options.keep_policy) binds each block's whole pages to its
/// node, one mbind per block. \returns what moved. \throws replace_error (strict) when a page could not
/// move or the policy was refused; invalid_placement as the `on_node` overload.
template <class T>
replace_report replace(const T* data, const partition<T>& part, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    const partition<T> e = part.elements();
    const std::size_t bytes = e.size() * sizeof(T);
    detail::refuse_partitioned_overlap(data, bytes);
    detail::replace_plan plan = detail::make_plan(data, bytes, topology::get());
    plan.what = "partition over nodes " + detail::nodes_text(part.nodes());
    if (plan.pages) detail::plan_partition(plan, e.untyped(), sizeof(T));
    return detail::run_replace(plan, node_set{}, fb, opts);
}

/// \effects for a contiguous container (`data()`, `size()`) whose allocator is not partitioned:
/// `replace(c.data(), c.size() * sizeof(T), target, opts)`.
template <class Container, class Target,
          class = std::enable_if_t<std::is_same<Target, on_node>::value || std::is_same<Target, interleaved>::value>,
          class = decltype(std::declval<Container&>().data(), std::declval<Container&>().size())>
replace_report replace(Container& c, const Target& target, const replace_options& opts = {}) {
    static_assert(!detail::is_partitioned_container<Container>::value,
                  "a partitioned container is re-placed by a partition (its loop follows its partition)");
    return replace(static_cast<const void*>(c.data()), c.size() * sizeof(*c.data()), target, opts);
}

/// \effects re-places a contiguous container by `part`.
/// - Allocator partitioned (`partitioned_allocator<T>`, `partitioned_vector<T>`): moves all of c's
///   capacity by `part`'s layout (its nodes, weights, rows, edges; its size does not matter) split as the
///   allocator splits an allocation of that capacity, sets the policy per block, and records the layout
///   for c's buffer: `partition_of(c)`, `parallel_for(c, ...)`, `first_touch(c)` follow it from then on
///   (until c reallocates, which places the new buffer by the allocator again). Re-placing by the
///   allocator's own layout drops the record. An empty container: nothing to move, nothing recorded.
/// - Any other allocator: `replace(c.data(), part)`, which requires `part.element_count() == c.size()`.
/// \returns what moved. \throws invalid_placement for a partitioned buffer below one page (it lives in the
/// node heap of the allocator's home node), an empty partition (no node) for a partitioned container, or
/// a partition of another size for a plain container;
/// replace_error (strict) as above (the record is updated before: the policy and the moved pages follow
/// the new layout even when some pages could not move, and the report says which).
template <class Container, class T,
          class = decltype(std::declval<Container&>().data(), std::declval<Container&>().capacity())>
replace_report replace(Container& c, const partition<T>& part, fallback fb = fallback::strict,
                       const replace_options& opts = {}) {
    static_assert(std::is_same<typename Container::value_type, T>::value,
                  "replace: the partition's element type must be the container's");
    if constexpr (detail::is_partitioned_container<Container>::value) {
        const std::size_t bytes = c.capacity() * sizeof(T);
        if (part.nodes().empty())
            detail::throw_invalid("replace: an empty partition (no node) cannot place a container's pages");
        if (bytes == 0) return replace_report{};
        detail::placed_buffers::entry entry;
        if (!detail::placed_buffers::instance().find(c.data(), entry))
            detail::throw_invalid("replace: a partitioned container of " + std::to_string(bytes) +
                                  " bytes (below one page) lives in its home node's small-object heap and cannot be re-placed");
        const auto allocator = c.get_allocator();
        const bool own = part.untyped().same_layout(allocator.placement().partition());
        detail::placed_buffers::instance().relayout(c.data(), own ? allocator.placement().partition() : part.untyped(), !own);
        const basic_partition split = part.untyped().for_bytes(bytes);
        detail::replace_plan plan = detail::make_plan(c.data(), memory::page_round(bytes), topology::get());
        plan.what = "partition over nodes " + detail::nodes_text(part.nodes());
        // The allocator's rule: block edges from the split; the last non-empty block takes the tail page.
        detail::plan_partition(plan, split.elements(), sizeof(T));
        return detail::run_replace(plan, node_set{}, fb, opts);
    } else {
        if (part.element_count() != c.size())
            detail::throw_invalid("replace: a partition of " + std::to_string(part.element_count()) +
                                  " elements for a container of " + std::to_string(c.size()));
        return replace(static_cast<const T*>(c.data()), part, fb, opts);
    }
}

} // namespace numaplace

#endif
