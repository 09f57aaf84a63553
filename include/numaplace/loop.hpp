#ifndef NUMAPLACE_LOOP_HPP_INCLUDED
#define NUMAPLACE_LOOP_HPP_INCLUDED

/// \file
/// What every NUMA-aware loop shares, whatever runs it (oneTBB: parallel_for.hpp; OpenMP: omp.hpp): the
/// `subrange` a body gets, the node a thread is running a block of, and calling a body on a range.

#include <cstddef>
#include <type_traits>

namespace numaplace {

/// The contiguous index range [begin, end) handed to a loop body, and the node it runs on.
class subrange {
public:
    /// \effects the range `[b, e)` on node `node`.
    subrange(std::size_t b, std::size_t e, int node) noexcept : begin_(b), end_(e), node_(node) {}
    /// \returns the first index.
    std::size_t begin() const noexcept { return begin_; }
    /// \returns one past the last index.
    std::size_t end() const noexcept { return end_; }
    /// \returns `end() - begin()`.
    std::size_t size() const noexcept { return end_ - begin_; }
    /// \returns whether the range is empty.
    bool empty() const noexcept { return begin_ == end_; }
    /// \returns the node whose block this is (and on whose cores it runs).
    int node() const noexcept { return node_; }

private:
    std::size_t begin_, end_;
    int node_;
};

namespace detail {

/// \returns the node whose block the calling thread is running (-1 outside any block).
inline int& current_block_node() noexcept {
    static thread_local int node = -1;
    return node;
}

/// Marks the calling thread as running a block of `node` for its lifetime.
struct scoped_block_node {
    int saved;
    explicit scoped_block_node(int node) noexcept : saved(current_block_node()) { current_block_node() = node; }
    ~scoped_block_node() { current_block_node() = saved; }
    scoped_block_node(const scoped_block_node&) = delete;
    scoped_block_node& operator=(const scoped_block_node&) = delete;
};

/// \effects `body(subrange(b, e, node))`, or `body(i)` for each i in [b, e).
template <class Body>
void call_body(Body& body, std::size_t b, std::size_t e, int node) {
    if constexpr (std::is_invocable<Body&, subrange>::value) {
        body(subrange(b, e, node));
    } else {
        static_assert(std::is_invocable<Body&, std::size_t>::value,
                      "parallel_for body must be callable with numaplace::subrange or std::size_t");
        for (std::size_t i = b; i < e; ++i) body(i);
    }
}

} // namespace detail
} // namespace numaplace

#endif
