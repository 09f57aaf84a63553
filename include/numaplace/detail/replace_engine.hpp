#ifndef NUMAPLACE_DETAIL_REPLACE_ENGINE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_REPLACE_ENGINE_HPP_INCLUDED

// The engine under `replace` (replace.hpp): carries out a plan (detail/replace_plan.hpp). It sets the
// policy (through memory::bind), splits huge pages where the target changes, then queries, moves,
// re-queries and counts pages in batches, skipping holes, within the budgets, and ends with the
// strict-or-degrade decision. Why it works this way, and the measurements behind it: docs/replace.md.

#include "../memory.hpp"
#include "../place.hpp"
#include "../replace_report.hpp"
#include "../topology.hpp"
#include "../where.hpp"
#include "linux.hpp"
#include "moved_ranges.hpp"
#include "replace_huge.hpp"
#include "replace_plan.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// Pages per batch: one query and one move call each.
constexpr std::size_t replace_batch = 4096;
/// With a page budget B, one call queries at most this many times B pages.
constexpr std::size_t replace_scan_per_budget_page = 64;

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

/// Where the holes of the address space end: the starts of this process's mappings, read from
/// /proc/self/maps when the first hole is met (once per call).
class mapping_starts {
public:
    /// \returns the first address above `a` (unmapped) where a mapping starts, within [a + page, limit];
    /// a + page when /proc cannot be read.
    std::uintptr_t next_after(std::uintptr_t a, std::uintptr_t limit, std::size_t page) {
        if (!read_) read();
        std::uintptr_t next = a + page;
        if (ok_) {
            const auto it = std::upper_bound(starts_.begin(), starts_.end(), a);
            next = it == starts_.end() ? limit : std::max(*it, a + page);
        }
        return std::min(next, limit);
    }

private:
    void read() {
        read_ = true;
        std::FILE* f = std::fopen("/proc/self/maps", "r");
        if (!f) return;
        char line[256];
        bool at_start = true; // a line longer than the buffer arrives in pieces: parse only line starts
        unsigned long lo = 0, hi = 0;
        while (std::fgets(line, sizeof line, f)) {
            if (at_start && std::sscanf(line, "%lx-%lx", &lo, &hi) == 2) starts_.push_back(lo);
            const std::size_t n = std::char_traits<char>::length(line);
            at_start = n > 0 && line[n - 1] == '\n';
        }
        std::fclose(f);
        std::sort(starts_.begin(), starts_.end());
        ok_ = true;
    }

    bool read_ = false, ok_ = false;
    std::vector<std::uintptr_t> starts_;
};

/// \returns how many of the `count` pages from `a` are mapped before the first hole: `count` when none
/// is missing or mincore cannot tell. (A page query says -EFAULT for a hole and, on Linux 6.1, for an
/// untouched anonymous page alike; mincore fills its vector up to the first hole.)
inline std::size_t mapped_prefix(std::uintptr_t a, std::size_t count, std::size_t page, std::vector<unsigned char>& vec) {
    constexpr unsigned char unwritten = 0xfe; // mincore writes 0 or 1
    std::fill_n(vec.begin(), count, unwritten);
    if (os_resident(reinterpret_cast<const void*>(a), count * page, vec.data()) != ENOMEM) return count;
    return static_cast<std::size_t>(std::find(vec.begin(), vec.begin() + static_cast<std::ptrdiff_t>(count), unwritten) -
                                    vec.begin());
}

/// \effects sets the policy (memory::bind) on the whole pages inside the range: one call per run, one
/// for an interleave. \returns 0 or the first errno.
inline int set_policy(const replace_plan& plan) {
    const std::uintptr_t lo = plan.whole_begin(), hi = plan.whole_end();
    if (hi <= lo) return 0;
    auto bind = [&](std::uintptr_t b, std::uintptr_t e, const node_set& nodes) {
        b = std::max(b, lo);
        e = std::min(e, hi);
        return e <= b ? 0 : memory::bind(reinterpret_cast<void*>(b), e - b, plan.mode, nodes, *plan.topo);
    };
    if (!plan.interleave.empty()) return bind(lo, hi, plan.interleave_nodes);
    for (std::size_t r = 0; r < plan.runs.size(); ++r) {
        const std::uintptr_t e = r + 1 < plan.runs.size() ? plan.address(plan.runs[r + 1].first) : plan.last();
        if (int err = bind(plan.address(plan.runs[r].first), e, node_set{plan.runs[r].second})) return err;
    }
    return 0;
}

