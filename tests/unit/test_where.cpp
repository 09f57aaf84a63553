#include <numaplace/allocator.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <owned_pages.hpp>
#include <seccomp.hpp>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <vector>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace np = numaplace;
using namespace numaplace;

namespace {
constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();

std::size_t resident_pages(void* p, std::size_t bytes) {
    const std::size_t page = detail::page_size();
    std::vector<unsigned char> vec((bytes + page - 1) / page);
    EXPECT_EQ(mincore(p, bytes, vec.data()), 0);
    std::size_t r = 0;
    for (auto v : vec) r += v & 1;
    return r;
}
} // namespace

TEST(where, untouched_range_is_reported_untouched_and_stays_untouched) {
    const std::size_t bytes = 32u << 20;
    void* p = memory::map(bytes);
    auto h = where(p, bytes);
    EXPECT_EQ(h.pages, bytes / detail::page_size());
    EXPECT_EQ(h.untouched, h.pages);
    EXPECT_EQ(h.touched(), 0u);
    EXPECT_EQ(resident_pages(p, bytes), 0u) << "where faulted pages in";
    EXPECT_DOUBLE_EQ(h.locality(0), 1.0);
    memory::unmap(p, bytes);
}

TEST(where, counts_exactly_the_touched_pages) {
    const std::size_t page = detail::page_size();
    const std::size_t pages = 1000;
    void* p = memory::map(pages * page);
    memory::forbid_huge_pages(p, pages * page);
    auto* c = static_cast<char*>(p);
    for (std::size_t i = 0; i < pages; i += 3) c[i * page] = 1; // 334 pages
    auto h = where(p, pages * page);
    EXPECT_EQ(h.pages, pages);
    EXPECT_EQ(h.touched(), 334u);
    EXPECT_EQ(h.untouched, pages - 334u);
    std::size_t sum = h.elsewhere;
    for (auto k : h.per_node) sum += k;
    EXPECT_EQ(sum, 334u);
    memory::unmap(p, pages * page);
}

TEST(where, counts_every_page_an_unaligned_range_overlaps) {
    const std::size_t page = detail::page_size();
    void* p = memory::map(4 * page);
    auto* c = static_cast<char*>(p);
    EXPECT_EQ(where(c + page - 1, 2).pages, 2u); // straddles one boundary
    EXPECT_EQ(where(c + 10, page).pages, 2u);
    EXPECT_EQ(where(c, page).pages, 1u);
    EXPECT_EQ(where(c + 5, 1).pages, 1u);
    EXPECT_EQ(where(c, 0).pages, 0u);
    memory::unmap(p, 4 * page);
}

TEST(where, batches_large_ranges) {
    // more pages than one move_pages batch (4096)
    const std::size_t pages = 10000, page = detail::page_size();
    std::vector<char, node_allocator<char>> v(pages * page, 1, node_allocator<char>(0));
    auto h = where(v);
    EXPECT_EQ(h.pages, pages);
    EXPECT_EQ(h.on(0), pages);
}

TEST(where, locality_against_a_partition_is_exact_per_page) {
    const auto& topo = topology::get();
    const std::size_t n = (8u << 20) / sizeof(int);
    partition<int> part(n, topo.all(), std::vector<std::size_t>(topo.size(), 1), edge_alignment::page);
    // everything on node 0: exactly block 0's pages are local
    std::vector<int, node_allocator<int>> v(n, 1, node_allocator<int>(0));
    auto loc = where(v.data(), part);
    // exactly the pages node 0's block owns (a page belongs to the block holding its first byte) are on
    // their owner's node; shared ones among them hold a byte of the next block too
    const std::size_t owned = numaplace_test::where_owned(v.data(), part, 0).pages;
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.local + loc.shared, owned);
    EXPECT_LE(loc.shared, 1u);
    EXPECT_EQ(loc.local + loc.shared + loc.remote, loc.histogram.pages);
    EXPECT_DOUBLE_EQ(loc.fraction(), static_cast<double>(owned) / static_cast<double>(loc.histogram.pages));
}

TEST(where, locality_against_any_element_to_node_map) {
    // Expect every element on node 0, then on a node that does not exist: all local, then all remote.
    const std::size_t n = (4u << 20) / sizeof(double);
    std::vector<double, node_allocator<double>> v(n, 1.0, node_allocator<double>(0));
    auto on0 = locality(v.data(), n, [](std::size_t) { return 0; });
    EXPECT_EQ(on0.local, on0.histogram.pages);
    EXPECT_EQ(on0.remote, 0u);
    auto nowhere = locality(v.data(), n, [](std::size_t) { return -1; });
    EXPECT_EQ(nowhere.local, 0u);
    EXPECT_EQ(nowhere.remote, nowhere.histogram.pages);
    // the element index handed to the map is the one that owns each page
    std::size_t calls = 0, last = 0;
    bool increasing = true;
    (void)locality(v.data(), n, [&](std::size_t i) {
        increasing = increasing && (calls == 0 || i > last);
        last = i;
        ++calls;
        return 0;
    });
    EXPECT_TRUE(increasing);
    EXPECT_EQ(calls, on0.histogram.pages);
    EXPECT_EQ(last, (on0.histogram.pages - 1) * detail::page_size() / sizeof(double));
}

