#ifndef NUMAPLACE_DETAIL_PROCESS_CHECKS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_PROCESS_CHECKS_HPP_INCLUDED

/// \file
/// What this process can still do or holds, found out without a system call of its own: threads started
/// (pthreads) and /proc/self/smaps read (stdio). The system calls are detail/linux.hpp's.

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <pthread.h>
#include <sched.h>

namespace numaplace {
namespace detail {

/// \effects starts `count` threads with stacks of `stack_bytes` (0: the default) that each allocate a
/// little and wait until all have started, then ends them. \returns 0, or the errno of the first thread
/// that could not start (EAGAIN: the address-space or process limit).
inline int os_threads_can_start(std::size_t count, std::size_t stack_bytes) noexcept {
    struct shared {
        std::atomic<bool> go{false};
    } state;
    const auto body = [](void* arg) -> void* {
        auto* st = static_cast<shared*>(arg);
        std::free(std::malloc(64)); // its malloc arena too, as a worker's first allocation
        while (!st->go.load(std::memory_order_acquire)) ::sched_yield();
        return nullptr;
    };
    pthread_attr_t attr;
    if (::pthread_attr_init(&attr) != 0) return ENOMEM;
    if (stack_bytes != 0) ::pthread_attr_setstacksize(&attr, stack_bytes);
    std::vector<pthread_t> started;
    int err = 0;
    try {
        started.reserve(count);
    } catch (...) {
        err = ENOMEM;
    }
    for (std::size_t k = 0; k < count && err == 0; ++k) {
        pthread_t t;
        err = ::pthread_create(&t, &attr, body, &state);
        if (err == 0) started.push_back(t);
    }
    state.go.store(true, std::memory_order_release);
    for (pthread_t t : started) ::pthread_join(t, nullptr);
    ::pthread_attr_destroy(&attr);
    return err;
}

/// \effects appends the [start, end) of every mapping of this process holding transparent huge pages
/// (AnonHugePages of /proc/self/smaps not 0). \returns false when smaps cannot be read.
inline bool os_huge_page_mappings(std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& out) {
    std::FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[256];
    bool at_start = true;
    unsigned long lo = 0, hi = 0;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long a = 0, b = 0, kb = 0; // sscanf may store a field before it fails
        if (at_start && std::sscanf(line, "AnonHugePages: %lu", &kb) == 1) {
            if (kb != 0) out.emplace_back(lo, hi);
        } else if (at_start && std::sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            lo = a;
            hi = b;
        }
        at_start = std::strchr(line, '\n') != nullptr;
    }
    std::fclose(f);
    return true;
}

} // namespace detail
} // namespace numaplace

#endif
