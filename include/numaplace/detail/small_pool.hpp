#ifndef NUMAPLACE_DETAIL_SMALL_POOL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_SMALL_POOL_HPP_INCLUDED

// Per-node small-object heaps with per-thread caches: allocations below a page come from node-bound
// 256 KiB chunks carved into size classes. Why not std::pmr::synchronized_pool_resource (our first
// choice): in libstdc++ every allocate/deallocate takes a shared lock, and std::list push/pop through it
// ran at 0.28x std::allocator here (benchmarks/allocation.cpp), short of the 0.8x goal. A thread cache
// per node and size class makes the common path a few instructions; a mutex-protected central free
// list per node moves blocks between threads in batches.

#include "../memory.hpp"
#include "../topology.hpp"
#include "linux.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace numaplace {
namespace detail {

// Size classes: 16-byte steps up to 512, 64-byte steps up to 4096 (the page). 88 classes.
constexpr std::size_t small_step_fine = 16, small_fine_limit = 512, small_step_coarse = 64, small_limit = 4096;
constexpr std::size_t small_class_count = small_fine_limit / small_step_fine + (small_limit - small_fine_limit) / small_step_coarse;

constexpr std::size_t small_class_of(std::size_t bytes) noexcept {
    return bytes <= small_fine_limit ? (bytes + small_step_fine - 1) / small_step_fine - 1
                                     : small_fine_limit / small_step_fine +
                                           (bytes - small_fine_limit + small_step_coarse - 1) / small_step_coarse - 1;
}
constexpr std::size_t small_class_size(std::size_t c) noexcept {
    return c < small_fine_limit / small_step_fine ? (c + 1) * small_step_fine
                                                  : small_fine_limit + (c + 1 - small_fine_limit / small_step_fine) * small_step_coarse;
}
/// \returns the block size serving `bytes` at `alignment` (a power of two, at most a page): blocks of a
/// class are carved at multiples of the class size from page-aligned chunks, so a class size that is a
/// multiple of the alignment gives aligned blocks.
constexpr std::size_t small_request_size(std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t a = alignment < small_step_fine ? small_step_fine : alignment;
    return (bytes == 0 ? a : (bytes + a - 1) / a * a);
}

/// \returns the process's one `T(node)` for `node`, created for every node on first use and never
/// destroyed (containers with static storage may release memory into it during static destruction).
/// \throws unknown_node.
template <class T>
T& per_node(int node) {
    static std::vector<T*>* all = [] {
        auto* v = new std::vector<T*>;
        for (std::size_t i = 0; i < topology::get().size(); ++i) v->push_back(new T(static_cast<int>(i)));
        return v;
    }();
    topology::get().check(node);
    return *(*all)[static_cast<std::size_t>(node)];
}

struct free_block {
    free_block* next;
};

/// A singly linked list of free blocks of one class, with its tail and length, so whole lists move
/// between a thread cache and the central heap in O(1).
struct block_list {
    free_block* head = nullptr;
    free_block* tail = nullptr;
    std::size_t count = 0;
};

/// The central heap of one node: per class, a stack of lists given back by threads, and a bump region
/// in the current chunk for new blocks.
class node_heap {
public:
    explicit node_heap(int node) : node_(node) {}

    /// \returns a list of at least one block of class `c` (a whole list given back earlier, or `want`
    /// new blocks carved from the chunk).
    block_list take(std::size_t c, std::size_t want) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto& stack = lists_[c];
        if (!stack.empty()) {
            block_list l = stack.back();
            stack.pop_back();
            return l;
        }
        block_list l;
        const std::size_t size = small_class_size(c);
        for (std::size_t i = 0; i < want; ++i) {
            // Each chunk starts page-aligned, and block k of a class run starts at a multiple of its size.
            std::size_t offset = round_up(bump_used_, size);
            if (!chunk_ || offset + size > chunk_bytes) {
                chunk_ = static_cast<char*>(numaplace::memory::map(chunk_bytes));
                // Degrading on purpose: strictness is checked by the caller before it reaches the heap.
                numaplace::memory::bind(chunk_, chunk_bytes, numaplace::memory::policy_mode::bind, node_set{node_},
                                        fallback::degrade);
                offset = 0;
            }
            auto* b = reinterpret_cast<free_block*>(chunk_ + offset);
            bump_used_ = offset + size;
            b->next = l.head;
            if (!l.head) l.tail = b;
            l.head = b;
            ++l.count;
        }
        return l;
    }
    /// \effects takes back a non-empty list of class `c`.
    void give(std::size_t c, const block_list& l) {
        std::lock_guard<std::mutex> lock(mutex_);
        lists_[c].push_back(l);
    }

