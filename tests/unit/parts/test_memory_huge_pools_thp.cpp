// Explicit huge pages do not depend on the THP mode (issue 48): a request's whole explicit pages come from
// the pool and its tail stays on small pages (docs/huge-pages.md, "Sizes: never rounded up"), whatever
// /sys/kernel/mm/transparent_hugepage/enabled says. `replicated` rounded each copy up to whole huge pages
// when THP was on (a copy of 2 x 2 MiB + 800 bytes took 3 pool pages with THP always, 2 with never).
// The mode is the machine's: guests only; each mode in a fresh process of this test (the topology reads
// the mode once), the mode set back after.
#include <numaplace/huge_pages.hpp>
#include <numaplace/replicated.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <huge_pools.hpp>

#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
using numaplace_test::free_pages;
using numaplace_test::frees;
using numaplace_test::two_mib;

const char* const thp_enabled = "/sys/kernel/mm/transparent_hugepage/enabled";

// \returns the THP mode in brackets ("[madvise]"), or "" if unreadable.
std::string machine_thp() {
    std::ifstream f(thp_enabled);
    std::string line;
    std::getline(f, line);
    const auto a = line.find('['), b = line.find(']');
    return a == std::string::npos || b == std::string::npos ? std::string() : line.substr(a + 1, b - a - 1);
}
bool set_machine_thp(const std::string& mode) {
    {
        std::ofstream f(thp_enabled);
        f << mode << '\n';
        if (!f.flush()) return false;
    }
    return machine_thp() == mode;
}
} // namespace

TEST(huge_pages_thp, replicated_takes_whole_pool_pages_and_a_small_page_tail_in_every_thp_mode) {
    const char* expected = std::getenv("NUMAPLACE_TEST_THP_MODE");
    if (!expected) { // the parent: sets each mode, runs this test again in a fresh process
        if (!std::getenv("NUMAPLACE_GUEST_LAYOUT")) GTEST_SKIP() << "changes the machine's THP mode: guests only";
        const std::string before = machine_thp();
        ASSERT_FALSE(before.empty()) << "no " << thp_enabled;
        for (const char* mode : {"always", "madvise", "never"}) {
            ASSERT_TRUE(set_machine_thp(mode)) << mode;
            EXPECT_EQ(numaplace_test::rerun_current_test("NUMAPLACE_TEST_THP_CHILD", {{"NUMAPLACE_TEST_THP_MODE", mode}}), 0)
                << "THP " << mode;
        }
        EXPECT_TRUE(set_machine_thp(before));
        return;
    }
    ASSERT_EQ(topology::get().capabilities().thp, expected);
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(topology::get().size(), 2));
    const std::size_t bytes = 2 * two_mib + 800, n = bytes / sizeof(double); // 2 whole pages and a tail
    const std::vector<double> source(n, 2.5);
    const std::vector<long> before = frees();
    {
        // a pool of exactly the copy's whole pages: a copy rounded up to 3 pages would be refused
        const replicated<double> r(source.data(), n, topology::get().all(), fallback::strict, page_size::explicit_2m);
        for (const auto& c : r.copies()) {
            SCOPED_TRACE("the copy on node " + std::to_string(c.node));
            const page_size_histogram sizes = where_page_sizes(c.data, r.bytes_per_copy());
            EXPECT_EQ(sizes.bytes_on(two_mib), 2 * two_mib) << "KernelPageSize 2048 kB";
            EXPECT_EQ(sizes.bytes_on(detail::page_size()), r.bytes_per_copy() - 2 * two_mib) << "the tail on small pages";
            EXPECT_EQ(sizes.transparent_huge, 0u) << "no transparent huge page";
            EXPECT_EQ(free_pages(c.node), before[static_cast<std::size_t>(c.node)] - 2) << "2 pool pages a copy";
            EXPECT_EQ(where(c.data, r.bytes_per_copy()).on(c.node), r.bytes_per_copy() / detail::page_size());
            EXPECT_EQ(c.data[n - 1], 2.5);
        }
    }
    EXPECT_EQ(frees(), before);
}
