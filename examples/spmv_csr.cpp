// A CSR sparse matrix-vector product y = A x with strongly uneven rows, split by work: the rows are
// partitioned by their non-zeros (`partition<double>::by_work` over row_ptr), and the non-zero arrays
// `col` and `val` by the same cut (`mapped`: block k of val is exactly the non-zeros of block k's rows).
// Every array is placed by its partition, the loop runs by rows, and `where` proves the pages.
//
//   spmv_csr [rows] [--expect-locality]    (default 20011 rows)
//
// --expect-locality: exit 1 unless every page of y, x, row_ptr, col and val is on its owner's node (no
// remote page), each node's block holds its share of the non-zeros to within one row's, y is right,
// and every row ran on its block's node (the multi-node guests assert it).

#include <numaplace/allocator.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>

#include <sched.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
int current_node() {
    const int cpu = sched_getcpu();
    return cpu < 0 ? -1 : topology::get().node_of_cpu(static_cast<unsigned>(cpu));
}
// non-zeros of row i: every 101st row dense (2000), the others 1 to 13
std::size_t row_nonzeros(std::size_t i) { return i % 101 == 0 ? 2000 : 1 + i % 13; }

template <class T>
bool report(const char* name, const T* data, const partition<T>& part) {
    const partition_locality loc = where(data, part);
    std::cout << "  " << name << ": " << loc.local << " local, " << loc.shared << " shared, " << loc.remote
              << " remote, " << loc.histogram.untouched << " untouched pages\n";
    return loc.remote == 0 && loc.histogram.untouched == 0;
}
} // namespace

int main(int argc, char** argv) {
    std::size_t m = 20011;
    bool expect = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--expect-locality") == 0) expect = true;
        else if ((m = std::strtoull(argv[i], nullptr, 10)) == 0) {
            std::cerr << "usage: spmv_csr [rows > 0] [--expect-locality]\n";
            return 2;
        }
    }
    // the structure first (a real code reads it from a file): row_ptr as prefix sums of the work
    std::vector<long> structure(m + 1, 0);
    for (std::size_t i = 0; i < m; ++i) structure[i + 1] = structure[i] + static_cast<long>(row_nonzeros(i));
    const std::size_t nnz = static_cast<std::size_t>(structure[m]);

    // rows split by non-zeros; col and val split where their rows are; y and x one entry per row
    const partition<double> rows = partition<double>::by_work(m, structure.data());
    const partition<int> col_part = rows.mapped<int>(structure.data());
    const partition<double> val_part = rows.mapped<double>(structure.data());
    partitioned_vector<double> y(m, partitioned_allocator<double>(rows));
    partitioned_vector<double> x(m, partitioned_allocator<double>(rows));
    partitioned_vector<long> row_ptr(m + 1, partitioned_allocator<long>(rows.as<long>()));
    partitioned_vector<int> col(nnz, partitioned_allocator<int>(col_part));
    partitioned_vector<double> val(nnz, partitioned_allocator<double>(val_part));

    // fill in parallel by rows: block k writes its rows' entries of every array
    parallel_for(rows, [&](subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            x[i] = 1.0 + static_cast<double>(i % 7);
            y[i] = 0.0;
            row_ptr[i] = structure[i];
            for (long j = structure[i]; j < structure[i + 1]; ++j) {
                const auto k = static_cast<std::size_t>(j - structure[i]);
                col[static_cast<std::size_t>(j)] = static_cast<int>((i + k * 7919) % m);
                val[static_cast<std::size_t>(j)] = 1.0 / static_cast<double>(1 + k);
            }
        }
    });
    row_ptr[m] = structure[m];

    std::atomic<std::size_t> off_node{0};
    parallel_for(rows, [&](subrange r) {
        const int node = current_node();
        if (node >= 0 && node != r.node()) off_node.fetch_add(r.size(), std::memory_order_relaxed);
        for (std::size_t i = r.begin(); i < r.end(); ++i) {
            double sum = 0.0;
            for (long j = row_ptr[i]; j < row_ptr[i + 1]; ++j)
                sum += val[static_cast<std::size_t>(j)] * x[static_cast<std::size_t>(col[static_cast<std::size_t>(j)])];
            y[i] = sum;
        }
    });

    // y against a serial product over the same structure
    double worst = 0.0;
    for (std::size_t i = 0; i < m; ++i) {
        double sum = 0.0;
        for (long j = structure[i]; j < structure[i + 1]; ++j) {
            const auto k = static_cast<std::size_t>(j - structure[i]);
            sum += 1.0 / static_cast<double>(1 + k) * (1.0 + static_cast<double>(((i + k * 7919) % m) % 7));
        }
        worst = std::max(worst, std::fabs(y[i] - sum));
    }
    std::cout << m << " rows, " << nnz << " non-zeros; per node (rows, non-zeros):";
    bool balanced = true;
    // each node's share by its cores (by_work's own weights() are its blocks' sizes: the cuts it chose)
    double cores = 0;
    for (int node : rows.nodes()) cores += static_cast<double>(topology::get().at(node).cores);
    for (std::size_t k = 0; k < rows.block_count(); ++k) {
        const block b = rows.block(k), v = val_part.block(k);
        std::cout << " node" << b.node << " (" << b.size() << ", " << v.size() << ")";
        const double share = static_cast<double>(nnz) * static_cast<double>(topology::get().at(b.node).cores) / cores;
        balanced = balanced && v.begin == static_cast<std::size_t>(structure[b.begin]) &&
                   v.end == static_cast<std::size_t>(structure[b.end]) &&
                   std::fabs(static_cast<double>(v.size()) - share) <= static_cast<double>(row_nonzeros(0));
    }
    std::cout << "\nmax |y - serial y| = " << worst << ", rows off their node: " << off_node.load() << "\n";
    if (!topology::get().capabilities().page_query) {
        std::cout << "pages: unknown (the kernel refuses page queries)\n";
        return expect ? 1 : 0;
    }
    bool ok = report("y", y.data(), rows);
    ok = report("x", x.data(), rows) && ok;
    ok = report("row_ptr", row_ptr.data(), partition_of(row_ptr)) && ok;
    ok = report("col", col.data(), col_part) && ok;
    ok = report("val", val.data(), val_part) && ok;
    ok = ok && balanced && worst < 1e-9 && off_node.load() == 0;
    if (expect && !ok) {
        std::cout << "FAILED: a page off its owner's node, untouched, a split off its rows, a wrong y, or a row off its node\n";
        return 1;
    }
    return 0;
}
