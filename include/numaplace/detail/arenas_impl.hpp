#ifndef NUMAPLACE_DETAIL_ARENAS_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_ARENAS_IMPL_HPP_INCLUDED

/// \file
/// The definitions of arenas.hpp's out-of-line functions: making the per-node arenas for the process's
/// binding, choosing and verifying their pinning, the report. Included by arenas.hpp in header-only mode,
/// compiled into libnumaplace (where it has the oneTBB part) in the separately compiled mode
/// (detail/config.hpp).

#include "../arenas.hpp"
#include "../binding.hpp"
#include "../diagnostics.hpp"
#include "../loop.hpp"
#include "../topology.hpp"
#include "hwloc.hpp"
#include "linux.hpp"
#include "node_observer.hpp"
#include "process_checks.hpp"
#include "tbb_fork.hpp"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include <link.h>

namespace numaplace {
namespace detail {

/// \returns whether a shared object whose path contains `fragment` is loaded.
NUMAPLACE_DECL bool library_loaded(const char* fragment) {
    struct search {
        const char* fragment;
        bool found;
    } s{fragment, false};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
            auto* st = static_cast<search*>(data);
            if (info->dlpi_name && std::strstr(info->dlpi_name, st->fragment)) st->found = true;
            return st->found ? 1 : 0;
        },
        &s);
    return s.found;
}

/// \returns the CPUs of node k in `binding`, as an hwloc bitmap.
inline hwloc_bitmap_ptr bound_cpus(const cpu_binding& binding, int k) {
    hwloc_bitmap_ptr set = make_bitmap();
    if (!set) throw std::bad_alloc();
    for (unsigned c : binding.cpus(k)) hwloc_bitmap_set(set.get(), c);
    return set;
}

} // namespace detail

NUMAPLACE_DECL node_arenas& node_arenas::get() {
    static node_arenas instance;
    return instance;
}

NUMAPLACE_DECL arena_report node_arenas::report() const {
    arena_report r = report_;
    r.binding = binding_.to_string();
    // (inside a block the calling thread is pinned to its node: no reading then)
    const cpu_binding now = detail::current_block_node() < 0 ? cpu_binding::current() : binding_;
    if (now != binding_) {
        r.rebound = true;
        r.reason += "; the process was re-bound after its arenas were made (now " + now.to_string() +
                    "): the loops and default partitions keep the binding they were made for";
    }
    if (!observers_.empty() && detail::node_arenas_inherited.load(std::memory_order_relaxed)) {
        r.pinning = pinning::none;
        r.reason += "; this process was forked after the arenas were made: blocks run in the calling thread, unpinned";
    }
    if (const std::size_t lost = unpinned_entries()) {
        int error = 0;
        for (const auto& o : observers_) error = o->last_errno() ? o->last_errno() : error;
        r.pinning = pinning::none;
        r.reason += "; since then " + std::to_string(lost) +
                    " thread entries ran outside their node's CPUs and could not be pinned (errno " +
                    std::to_string(error) + ")";
    }
    return r;
}

NUMAPLACE_DECL std::size_t node_arenas::unpinned_entries() const noexcept {
    std::size_t n = 0;
    for (const auto& o : observers_) n += o->unpinned_entries();
    return n;
}

