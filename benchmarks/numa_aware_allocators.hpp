// The NUMA-aware allocators a NUMA user would pick instead of numaplace's heap (issue 33), as allocator
// families of benchmarks/workloads.cpp, every one bound to node 0 as numaplace's node_allocator<T>(0) is:
//   memkind     memkind 1.14's MEMKIND_HBW kind with MEMKIND_HBW_NODES=0 (its only exact bind to one node;
//               main() sets the variable before memkind's first use unless the caller set it)
//   tbb_pool    oneTBB's tbb::memory_pool (libtbbmalloc's pools) over chunks mmapped and bound to node 0:
//               what the heap would be if it were built on the dependency the project already has
//   libnuma     libnuma's numa_alloc_onnode(n, 0) / numa_free: a mapping per block
// `bound_to_node0(p)` says whether the kernel's policy of the page at `p` is MPOL_BIND to {0}: the harness
// checks a block of each family that stays live through the whole run, so a family that silently fell
// back to the default policy cannot be counted (the "checked with get_mempolicy after every run").
// Each family is present only where its library was found (NUMAPLACE_WL_HAVE_MEMKIND, ..._TBB_POOL, ..._LIBNUMA).
#ifndef NUMAPLACE_BENCHMARKS_NUMA_AWARE_ALLOCATORS_HPP
#define NUMAPLACE_BENCHMARKS_NUMA_AWARE_ALLOCATORS_HPP

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if NUMAPLACE_WL_HAVE_MEMKIND
#include <memkind.h>
#endif
#if NUMAPLACE_WL_HAVE_TBB_POOL
#define TBB_PREVIEW_MEMORY_POOL 1
#include <oneapi/tbb/memory_pool.h>
#endif
#if NUMAPLACE_WL_HAVE_LIBNUMA
#include <numa.h>
#endif

namespace numa_aware {

constexpr int mpol_bind = 2;        // MPOL_BIND (linux/mempolicy.h)
constexpr unsigned long mpol_f_addr = 2; // MPOL_F_ADDR

/// \returns "" when the page at `p` is bound to node 0 alone (MPOL_BIND, mask {0}); else what it is.
inline std::string bound_to_node0(const void* p) {
    int mode = -1;
    unsigned long mask[16] = {};
    if (::syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, p, mpol_f_addr) != 0) return "get_mempolicy failed";
    bool only0 = mask[0] == 1;
    for (int i = 1; i < 16; ++i) only0 = only0 && mask[i] == 0;
    if (mode == mpol_bind && only0) return "";
    return "policy " + std::to_string(mode) + ", mask word 0 = " + std::to_string(mask[0]);
}

/// An STL allocator over a pair of functions (a C allocator's malloc and free, given the size).
template <class T, class Backend>
struct fn_allocator {
    using value_type = T;
    fn_allocator() = default;
    template <class U>
    fn_allocator(const fn_allocator<U, Backend>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > std::size_t(-1) / sizeof(T)) throw std::bad_alloc();
        void* p = Backend::allocate(n * sizeof(T));
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t n) noexcept { Backend::deallocate(p, n * sizeof(T)); }
    template <class U>
    bool operator==(const fn_allocator<U, Backend>&) const noexcept { return true; }
    template <class U>
    bool operator!=(const fn_allocator<U, Backend>&) const noexcept { return false; }
};

template <class Backend>
struct fn_family {
    template <class T>
    using alloc = fn_allocator<T, Backend>;
    template <class T>
    static alloc<T> make() { return alloc<T>(); }
    static constexpr bool is_numaplace = false;
    static constexpr bool bound_node0 = true;
};

#if NUMAPLACE_WL_HAVE_MEMKIND
struct memkind_backend {
    static void* allocate(std::size_t n) noexcept { return memkind_malloc(MEMKIND_HBW, n); }
    static void deallocate(void* p, std::size_t) noexcept { memkind_free(MEMKIND_HBW, p); }
};
using memkind_family = fn_family<memkind_backend>;
#endif

#if NUMAPLACE_WL_HAVE_LIBNUMA
struct libnuma_backend {
    static void* allocate(std::size_t n) noexcept { return numa_alloc_onnode(n, 0); }
    static void deallocate(void* p, std::size_t n) noexcept { numa_free(p, n); }
};
using libnuma_family = fn_family<libnuma_backend>;
#endif

#if NUMAPLACE_WL_HAVE_TBB_POOL
/// The pool's source of chunks: anonymous mappings bound to node 0 before their first touch.
struct node0_chunks {
    using value_type = char;
    node0_chunks() = default;
    template <class U>
    node0_chunks(const U&) noexcept {}
    char* allocate(std::size_t n) {
        void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        const unsigned long node0 = 1;
        if (::syscall(SYS_mbind, p, n, mpol_bind, &node0, 2UL, 0U) != 0) {
            ::munmap(p, n);
            throw std::bad_alloc();
        }
        return static_cast<char*>(p);
    }
    void deallocate(char* p, std::size_t n) noexcept { ::munmap(p, n); }
};
/// One pool for the process, made on first use and never destroyed (blocks may be freed at exit).
inline tbb::memory_pool<node0_chunks>& node0_pool() {
    static auto* pool = new tbb::memory_pool<node0_chunks>();
    return *pool;
}
struct tbb_pool_backend {
    static void* allocate(std::size_t n) { return node0_pool().malloc(n); }
    static void deallocate(void* p, std::size_t) noexcept { node0_pool().free(p); }
};
using tbb_pool_family = fn_family<tbb_pool_backend>;
#endif

} // namespace numa_aware

#endif