TEST(where, query_refused_throws_system_error_with_errno) {
    int code = numaplace_test::run_denied({SYS_move_pages}, [] {
        int x = 1;
        try {
            (void)where(&x, sizeof x);
            return 1;
        } catch (const std::system_error& e) {
            return e.code().value() == EPERM ? 0 : 2;
        }
    });
    EXPECT_EQ(code, 0);
}

// --- attacks -----------------------------------------------------------------------------------------

TEST(where_attack, ranges_at_the_edges) {
    const std::size_t page = np::detail::page_size();
    EXPECT_EQ(np::where(nullptr, 0).pages, 0u);
    std::vector<char> buf(3 * page);
    char* p = buf.data();
    EXPECT_EQ(np::where(p, 1).pages, 1u);
    const auto* aligned = reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page);
    EXPECT_EQ(np::where(aligned, page).pages, 1u);
    EXPECT_EQ(np::where(aligned, page + 1).pages, 2u);
    EXPECT_EQ(np::where(aligned + page - 1, 2).pages, 2u);
    // a range past the end of the address space: a typed error, not a wrapped-around loop
    EXPECT_THROW(np::where(aligned, max_size), std::invalid_argument);
    EXPECT_THROW(np::where(aligned, max_size - 5), std::invalid_argument);
    EXPECT_THROW(np::locality(reinterpret_cast<const double*>(aligned), max_size / 4, [](std::size_t) { return 0; }),
                 std::invalid_argument);
    // near the end of the address space, against the exact sum: refused exactly when the range,
    // rounded out to pages, reaches into the last page (its end rounded up would wrap); a start inside
    // the last page too (the bound used to underflow there and let the range through, counting nothing)
    const std::uintptr_t last = std::numeric_limits<std::uintptr_t>::max() - page + 1;
    for (std::uintptr_t begin : {last - 2 * page, last - page - 8, last - 1, last, last + 1, last + page / 2,
                                 std::numeric_limits<std::uintptr_t>::max()})
        for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(8), std::size_t(100), page - 1, page,
                                  page + 1, 2 * page, 1000 * page, max_size}) {
            std::uintptr_t end = 0; // the exact end: wraps if the sum overflows or passes the last page's start
            const bool wraps = bytes != 0 && (__builtin_add_overflow(begin, bytes, &end) || end > last);
            const auto* q = reinterpret_cast<const void*>(begin);
            if (wraps) {
                EXPECT_THROW(np::where(q, bytes), std::invalid_argument) << begin << " + " << bytes;
            } else {
                np::page_histogram h;
                EXPECT_NO_THROW(h = np::where(q, bytes)) << begin << " + " << bytes;
                EXPECT_EQ(h.pages, h.untouched) << begin << " + " << bytes; // nothing is mapped up there
                EXPECT_EQ(h.pages, bytes == 0 ? 0 : (begin + bytes + page - 1) / page - begin / page) << begin << " + " << bytes;
            }
        }
    // an unmapped range: pages counted untouched
    const np::page_histogram h = np::where(reinterpret_cast<void*>(page * 16), 2 * page);
    EXPECT_EQ(h.pages, 2u);
    EXPECT_EQ(h.untouched, 2u);
}

// --- Issue 47: pages follow exact compute edges. Placed by the allocator, then checked page by page
// with move_pages(2) itself against an owner computed here: the block holding the page's first byte.
namespace {
std::vector<int> raw_page_nodes(const void* p, std::size_t pages) {
    const std::size_t page = detail::page_size();
    std::vector<void*> addresses(pages);
    std::vector<int> status(pages, -1);
    for (std::size_t i = 0; i < pages; ++i) addresses[i] = static_cast<char*>(const_cast<void*>(p)) + i * page;
    EXPECT_EQ(syscall(SYS_move_pages, 0, pages, addresses.data(), nullptr, status.data(), 0), 0);
    return status;
}
} // namespace

