// register_placements with placements that cannot be made (issue 48, item 2): a placement whose pools
// cannot hold the array (`unavailable()` says why), one whose allocation throws, and one whose
// initialisation throws each skip their benchmark with the reason (state.SkipWithError); the process
// runs the rest and exits 0. ctest checks the JSON (tests/CMakeLists.txt, benchmark_skip).

#include <numaplace/benchmark.hpp>

#include <benchmark/benchmark.h>

#include <cerrno>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace {

// A strict placement the kernel always refuses: apply throws placement_error (EPERM), as a seccomp
// filter installed after start-up makes mbind do.
class refused {
public:
    int home_node() const noexcept { return 0; }
    numaplace::fallback on_refusal() const noexcept { return numaplace::fallback::strict; }
    std::size_t alignment(std::size_t) const noexcept { return numaplace::detail::page_size(); }
    bool apply(void*, std::size_t bytes) const {
        numaplace::detail::throw_placement(0, bytes, EPERM, "refused: mbind not permitted");
    }
    friend bool operator==(const refused&, const refused&) noexcept { return true; }
    friend bool operator!=(const refused&, const refused&) noexcept { return false; }
};
static_assert(std::is_trivially_copyable<refused>::value, "");

} // namespace

int main(int argc, char** argv) {
    using namespace numaplace;
    // more 2 MiB pages than all pools have free: the explicit placement cannot be made (rows of 8 KiB)
    std::size_t free_pages = 0;
    for (int node : topology::get().all())
        for (const huge_page_pool& pool : huge_page_pools(node))
            if (pool.page_bytes == (std::size_t(2) << 20) && pool.free > 0) free_pages += static_cast<std::size_t>(pool.free);
    const row_partition<double> rows = partition<double>::rows((free_pages + 2) * 256, 1024);
    std::vector<compared_placement> placements = {
        compared_placement::interleaved(), compared_placement::partitioned_explicit(page_size::explicit_2m),
        compared_placement::custom("refused", refused()), compared_placement::partitioned("init_throws"),
        compared_placement::node_local()};
    register_placements(
        "skip", rows, placements,
        [](placed_array<double>& a) {
            if (a.placement().name() == "init_throws") throw std::runtime_error("the initialisation failed");
            for (std::size_t i = 0; i < a.size(); ++i) a.data()[i] = 1.0;
        },
        [](::benchmark::State& state, placed_array<double>& a) {
            double sum = 0;
            for (auto _ : state) {
                for (std::size_t i = 0; i < a.size(); i += 512) sum += a.data()[i];
                ::benchmark::DoNotOptimize(sum);
            }
        });
    ::benchmark::Initialize(&argc, argv);
    ::benchmark::RunSpecifiedBenchmarks();
    ::benchmark::Shutdown();
    return 0;
}
