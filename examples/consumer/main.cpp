// Uses the installed package: a partitioned vector filled by a node-local loop, checked with where().
#include <numaplace/numaplace.hpp>

#include <cstdio>

int main() {
    const std::size_t n = std::size_t(1) << 22;
    numaplace::partition<double> part(n);
    numaplace::partitioned_vector<double> v(n, numaplace::partitioned_allocator<double>(part));
    numaplace::parallel_for(v, [&](numaplace::subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] = double(i);
    });
    const auto local = numaplace::where(v.data(), part);
    std::printf("consumer: %zu pages, %.0f%% local to their block's node\n", local.histogram.pages,
                100.0 * local.fraction());
    return local.fraction() == 1.0 && local.histogram.untouched == 0 ? 0 : 1;
}
