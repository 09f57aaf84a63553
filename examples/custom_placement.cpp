// A placement written by a user, used through numaplace::allocator<T, Placement> (see the Placement
// concept in placement.hpp): the first half of an allocation's pages bound to one node, the rest to
// another. Exits 1 unless where() finds every page where the placement put it.
#include <numaplace/allocator.hpp>
#include <numaplace/where.hpp>

#include "sandbox.hpp"

#include <cstdio>
#include <type_traits>
#include <vector>

namespace {

class split_halves {
public:
    /// \throws numaplace::unknown_node for a node that does not exist.
    split_halves(int first, int second, numaplace::fallback fb = numaplace::fallback::degrade)
        : first_(first), second_(second), fallback_(fb) {
        numaplace::topology::get().check(first);
        numaplace::topology::get().check(second);
    }
    int first() const noexcept { return first_; }
    int second() const noexcept { return second_; }

    // --- the Placement concept ---
    /// Allocations below a page come from this node's small-object heap.
    int home_node() const noexcept { return first_; }
    numaplace::fallback on_refusal() const noexcept { return fallback_; }
    /// Page-aligned starts are enough: the split falls on a page boundary.
    std::size_t alignment(std::size_t) const noexcept { return numaplace::detail::page_size(); }
    /// Sets the policy of the fresh, untouched range; touches nothing. false when degraded (recorded by
    /// place_pages); throws when strict and refused (the allocator then unmaps the range).
    bool apply(void* p, std::size_t bytes) const {
        const std::size_t page = numaplace::detail::page_size();
        const std::size_t pages = (bytes + page - 1) / page, half = pages / 2;
        auto* base = static_cast<char*>(p);
        using numaplace::memory::policy_mode;
        const bool a = numaplace::place_pages(base, half * page, policy_mode::bind, numaplace::node_set{first_}, fallback_);
        const bool b = numaplace::place_pages(base + half * page, (pages - half) * page, policy_mode::bind,
                                              numaplace::node_set{second_}, fallback_);
        return a && b;
    }
    friend bool operator==(const split_halves& x, const split_halves& y) noexcept {
        return x.first_ == y.first_ && x.second_ == y.second_ && x.fallback_ == y.fallback_;
    }
    friend bool operator!=(const split_halves& x, const split_halves& y) noexcept { return !(x == y); }

private:
    int first_, second_;
    numaplace::fallback fallback_;
};
// Trivially copyable: copies never throw, moved-from equals the source (what the concept asks).
static_assert(std::is_trivially_copyable<split_halves>::value, "");

} // namespace

namespace {
int run() {
    const auto& topo = numaplace::topology::get();
    const int last = static_cast<int>(topo.size()) - 1;
    using alloc = numaplace::allocator<double, split_halves>;
    const std::size_t n = (8u << 20) / sizeof(double); // 8 MiB: 2048 pages of 4 KiB
    std::vector<double, numaplace::default_init_allocator<alloc>> v(n, alloc(split_halves(0, last)));
    for (std::size_t i = 0; i < n; ++i) v[i] = 1.0; // one thread: the binding decides, not the toucher
    const std::size_t half = n / 2;
    const auto low = numaplace::where(v.data(), half * sizeof(double));
    const auto high = numaplace::where(v.data() + half, (n - half) * sizeof(double));
    std::printf("first half: %zu of %zu pages on node 0; second half: %zu of %zu pages on node %d\n", low.on(0),
                low.pages, high.on(last), high.pages, last);
    const bool binding = topo.capabilities().memory_binding;
    const bool ok = !binding || (low.on(0) == low.pages && high.on(last) == high.pages);
    std::printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
} // namespace

int main() {
    try {
        return run();
    } catch (const std::exception& e) {
        return numaplace_examples::report("custom_placement", e);
    }
}