/// \effects replaces the pages of `plan` from `opts.resume_at` (see replace.hpp). \returns the report.
/// \throws replace_error when strict and a page could not move or the policy was refused.
inline replace_report run_replace(const replace_plan& plan, fallback fb, const replace_options& opts) {
    const auto start = std::chrono::steady_clock::now();
    const topology& topo = *plan.topo;
    const std::size_t page = plan.page_size();
    replace_report rep;
    rep.page_size = page;
    rep.pages = plan.pages;
    rep.first_page = rep.resume_at = std::min(opts.resume_at, plan.pages);
    rep.before = empty_histogram(topo);
    rep.after = empty_histogram(topo);
    if (plan.pages == 0 || rep.first_page == plan.pages) return rep;

    // Freed, memory whose pages move here is not reused as it is (heap runs, cached mappings): a
    // partitioned buffer has its own record (plan.owned).
    if (!plan.owned) note_replaced(plan.first, plan.last(), plan.policy && opts.keep_policy.value_or(false));
    const bool set = plan.policy && opts.keep_policy.value_or(plan.owned);
    huge_page_splitter splitter(plan);
    splitter.prepare(set); // before the policy splits VMAs (and huge pages) at the block edges
    if (set) {
        rep.policy_errno = set_policy(plan);
        rep.policy_kept = rep.policy_errno == 0 && plan.whole_end() > plan.whole_begin();
    }

    const std::size_t batch = std::min(replace_batch, plan.pages - rep.first_page);
    std::vector<void*> addresses(batch), move_addr;
    std::vector<int> status(batch), after_status(batch), move_node, move_status;
    std::vector<std::size_t> move_index;
    std::vector<unsigned> target_os(batch);
    std::vector<unsigned char> resident(batch);
    move_addr.reserve(batch);
    move_node.reserve(batch);
    move_status.reserve(batch);
    move_index.reserve(batch);
    mapping_starts mappings;

    const std::size_t budget = opts.page_budget;
    const std::size_t scan_limit = budget == 0 || budget > SIZE_MAX / replace_scan_per_budget_page
                                       ? SIZE_MAX : budget * replace_scan_per_budget_page;
    const std::size_t huge = huge_page_size();
    std::size_t i = rep.first_page;
    std::size_t attempted = 0; // pages handed to move_pages: what the page budget counts
    std::size_t queried = 0;   // pages queried: what the scan limit counts
    replace_progress progress;
    progress.pages = plan.pages;
    auto go_on = [&] { // after every batch, the last too
        progress.scanned = i - rep.first_page;
        progress.moved = rep.moved;
        progress.failed = rep.failed_pages();
        progress.position = i;
        if (opts.progress && !opts.progress(progress)) return false;
        return opts.time_budget.count() <= 0 || std::chrono::steady_clock::now() - start < opts.time_budget;
    };
    while (i < plan.pages) {
        std::size_t count = std::min({replace_batch, plan.pages - i, scan_limit - queried});
        if (i + count < plan.pages) {
            // End batches on a huge-page boundary: a THP moves whole, and one straddling two batches would
            // already be moved when the second batch is examined.
            const std::uintptr_t e = plan.address(i + count) / huge * huge;
            if (e > plan.address(i)) count = (e - plan.first) / page - i;
        }
        for (std::size_t j = 0; j < count; ++j) addresses[j] = reinterpret_cast<void*>(plan.address(i + j));
        if (int err = os_query_pages(count, addresses.data(), status.data())) {
            // Nothing can be examined (EPERM under seccomp): every remaining page is counted failed.
            rep.query_errno = err;
            record_failure(rep.failures, err, plan.pages - i);
            i = plan.pages;
            break;
        }
        if (std::find(status.begin(), status.begin() + static_cast<std::ptrdiff_t>(count), -EFAULT) !=
            status.begin() + static_cast<std::ptrdiff_t>(count)) {
            const std::size_t mapped = mapped_prefix(plan.address(i), count, page, resident);
            if (mapped == 0) { // a hole: not a page to move, counted failed (EFAULT) up to the next mapping
                const std::size_t n = (mappings.next_after(plan.address(i), plan.last(), page) - plan.first) / page - i;
                for (page_histogram* h : {&rep.before, &rep.after}) {
                    h->pages += n;
                    h->untouched += n;
                }
                record_failure(rep.failures, EFAULT, n);
                i += n;
                if (!go_on()) break;
                continue;
            }
            count = mapped;
        }
        queried += count;
        rep.huge_pages_split += splitter.split(i, i + count);
        // Which pages move; with a page budget, stop before the first mover beyond it.
        const std::size_t allowed = budget == 0 ? count : budget - attempted;
        std::size_t cut = count;
        move_addr.clear();
        move_node.clear();
        move_index.clear();
        fill_targets(plan, i, count, target_os);
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
        if (!go_on() || cut < count) break; // stopped, or the page budget reached within the batch
        if (budget != 0 && (attempted >= budget || queried >= scan_limit)) break;
    }
    rep.resume_at = i;
    rep.huge_pages_split_exact = splitter.exact();
    rep.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);

    if (!rep.failures.empty() || rep.policy_errno != 0) {
        const int err = rep.query_errno ? rep.query_errno
                        : !rep.failures.empty() ? rep.failures.front().error : rep.policy_errno;
        const std::string what = "replace to " + plan.what;
        if (fb == fallback::strict)
            throw replace_error(plan.target_node(), plan.end - plan.begin, err, what + ": " + rep.summary(),
                                std::make_shared<const replace_report>(rep));
        std::string why;
        for (const auto& f : rep.failures) why += " errno " + std::to_string(f.error) + ": " + std::to_string(f.pages) + ";";
        refused(err, plan.target_node(), plan.end - plan.begin, fb, what,
                std::to_string(rep.failed_pages()) + " pages could not move (" + why + " left where they were), policy " +
                    (rep.policy_errno ? "refused (errno " + std::to_string(rep.policy_errno) + ")"
                                      : std::string(rep.policy_kept ? "kept" : "not set")));
    }
    return rep;
}

} // namespace detail
} // namespace numaplace

#endif
