#ifndef NUMAPLACE_DETAIL_HEAP_CONTROL_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_CONTROL_IMPL_HPP_INCLUDED

/// \file
/// The definitions of allocator.hpp's controls of the heaps: release_cached_memory, heap_sharding,
/// background_release. Included by allocator.hpp in header-only mode, compiled into libnumaplace in the
/// separately compiled mode (detail/config.hpp).

#include "../allocator.hpp"
#include "background_release.hpp"
#include "config.hpp"
#include "heap/registry.hpp"
#include "heap/thread_cache.hpp"
#include "placed_cache.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace numaplace {

NUMAPLACE_DECL void release_cached_memory() noexcept {
    detail::thread_cache::flush_every_thread();
    detail::heap_registry::release_free();
    if (detail::placed_cache* cache = detail::placed_cache::cell().peek()) cache->release_all();
}

NUMAPLACE_DECL heap_sharding_report heap_sharding() {
    const detail::heap_registry& r = detail::heap_registry::instance();
    heap_sharding_report out;
    out.limit = r.shards();
    out.chosen = !r.forced();
    out.thread_caches = detail::thread_cache::counted_caches();
    out.cpus = r.cpus();
    out.shards = r.shards_for(out.thread_caches);
    if (!out.chosen)
        out.reason = "NUMAPLACE_HEAP_SHARDS=" + std::to_string(out.limit);
    else if (out.shards == 1)
        out.reason = std::to_string(out.thread_caches) + " thread caches on " + std::to_string(out.cpus) +
                     " CPUs: one shard (caches do not outnumber the CPUs)";
    else
        out.reason = std::to_string(out.thread_caches) + " thread caches on " + std::to_string(out.cpus) +
                     " CPUs: a shard more for each cache beyond the CPUs, up to " + std::to_string(out.limit) +
                     " (oversubscribed)";
    return out;
}

NUMAPLACE_DECL void background_release(std::chrono::milliseconds period) {
    const std::int64_t ms = period.count(); // a signed type of at least 45 bits
    detail::set_background_release(ms);
}

} // namespace numaplace

#endif
