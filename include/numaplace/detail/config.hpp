#ifndef NUMAPLACE_DETAIL_CONFIG_HPP_INCLUDED
#define NUMAPLACE_DETAIL_CONFIG_HPP_INCLUDED

/// \file
/// Compiler spellings used across numaplace, defined once: the build mode (header-only or separately
/// compiled), branch hints, inlining, cold paths, the ThreadSanitizer hand-over annotations. No other
/// header defines a macro of its own (the include guards aside; libnumaplace's source and its CMake
/// define the build-mode macros named below). Includes nothing of numaplace.

// The build mode (docs/compile-cost.md). Header-only, the default: every function is defined in the
// headers, `inline`. With NUMAPLACE_SEPARATE_COMPILATION (CMake target numaplace::compiled defines it),
// the heavy non-template functions are only declared in the headers and defined once, in libnumaplace
// (src/numaplace.cpp, which also defines NUMAPLACE_BUILDING_LIBRARY). Every translation unit of a
// program must use the same mode.
//   NUMAPLACE_DECL          on such a function's declaration and definition: `inline` header-only,
//                           nothing (an ordinary external function) separately compiled
//   NUMAPLACE_DEFINITIONS   1 where those definitions are compiled: header-only, or libnumaplace's source
// A function that must stay out of line (NUMAPLACE_NOINLINE) is declared without either macro and defined
// with both: GCC refuses `noinline` on an inline declaration that is not its definition.
//   NUMAPLACE_EARLY_INIT    on the fork-hook registrations (detail/fork.hpp): in libnumaplace they run
//                           before the program's own static initialisers (a program may fork during its
//                           static initialisation); header-only, in each including TU, before what
//                           follows the include, as any initialiser.
#if defined(NUMAPLACE_SEPARATE_COMPILATION) && defined(NUMAPLACE_BUILDING_LIBRARY)
#define NUMAPLACE_EARLY_INIT __attribute__((init_priority(101)))
#else
#define NUMAPLACE_EARLY_INIT
#endif
#if !defined(NUMAPLACE_SEPARATE_COMPILATION)
#define NUMAPLACE_DECL inline
#define NUMAPLACE_DEFINITIONS 1
#elif defined(NUMAPLACE_BUILDING_LIBRARY)
#define NUMAPLACE_DECL
#define NUMAPLACE_DEFINITIONS 1
#else
#define NUMAPLACE_DECL
#define NUMAPLACE_DEFINITIONS 0
#endif

// Branch hints for the allocation fast paths.
#define NUMAPLACE_LIKELY(x) __builtin_expect(!!(x), 1)
#define NUMAPLACE_UNLIKELY(x) __builtin_expect(!!(x), 0)

// Inlining: the allocators inline only their fast path (a slot, this thread's list); slow paths and
// throwing helpers stay out of line so they do not bloat every caller.
#define NUMAPLACE_ALWAYS_INLINE [[gnu::always_inline]] inline
#define NUMAPLACE_NOINLINE [[gnu::noinline]]
#define NUMAPLACE_COLD [[gnu::noinline, gnu::cold]]

// ThreadSanitizer. oneTBB hands a task to another thread inside libtbb.so, which is not instrumented,
// so TSan cannot see that what the spawning thread wrote happens before the task runs (nor that the
// task's writes happen before wait() returns). NUMAPLACE_HANDOVER_RELEASE/ACQUIRE state exactly that
// guarantee of oneTBB at numaplace's spawn and join points, so TSan still checks every access of
// numaplace and of loop bodies. Without TSan they compile to nothing.
#if defined(__SANITIZE_THREAD__)
#define NUMAPLACE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NUMAPLACE_TSAN 1
#endif
#endif

#ifdef NUMAPLACE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace numaplace {
namespace detail {
// One address for every hand-over: a task acquires before it reads anything, its own closure included.
inline char handover_token;
} // namespace detail
} // namespace numaplace
#define NUMAPLACE_HANDOVER_RELEASE() __tsan_release(static_cast<void*>(&::numaplace::detail::handover_token))
#define NUMAPLACE_HANDOVER_ACQUIRE() __tsan_acquire(static_cast<void*>(&::numaplace::detail::handover_token))
#else
#define NUMAPLACE_HANDOVER_RELEASE() ((void)0)
#define NUMAPLACE_HANDOVER_ACQUIRE() ((void)0)
#endif

#ifdef __cplusplus
namespace numaplace {
namespace detail {
/// 128-bit unsigned arithmetic (weights' prefix sums, products of user-supplied counts): no overflow
/// below 2^128, where size_t sums and products could wrap.
__extension__ typedef unsigned __int128 wide_uint;
} // namespace detail
} // namespace numaplace
#endif

// Sanitizer builds under which a fork while another thread is inside the runtime's allocator can hang
// the child (GCC 12's ASan/TSan have no fork handlers of their own); tests read it to fork carefully.
#if defined(NUMAPLACE_TSAN) || defined(__SANITIZE_ADDRESS__)
#define NUMAPLACE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NUMAPLACE_SANITIZED 1
#endif
#endif

#endif
