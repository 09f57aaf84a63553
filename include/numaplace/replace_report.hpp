#ifndef NUMAPLACE_REPLACE_REPORT_HPP_INCLUDED
#define NUMAPLACE_REPLACE_REPORT_HPP_INCLUDED

/// \file
/// The values `replace` (replace.hpp) takes and gives: its options, its progress, its report, and the
/// error a strict `replace` throws with the report. A header of its own so that the engine under
/// `replace` (detail/replace_engine.hpp) and the public overloads above it share them.

#include "error.hpp"
#include "where.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
    /// At most this many pages handed to the kernel to move per call (0: no limit). It bounds the
    /// examination too: at most `replace_scan_per_budget_page` (64) times as many mapped pages are
    /// queried per call, so a long sparse range is crossed in steps (holes cost nothing).
    std::size_t page_budget = 0;
    /// Stop after the batch during which this much time has passed (0: no limit).
    std::chrono::nanoseconds time_budget{0};
    /// The page (index in the range's pages) to start at: a previous report's `resume_at`.
    std::size_t resume_at = 0;
    /// Set the target's policy on the range's whole pages (pages faulted later go to the target too).
    /// Unset (the default): set only on memory numaplace owns, whose mapping goes with its object (a
    /// partitioned container's buffer), never on other memory (a `std::vector`, malloc, the caller's
    /// own mapping): a policy outlives the object, and a later allocation reusing the address would be
    /// placed by it. `true` on such memory: the caller drops it before the memory is reused
    /// (`memory::unbind`), or unmaps it.
    std::optional<bool> keep_policy;
    /// Called after every batch; returning false stops the call (as a budget does).
    std::function<bool(const replace_progress&)> progress;
};

/// Pages that could not move, for one errno.
struct replace_failure {
    int error = 0;         ///< EPERM, EACCES, EBUSY, ENOMEM; EFAULT: not mapped
    /// how many pages failed with this errno.
    std::size_t pages = 0;
};

/// What a `replace` call did, over the pages it examined: [first_page, resume_at) of the range's pages.
struct replace_report {
    /// the page size the counts are in.
    std::size_t page_size = 0;
    std::size_t pages = 0;       ///< pages the range overlaps
    std::size_t first_page = 0;  ///< where this call started (options.resume_at)
    std::size_t resume_at = 0;   ///< where the next call continues; == pages when the range is done
    page_histogram before;       ///< the examined pages before (pages not mapped count as untouched)
    page_histogram after;        ///< the examined pages after
    std::size_t moved = 0;       ///< pages moved to their target
    std::size_t in_place = 0;    ///< present pages already on their target
    std::size_t untouched = 0;   ///< mapped pages not faulted in (or the zero page): placed on touch
    std::vector<replace_failure> failures; ///< pages that could not move, per errno (ascending)
    bool policy_kept = false;    ///< the target's policy is set on the whole pages of the range (false: none)
    int policy_errno = 0;        ///< why not (0 when kept, not asked, or no kernel policy expresses the target)
    int query_errno = 0;         ///< the page query was refused (nothing examined; every page counted failed)
    /// Transparent huge pages (mapped huge) that held an edge where the target changes (a block edge,
    /// every huge-page window of an interleave, the range's own start and end) and were split there.
    /// Exact from Linux 6.7 (PAGEMAP_SCAN); before, an upper bound (`huge_pages_split_exact` false):
    /// windows wholly resident in a mapping that held huge pages. 0 where no huge page can be (THP
    /// `never`, a mapping without huge pages, pages not resident). Not counted again: a huge page an
    /// earlier, budget-stopped call's policy or advice already split.
    std::size_t huge_pages_split = 0;
    bool huge_pages_split_exact = true; ///< false: `huge_pages_split` is an upper bound (see there)
    /// the call's wall time.
    std::chrono::nanoseconds elapsed{0};

    /// \returns the pages that could not move (pages not mapped included, as EFAULT).
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
    /// \returns the pages of the range that are not mapped (counted failed, EFAULT).
    std::size_t not_mapped() const noexcept { return failed(EFAULT); }
    /// \returns whether every page of the range has been examined (no budget left pages behind).
    bool done() const noexcept { return resume_at >= pages; }
    /// \returns whether the range is done, every page mapped and moved or in place, and no policy
    /// refused (`policy_errno` 0). A policy that is not set is no failure: not asked for, or a target no
    /// kernel policy expresses (a weighted interleave, even with `keep_policy`: `policy_kept` false).
    bool complete() const noexcept { return done() && failures.empty() && policy_errno == 0; }
    /// \returns one line: pages moved, in place, untouched, failed per errno, policy.
    std::string summary() const {
        std::ostringstream os;
        os << "replace: " << pages << " pages, examined " << (resume_at - first_page) << " (from " << first_page
           << "): moved " << moved << ", in place " << in_place << ", untouched " << untouched << ", failed "
           << failed_pages();
        for (const auto& f : failures)
            os << " [" << (f.error == EFAULT ? "not mapped" : std::strerror(f.error)) << " (errno " << f.error
               << "): " << f.pages << ']';
        os << "; policy "
           << (policy_kept ? "kept" : policy_errno ? "REFUSED (errno " + std::to_string(policy_errno) + ")" : "not set");
        if (huge_pages_split)
            os << "; " << (huge_pages_split_exact ? "" : "at most ") << huge_pages_split
               << " huge pages straddling edges split";
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
    /// \effects a `placement_error` carrying `report`.
    replace_error(int node, std::size_t bytes, int error_number, const std::string& what,
                  std::shared_ptr<const replace_report> report)
        : placement_error(node, bytes, error_number, what), report_(std::move(report)) {}
    /// \effects copies; never throws (the report is shared).
    replace_error(const replace_error&) noexcept = default;
    /// \effects copies; never throws. \returns `*this`.
    replace_error& operator=(const replace_error&) noexcept = default;
    /// \returns what the call did (pages per node before and after, failures per errno).
    const replace_report& report() const noexcept { return *report_; }

private:
    std::shared_ptr<const replace_report> report_;
};
static_assert(std::is_nothrow_copy_constructible<replace_error>::value, "exceptions must copy without throwing");

} // namespace numaplace

#endif
