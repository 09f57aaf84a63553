#ifndef NUMAPLACE_PLACE_HPP_INCLUDED
#define NUMAPLACE_PLACE_HPP_INCLUDED

/// \file
/// The one decision between throwing and degrading. Every feature that binds memory (the placements
/// and their allocators, the heap, pmr resources, `replace`, `replicated`, `shared_segment`,
/// `bind_with_balancing`) binds through `detail::place`: admit (capacity, admission.hpp), bind
/// (memory.hpp), then a refusal throws when strict or is recorded when degrading. Below the placement
/// values (placement.hpp) so that the heap can use it without sitting below the layer it serves.

#include "admission.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "topology.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

namespace numaplace {
namespace detail {

/// How a range to place came to be.
enum class range_origin {
    fresh,  ///< numaplace's own untouched mapping: its admission is a reservation until unmapped
    pooled, ///< a heap's span or region, kept mapped for reuse: admitted, not reserved
    foreign, ///< memory numaplace does not own (a user's range, a shared file): admitted, not reserved
    unadmitted ///< a heap's region of large runs: bound whole, admitted by its user run by run (pooled)
};

/// \effects admits `bytes` for `mode` over `nodes`, a reservation until unmapped for numaplace's own
/// fresh mapping at `p`. \throws placement_error (ENOMEM, for every fallback: a fallback cannot make
/// memory that does not exist).
inline void admit_or_throw(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes,
                           const char* who, range_origin origin = range_origin::fresh) {
    if (memory::admit(bytes, mode, nodes, origin == range_origin::fresh ? p : nullptr) != 0)
        throw_placement(error_node(nodes), bytes, ENOMEM,
                        who + describe(mode, nodes) + ": more than the free memory of the nodes");
}

/// \effects the strict-or-degrade decision for a refusal `err` of `what` (bytes, node -1 for several):
/// throws when `fb` is strict, else records `what refused (reason): fell_back`.
/// \returns false (degraded). \throws placement_error when strict.
inline bool refused(int err, int node, std::size_t bytes, fallback fb, const std::string& what,
                    const std::string& fell_back = "left to first touch") {
    if (fb == fallback::strict) throw_placement(node, bytes, err, what + " refused: " + refusal_reason(err));
    degradation_log::instance().record(what + " refused (" + std::strerror(err) + "): " + fell_back);
    return false;
}

/// \effects admits `bytes` for `mode` over `nodes` (see admit_or_throw), then sets `mode` on
/// [p, p+bytes) (p page-aligned). A refusal throws when `fb` is strict; when degrading it falls back once,
/// as far as the kernel allows, and records it: preferred_many to preferring the first node,
/// bind_balancing to a plain bind (EINVAL: a kernel older than 5.12), else the default policy (first
/// touch). Messages start with `who` (e.g. "heap: ").
/// \returns true if placed as asked, false if degraded. \throws unknown_node, placement_error.
inline bool place(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb,
                  const char* who = "", range_origin origin = range_origin::fresh) {
    const topology& topo = topology::get();
    topo.check(nodes);
    if (bytes == 0) return true;
    if (origin != range_origin::unadmitted) admit_or_throw(p, bytes, mode, nodes, who, origin);
    const int err = memory::bind(p, bytes, mode, nodes, topo);
    if (err == 0) return true;
    // A strict refusal admits nothing: the range is not placed (and may never be unmapped through
    // memory::unmap when it is a caller's own).
    if (fb == fallback::strict && origin == range_origin::fresh) forget_reservations(p, memory::page_round(bytes));
    std::string fell_back = "left to first touch";
    if (fb == fallback::degrade && err == EINVAL && mode == memory::policy_mode::preferred_many) {
        if (memory::bind(p, bytes, memory::policy_mode::preferred, node_set{nodes[0]}, topo) == 0)
            fell_back = "preferring node " + std::to_string(nodes[0]) + " (MPOL_PREFERRED_MANY unsupported)";
    } else if (fb == fallback::degrade && err == EINVAL && mode == memory::policy_mode::bind_balancing) {
        if (memory::bind(p, bytes, memory::policy_mode::bind, nodes, topo) == 0)
            fell_back = describe(memory::policy_mode::bind, nodes) + " without NUMA balancing (MPOL_F_NUMA_BALANCING unsupported)";
    }
    return refused(err, error_node(nodes), bytes, fb, who + ("mbind " + describe(mode, nodes)), fell_back);
}


} // namespace detail

/// \effects what every placement's `apply` does for one policy (for user-written placements):
/// admits `bytes` on `nodes` (refused with ENOMEM for every fallback, see admission.hpp), then sets
/// `mode` on the untouched range [p, p+bytes). \returns true if placed; false if the kernel refused
/// and `fb` is degrade (recorded in `degradations()`). \throws placement_error (strict refusal, or
/// ENOMEM); unknown_node.
inline bool place_pages(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb) {
    return detail::place(p, bytes, mode, nodes, fb);
}

} // namespace numaplace

#endif