TEST(where_shapes, odd_rows_pages_on_the_block_of_their_first_byte_page_by_page) {
    const auto& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "needs two nodes";
    if (!topo.capabilities().page_query) GTEST_SKIP() << "move_pages query refused";
    const std::size_t page = detail::page_size();
    struct shape { std::size_t m, len; };
    for (const shape s : {shape{100, 1001}, shape{40, 1001}, shape{333, 1025}, shape{17, 100003}, shape{7, 3}, shape{1000, 3000}}) {
        const auto rows = partition<double>::rows(s.m, s.len, topo.all(), std::vector<std::size_t>(topo.size(), 1),
                                                  edge_alignment::page);
        for (std::size_t k = 0; k < rows.block_count(); ++k) // compute edges exact: within one row of m / nodes
            EXPECT_LE(rows.block(k).size(), s.m / topo.size() + 1) << s.m << " x " << s.len;
        partitioned_vector<double> a(s.m * s.len, partitioned_allocator<double>(rows));
        std::fill(a.begin(), a.end(), 1.0); // one thread writes: the binding decides
        const std::size_t bytes = a.size() * sizeof(double), pages = (bytes + page - 1) / page;
        const std::vector<int> status = raw_page_nodes(a.data(), pages);
        std::size_t wrong = 0, straddling = 0;
        for (std::size_t i = 0; i < pages; ++i) {
            const std::size_t row = i * page / sizeof(double) / s.len;
            const block owner = rows.block_of(row);
            wrong += status[i] != static_cast<int>(topo.at(owner.node).os_index);
            const std::size_t last_row = (std::min(bytes, (i + 1) * page) - 1) / sizeof(double) / s.len;
            straddling += rows.block_of(last_row).node != owner.node;
        }
        EXPECT_EQ(wrong, 0u) << s.m << " x " << s.len;
        const partition_locality loc = where(a.data(), a.size(), rows);
        EXPECT_EQ(loc.remote, 0u) << s.m << " x " << s.len;
        EXPECT_EQ(loc.shared, straddling) << s.m << " x " << s.len;
        EXPECT_EQ(loc.local + loc.shared, pages);
        EXPECT_LE(loc.shared, topo.size() - 1); // at most one page per edge
    }
}

TEST(where_shapes, a_csr_matrix_split_by_nonzeros_places_col_and_val_with_their_rows) {
    const auto& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "needs two nodes";
    if (!topo.capabilities().page_query) GTEST_SKIP() << "move_pages query refused";
    const std::size_t m = 5003;
    std::vector<long> row_ptr(m + 1, 0);
    for (std::size_t i = 0; i < m; ++i) row_ptr[i + 1] = row_ptr[i] + (i % 61 == 0 ? 3000 : 1 + long(i % 5));
    const auto rows = partition<double>::by_work(m, row_ptr.data(), topo.all(), std::vector<std::size_t>(topo.size(), 1));
    const auto val_part = rows.mapped<double>(row_ptr.data());
    partitioned_vector<double> val(val_part.size(), partitioned_allocator<double>(val_part));
    std::fill(val.begin(), val.end(), 2.0);
    const std::size_t page = detail::page_size(), pages = (val.size() * sizeof(double) + page - 1) / page;
    const std::vector<int> status = raw_page_nodes(val.data(), pages);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < pages; ++i) { // the owner: the row whose non-zeros hold the page's first byte
        const auto nz = static_cast<long>(i * page / sizeof(double));
        const auto row = static_cast<std::size_t>(std::upper_bound(row_ptr.begin(), row_ptr.end(), nz) - row_ptr.begin() - 1);
        wrong += status[i] != static_cast<int>(topo.at(rows.block_of(row).node).os_index);
    }
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(where(val.data(), val.size(), val_part).remote, 0u);
}

TEST(where_shapes, a_range_of_another_length_than_its_partition_is_refused) {
    const auto rows = partition<double>::rows(100, 1001);
    std::vector<double> y(100, 0.0);
    EXPECT_THROW((void)where(y.data(), y.size(), rows), invalid_placement);
    EXPECT_THROW((void)where(y.data(), 99, rows.per_row()), invalid_placement);
    EXPECT_NO_THROW((void)where(y.data(), y.size(), rows.per_row()));
    // the natural mistake, a DGEMV's y made with the matrix's partition: refused at construction
    EXPECT_THROW((partitioned_vector<double>(100, partitioned_allocator<double>(rows))), invalid_placement);
    EXPECT_THROW((partitioned_vector<double>(1000, partitioned_allocator<double>(partition<double>::rows(1000, 1000)))),
                 invalid_placement);
    partitioned_vector<double> a(100 * 1001, partitioned_allocator<double>(rows));
    EXPECT_EQ(a.size(), 100u * 1001u);
    partitioned_vector<double> yy(100, partitioned_allocator<double>(rows.per_row()));
    EXPECT_EQ(partition_of(yy).block(0), rows.block(0));
}