    static node_heap& of(int node) { return per_node<node_heap>(node); }

private:
    static constexpr std::size_t chunk_bytes = 256 * 1024;
    int node_;
    std::mutex mutex_;
    std::array<std::vector<block_list>, small_class_count> lists_;
    char* chunk_ = nullptr;
    std::size_t bump_used_ = 0;
};

/// One thread's cached blocks per node and class.
class thread_cache {
public:
    ~thread_cache() {
        for (std::size_t n = 0; n < lists_.size(); ++n)
            for (std::size_t c = 0; c < small_class_count; ++c) flush(static_cast<int>(n), c);
        current() = nullptr;
        state() = dead;
    }
    void* allocate(int node, std::size_t c) {
        block_list& l = at(node, c);
        if (__builtin_expect(l.head == nullptr, 0)) l = node_heap::of(node).take(c, batch(c));
        free_block* b = l.head;
        l.head = b->next;
        --l.count;
        return b;
    }
    void deallocate(int node, std::size_t c, void* p) noexcept {
        block_list& l = at(node, c);
        auto* b = static_cast<free_block*>(p);
        b->next = l.head;
        if (!l.head) l.tail = b;
        l.head = b;
        if (__builtin_expect(++l.count > 2 * batch(c), 0)) flush(node, c);
    }

    enum { none = 0, alive = 1, dead = 2 };
    // Trivially destructible thread-locals (no init guard, readable after the cache is gone).
    static int& state() noexcept {
        static thread_local int s = none;
        return s;
    }
    static thread_cache*& current() noexcept {
        static thread_local thread_cache* c = nullptr;
        return c;
    }
    /// \returns this thread's cache, or nullptr once it was destroyed (thread or process exit).
    static thread_cache* get() {
        if (thread_cache* c = current()) return c;
        if (state() == dead) return nullptr;
        static thread_local thread_cache cache;
        state() = alive;
        current() = &cache;
        return &cache;
    }

private:
    thread_cache() : lists_(topology::get().size()) {}

    // Blocks carved at a time: about 16 KiB, 4 to 128 blocks (a table: no division on the hot path).
    static std::size_t batch(std::size_t c) noexcept {
        static constexpr auto table = [] {
            std::array<std::uint8_t, small_class_count> t{};
            for (std::size_t i = 0; i < small_class_count; ++i) {
                std::size_t b = 16384 / small_class_size(i);
                t[i] = static_cast<std::uint8_t>(b < 4 ? 4 : b > 128 ? 128 : b);
            }
            return t;
        }();
        return table[c];
    }
    block_list& at(int node, std::size_t c) noexcept { return lists_[static_cast<std::size_t>(node)][c]; }
    // Gives the whole list back (O(1)): the cache holds at most 2 batches per class.
    void flush(int node, std::size_t c) noexcept {
        block_list& l = at(node, c);
        if (l.count == 0) return;
        node_heap::of(node).give(c, l);
        l = block_list{};
    }
    std::vector<std::array<block_list, small_class_count>> lists_;
};

/// \returns a block of at least `bytes` (< a page) aligned to `alignment`, from node's heap.
inline void* small_allocate(int node, std::size_t bytes, std::size_t alignment) {
    const std::size_t c = small_class_of(small_request_size(bytes, alignment));
    if (thread_cache* tc = thread_cache::get()) return tc->allocate(node, c);
    // This thread's cache is gone (thread exit / static destruction): go to the central heap.
    block_list l = node_heap::of(node).take(c, 1);
    free_block* b = l.head;
    l.head = b->next;
    if (--l.count != 0) node_heap::of(node).give(c, l);
    return b;
}
inline void small_deallocate(int node, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t c = small_class_of(small_request_size(bytes, alignment));
    if (thread_cache* tc = thread_cache::get()) return tc->deallocate(node, c, p);
    auto* b = static_cast<free_block*>(p);
    b->next = nullptr;
    node_heap::of(node).give(c, block_list{b, b, 1});
}

} // namespace detail
} // namespace numaplace

#endif
