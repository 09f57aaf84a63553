#ifndef NUMAPLACE_DETAIL_REPLACE_HUGE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_REPLACE_HUGE_HPP_INCLUDED

// Huge pages under `replace` (replace.hpp): which edge windows hold a transparent huge page, and the
// splits at the edges where the target changes. Used by detail/replace_engine.hpp; why and the
// measurements behind it: docs/replace.md, "Huge pages".

#include "linux.hpp"
#include "process_checks.hpp"
#include "replace_plan.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// Whether the huge-page window holding an address holds a transparent huge page mapped huge (PMD).
/// Exact from Linux 6.7 (PAGEMAP_SCAN, one ioctl per window). Before: an upper bound, never true where
/// no huge page can be: the window wholly resident (mincore) inside one mapping that holds huge pages
/// (AnonHugePages of /proc/self/smaps, read once, only when a window passes mincore).
class huge_page_probe {
public:
    explicit huge_page_probe(std::size_t huge) : huge_(huge) {}
    ~huge_page_probe() {
        if (fd_ >= 0) os_close(fd_);
    }
    huge_page_probe(const huge_page_probe&) = delete;
    huge_page_probe& operator=(const huge_page_probe&) = delete;

    /// \returns false once an answer was an upper bound (kernel before 6.7), true before any answer.
    bool exact() const noexcept { return fd_ != -1; }
    /// \returns whether the window holding `a` holds a huge page (see the class).
    bool holds(std::uintptr_t a) {
        const std::uintptr_t w = a / huge_ * huge_;
        for (const auto& k : known_)
            if (k.first == w) return k.second;
        if (fd_ == -2) fd_ = os_open_pagemap_scan();
        if (fd_ >= 0) {
            const int n = os_pagemap_scan_huge(fd_, w, w + huge_);
            if (n >= 0) return n > 0;
            os_close(fd_); // refused after all: the upper bound from here on
            fd_ = -1;
        }
        vec_.resize(huge_ / page_size());
        if (os_resident(reinterpret_cast<const void*>(w), huge_, vec_.data()) != 0) return false; // a hole
        if (std::any_of(vec_.begin(), vec_.end(), [](unsigned char c) { return (c & 1) == 0; })) return false;
        if (!smaps_read_) {
            smaps_read_ = true;
            if (!os_huge_page_mappings(huge_vmas_)) huge_vmas_.assign(1, {0, ~std::uintptr_t(0)}); // cannot tell: any may
        }
        return std::any_of(huge_vmas_.begin(), huge_vmas_.end(),
                           [&](const std::pair<std::uintptr_t, std::uintptr_t>& v) { return v.first <= w && w + huge_ <= v.second; });
    }
    /// \effects answers for the window holding `a` now, kept for later (before a VMA split splits it).
    void remember(std::uintptr_t a) {
        const std::uintptr_t w = a / huge_ * huge_;
        const bool h = holds(w);
        if (std::none_of(known_.begin(), known_.end(), [&](const std::pair<std::uintptr_t, bool>& k) { return k.first == w; }))
            known_.emplace_back(w, h);
    }

private:
    std::size_t huge_;
    int fd_ = -2; // -2: not opened yet; -1: no PAGEMAP_SCAN
    bool smaps_read_ = false;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> huge_vmas_;
    std::vector<std::pair<std::uintptr_t, bool>> known_;
    std::vector<unsigned char> vec_;
};

/// Splits the transparent huge pages in which the target changes, batch by batch, before their pages
/// move: at a block edge, at every page of an interleave, and at the range's own start and end (inside
/// versus outside). A THP moves whole, so one left straddling an edge would drag the other side along.
class huge_page_splitter {
public:
    explicit huge_page_splitter(const replace_plan& plan)
        : plan_(plan), on_(plan.topo->capabilities().thp != "never"), huge_(huge_page_size()), probe_(huge_) {}

    /// \effects notes which windows at the range's ends (and, when the policy is set, at its block edges)
    /// hold a huge page, before the no-huge-page advice or a policy splits the VMA there (which splits a
    /// huge page across the new VMA boundary before `split` sees it). Call before the policy is set.
    void prepare(bool policy) {
        if (!on_ || plan_.pages == 0) return;
        if (plan_.first % huge_ != 0) probe_.remember(plan_.first);
        if (plan_.last() % huge_ != 0) probe_.remember(plan_.last() - plan_.page_size());
        if (policy && plan_.interleave.empty())
            for (const auto& r : plan_.runs)
                if (r.first != 0 && plan_.address(r.first) % huge_ != 0) probe_.remember(plan_.address(r.first));
    }
    /// \returns whether the counts of `split` so far are exact (see huge_page_probe).
    bool exact() const noexcept { return probe_.exact(); }

    /// \effects splits every THP that holds an edge and overlaps the pages [from, to) (a THP moves whole
    /// with any of its pages). \returns the splits made where a huge page held the edge.
    std::size_t split(std::size_t from, std::size_t to) {
        if (!on_ || from >= to) return 0;
        const std::size_t page = plan_.page_size();
        const std::uintptr_t r_lo = plan_.address(from) / huge_, r_hi = (plan_.address(to) - 1) / huge_;
        auto overlaps = [&](std::uintptr_t a) { return a / huge_ >= r_lo && a / huge_ <= r_hi; };
        std::size_t made = 0;
        if (plan_.first % huge_ != 0 && overlaps(plan_.first)) made += at(plan_.first); // the range's start
        if (plan_.interleave.size() > 1) { // the target changes at every page: every region
            for (std::uintptr_t r = r_lo; r <= r_hi; ++r) made += at(std::max(r * huge_, plan_.first));
        } else if (plan_.interleave.empty()) {
            const std::size_t p_lo = r_lo * huge_ <= plan_.first ? 0 : (r_lo * huge_ - plan_.first) / page;
            auto run = std::lower_bound(plan_.runs.begin(), plan_.runs.end(), p_lo,
                                        [](const std::pair<std::size_t, int>& r, std::size_t p) { return r.first < p; });
            for (; run != plan_.runs.end() && overlaps(plan_.address(run->first)); ++run)
                if (run->first != 0 && plan_.address(run->first) % huge_ != 0) made += at(plan_.address(run->first));
        }
        if (plan_.last() % huge_ != 0 && overlaps(plan_.last() - page)) made += at(plan_.last() - page); // the range's end
        return made;
    }

private:
    // One small page at the edge, inside the range: the kernel splits a THP that MADV_COLD covers only
    // partly (mapped once); small pages are only aged on the LRU. Counted when a huge page held it.
    std::size_t at(std::uintptr_t a) {
        if (a / huge_ == last_region_) return 0;
        last_region_ = a / huge_;
        const bool held = probe_.holds(a); // before the advice below splits the VMA at the range's ends
        if (!advised_) {
            // No THP forms again across an edge (faults, khugepaged): on the range's whole pages only,
            // partial pages belong to other data too.
            if (plan_.whole_end() > plan_.whole_begin())
                os_advise(reinterpret_cast<void*>(plan_.whole_begin()), plan_.whole_end() - plan_.whole_begin(),
                          page_advice::no_huge_pages);
            advised_ = true;
        }
        return os_advise(reinterpret_cast<void*>(a), plan_.page_size(), page_advice::cold) == 0 && held ? 1 : 0;
    }

    const replace_plan& plan_;
    bool on_;
    std::size_t huge_;
    huge_page_probe probe_;
    bool advised_ = false;
    std::uintptr_t last_region_ = ~std::uintptr_t(0);
};

} // namespace detail
} // namespace numaplace

#endif
