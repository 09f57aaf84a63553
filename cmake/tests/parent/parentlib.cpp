#include "parentlib.hpp"

#include <numaplace/numaplace.hpp>

std::size_t parent_fill_and_check(std::size_t n) {
    numaplace::partition<double> part(n);
    numaplace::partitioned_vector<double> v(n, numaplace::partitioned_allocator<double>(part));
    numaplace::parallel_for(v, [&](numaplace::subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] = static_cast<double>(i);
    });
    const auto local = numaplace::where(v.data(), part);
    return local.fraction() == 1.0 ? local.histogram.pages : 0;
}