NUMAPLACE_DECL node_arenas::node_arenas() {
    const topology& topo = topology::get();
    binding_ = cpu_binding::current(topo); // the binding now: the loops' from here on
    const node_set cpu_nodes = binding_.nodes();
    // Nodes without a CPU of the binding (memory-only, or outside it) have no arena: their blocks run
    // on the nearest node with one.
    for (const auto& n : topo.nodes()) {
        int best = cpu_nodes.empty() ? 0 : cpu_nodes[0];
        for (int c : cpu_nodes)
            if (topo.distance(n.id, c) < topo.distance(n.id, best)) best = c;
        runner_.push_back(cpu_nodes.contains(n.id) ? n.id : best);
    }
    report_.tbb_numa_nodes.clear();
    if (cpu_nodes.size() <= 1) { // plain oneTBB: its NUMA view is not needed, and not loaded
        report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
        report_.pinning = pinning::single_node;
        report_.reason = binding_.whole_of(topo) ? "one node with CPUs"
                                                 : "one node with CPUs in this process's binding (" + binding_.to_string() + ")";
        detail::fix_binding(binding_);
        return;
    }
    if (!topo.is_this_system()) { // tbbbind would load the same foreign topology (and may crash on it)
        report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
        report_.pinning = pinning::none;
        report_.reason = "the topology is not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC or HWLOC_FSROOT): "
                         "oneTBB is not asked and every block runs in the caller's arena, unpinned";
        detail::degradation_log::instance().record("parallel_for: " + report_.reason);
        detail::fix_binding(binding_);
        return;
    }
    // oneTBB now loads tbbbind (files, address space) and soon starts a worker per CPU. A transient
    // refusal would be kept for the process (tbbbind not loaded; a worker oneTBB never starts again,
    // for which a loop waits for ever): refused here, nothing kept, the next call tries again.
    const std::size_t workers = binding_.cpu_count();
    if (const int err = detail::os_descriptors_free(8))
        throw std::system_error(err, std::generic_category(),
                                "numaplace: the per-node arenas need 8 free file descriptors (ulimit -n)");
    const std::size_t stack = tbb::global_control::active_value(tbb::global_control::thread_stack_size);
    if (const int err = detail::os_threads_can_start(workers, stack))
        throw std::system_error(err, std::generic_category(),
                                "numaplace: the per-node arenas cannot start their " + std::to_string(workers) +
                                    " worker threads (the address-space limit, ulimit -v?)");
    for (auto id : tbb::info::numa_nodes()) report_.tbb_numa_nodes.push_back(id);
    report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
    // tbbbind only if its numa ids are ours: every bound node listed, with as many threads as it has
    // CPUs of the binding (tbbbind reads the process's affinity too).
    bool agrees = report_.tbbbind_loaded;
    for (int k : cpu_nodes) {
        bool listed = false;
        for (int id : report_.tbb_numa_nodes) listed = listed || id == k;
        agrees = agrees && listed &&
                 tbb::info::default_concurrency(tbb::numa_node_id{k}) ==
                     static_cast<int>(binding_.cpus(k).size());
    }
    report_.pinning = agrees ? pinning::tbbbind : pinning::hwloc;
    std::string tbb_ids;
    for (int id : report_.tbb_numa_nodes) tbb_ids += (tbb_ids.empty() ? "" : " ") + std::to_string(id);
    std::string ours;
    for (int k : cpu_nodes) ours += (ours.empty() ? "" : " ") + std::to_string(k) + " (" +
                                    std::to_string(binding_.cpus(k).size()) + " CPUs)";
    report_.reason = agrees ? "tbbbind loaded; its numa ids match numaplace's"
                     : report_.tbbbind_loaded ? "tbbbind's numa ids (" + tbb_ids + ") or their CPU counts disagree with "
                                                "the binding's nodes " + ours
                                              : "libtbbbind not loaded: oneTBB sees no NUMA nodes";
    arenas_.resize(topo.size());
    home_ = static_cast<std::size_t>(cpu_nodes[0]);
#if TBB_INTERFACE_VERSION >= 12180
    std::vector<tbb::task_arena> from_tbb; // oneTBB 2023.0: one arena per tbb::info::numa_nodes() entry
    if (report_.pinning == pinning::tbbbind) {
        from_tbb = tbb::create_numa_task_arenas();
        report_.reason += "; arenas from tbb::create_numa_task_arenas";
    }
#endif
    for (int k : cpu_nodes) {
        const auto slot = static_cast<std::size_t>(k);
        const int threads = static_cast<int>(binding_.cpus(k).size());
        // One slot kept for the caller in the first node's arena, none elsewhere: the workers oneTBB
        // starts by default (the binding's CPUs less one) fill every other slot (docs/parallel_for.md).
        const unsigned reserved = slot == home_ ? 1u : 0u;
        if (report_.pinning == pinning::tbbbind) {
#if TBB_INTERFACE_VERSION >= 12180
            if (reserved == 0) // oneTBB's arenas keep no slot: the caller's arena is made below
                for (std::size_t i = 0; i < from_tbb.size() && i < report_.tbb_numa_nodes.size(); ++i)
                    if (report_.tbb_numa_nodes[i] == k) arenas_[slot] = std::make_unique<tbb::task_arena>(from_tbb[i]);
            if (!arenas_[slot])
#endif
            {
                tbb::task_arena::constraints c;
                c.numa_id = k;
                c.max_concurrency = threads;
                arenas_[slot] = std::make_unique<tbb::task_arena>(c, reserved);
            }
        } else {
            arenas_[slot] = std::make_unique<tbb::task_arena>(threads, reserved);
        }
        arenas_[slot]->initialize();
        const detail::hwloc_bitmap_ptr cpus = detail::bound_cpus(binding_, k);
        observers_.push_back(std::make_unique<detail::node_observer>(
            *arenas_[slot], k, topo.native(), cpus.get(), report_.pinning == pinning::hwloc));
    }
    verify(cpu_nodes);
    detail::fix_binding(binding_);
    detail::node_arenas_made.store(true, std::memory_order_relaxed);
}

NUMAPLACE_DECL node_arenas::~node_arenas() {
    observers_.clear(); // stop observing before the arenas go
    arenas_.clear();
}

NUMAPLACE_DECL void node_arenas::verify(const node_set& cpu_nodes) {
    auto probe = [&] {
        for (std::size_t i = 0; i < observers_.size(); ++i) {
            const auto before = observers_[i]->unpinned_entries();
            arenas_[static_cast<std::size_t>(cpu_nodes[i])]->execute([] {});
            if (observers_[i]->unpinned_entries() != before) return i;
        }
        return observers_.size();
    };
    const std::size_t failed = probe();
    if (failed == observers_.size()) {
        report_.verified = true;
        for (std::size_t i = 0; i < observers_.size() && report_.pinning == pinning::tbbbind; ++i) {
            if (observers_[i]->fallbacks() == 0) continue;
            report_.pinning = pinning::hwloc;
            report_.reason = "tbbbind loaded but a thread in node " + std::to_string(cpu_nodes[i]) +
                             "'s arena was not pinned by it; the hwloc observer pins every entering thread";
            for (auto& o : observers_) o->pin_always();
            detail::degradation_log::instance().record("parallel_for: " + report_.reason);
        }
        return;
    }
    const std::string what = std::string(name(report_.pinning)) + " did not take effect: a thread in node " +
                             std::to_string(cpu_nodes[failed]) + "'s arena ran outside its CPUs (errno " +
                             std::to_string(observers_[failed]->last_errno()) + ")";
    report_.pinning = pinning::none;
    report_.reason = what + "; the hwloc fallback failed too; blocks run unpinned";
    detail::degradation_log::instance().record("parallel_for: " + report_.reason);
}

} // namespace numaplace

#endif
