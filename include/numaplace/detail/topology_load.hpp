#ifndef NUMAPLACE_DETAIL_TOPOLOGY_LOAD_HPP_INCLUDED
#define NUMAPLACE_DETAIL_TOPOLOGY_LOAD_HPP_INCLUDED

/// \file
/// Loading the process's hwloc topology (topology::get()): the cases where the machine cannot be read
/// as it is (a node directory hidden by a container, a backend other than Linux sysfs, nodes the kernel
/// allows but hwloc missed, an XML hwloc refuses) each load what hwloc can give and record a degradation
/// starting "topology: ".

#include "../diagnostics.hpp"
#include "../error.hpp"
#include "hwloc.hpp"
#include "linux.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include <sched.h>

namespace numaplace {
namespace detail {

/// \returns a new, empty hwloc topology. \throws std::bad_alloc.
inline hwloc_topology_ptr make_empty_topology() {
    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0) throw std::bad_alloc();
    return hwloc_topology_ptr(raw);
}
/// \effects loads `t`. \throws invalid_placement when hwloc cannot.
inline void load_topology(hwloc_topology_t t) {
    if (hwloc_topology_load(t) != 0) throw_invalid("hwloc could not load the topology");
}

/// \returns 0 when the calling thread's CPU affinity can be read, with a set as large as it takes (up to
/// 2^20 CPUs), else the errno of the last attempt (EINVAL: no size up to that was accepted).
inline int os_affinity_readable() noexcept {
    for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
        cpu_set_t* set = CPU_ALLOC(cpus);
        if (set == nullptr) return ENOMEM;
        const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
        const int err = ::sched_getaffinity(0, bytes, set) == 0 ? 0 : errno;
        CPU_FREE(set);
        if (err != EINVAL || cpus == (1 << 20)) return err;
    }
    return EINVAL;
}

// A topology that cannot be read is never fatal and never silent: each case below loads what hwloc
// can give and records a degradation starting "topology: " that says why (numaplace-info shows it).
// At the descriptor limit nothing can be read (hwloc keeps a few files open while it reads /sys): it
// would give one node without memory, kept for the rest of the process; where the affinity is refused,
// hwloc would never return. A std::system_error instead, and topology::get() tries again at its next call.
inline hwloc_topology_ptr load_system_topology() {
    if (const int err = os_descriptors_free(4))
        throw std::system_error(err, std::generic_category(),
                                "numaplace: reading the topology needs 4 free file descriptors (ulimit -n)");
    const std::string sys_node = "/sys/devices/system/node";
    auto exists = [](const std::string& path) { return std::ifstream(path).is_open(); }; // files and directories
    const auto parse_list = [](const std::string& text) { return parse_id_list(text); };
    // The nodes the kernel lets this process use: Mems_allowed_list (/proc, present when /sys is hidden).
    std::string allowed_text;
    {
        std::ifstream status("/proc/self/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("Mems_allowed_list:", 0) == 0) {
                const std::size_t start = line.find_first_not_of(" \t", 18);
                if (start != std::string::npos) allowed_text = line.substr(start);
                break;
            }
    }
    const std::vector<unsigned> allowed = parse_list(allowed_text);
    auto record = [](const std::string& why) { degradation_log::instance().record("topology: " + why); };

    hwloc_topology_ptr t = make_empty_topology();
    // Default flags: disallowed CPUs and nodes (cgroup cpuset) are removed and logical indexes
    // renumbered, as tbbbind does, so our ids equal oneTBB's numa ids.
    // A node directory that exists but lists no node (a container or mount namespace hiding it): hwloc
    // 2.9's Linux discovery asserts on it (abort, exit 134). Read the machine without that backend.
    bool without_linux = false;
    if (exists(sys_node)) {
        std::vector<unsigned> candidates = parse_list(read_line((sys_node + "/possible").c_str()));
        candidates.insert(candidates.end(), allowed.begin(), allowed.end());
        candidates.push_back(0);
        const bool any_node = std::any_of(candidates.begin(), candidates.end(), [&](unsigned id) {
            return exists(sys_node + "/node" + std::to_string(id));
        });
        if (!any_node) {
#if HWLOC_API_VERSION >= 0x00020100
            if (hwloc_topology_set_components(t.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "linux") != 0)
                throw_invalid("cannot read the topology: " + sys_node + " lists no node and hwloc "
                                      "cannot be told to skip its Linux discovery");
            without_linux = true;
            // oneTBB's tbbbind loads hwloc itself (tbb::info::numa_nodes, the arenas) and would abort
            // the same way: HWLOC_COMPONENTS, which hwloc reads at every load, keeps it off there too.
            const char* given = std::getenv("HWLOC_COMPONENTS");
            const std::string components = given ? given : "";
            if (components.find("-linux") == std::string::npos)
                ::setenv("HWLOC_COMPONENTS", (components.empty() ? "-linux" : components + ",-linux").c_str(), 1);
            record(sys_node + " lists no node (hidden by a container or mount namespace?): read without "
                   "hwloc's Linux discovery, which would abort on it (HWLOC_COMPONENTS=-linux set for "
                   "oneTBB's tbbbind too); nodes, memory sizes and distances are guesses");
#else
            throw_invalid("cannot read the topology: " + sys_node + " lists no node (hidden by a "
                                  "container or mount namespace?) and hwloc before 2.1 would abort on it");
#endif
        }
    }
    // hwloc's Linux discovery reads the process's affinity, and when that fails retries with a larger set
    // for ever (hwloc 2.9 takes every failure for a set too small): under a sandbox refusing
    // sched_getaffinity it never returns. A typed error instead (binding_attack tests).
    if (!without_linux && std::getenv("HWLOC_XMLFILE") == nullptr && std::getenv("HWLOC_SYNTHETIC") == nullptr)
        if (const int err = os_affinity_readable(); err != 0 && err != EINVAL)
            throw std::system_error(err, std::generic_category(),
                                    "numaplace: cannot read the topology: the process's CPU affinity is refused "
                                    "(sched_getaffinity; a seccomp profile?), which hwloc would retry for ever");
    if (hwloc_topology_load(t.get()) != 0) {
        // hwloc refused what it was told to read (HWLOC_XMLFILE naming an XML it cannot use, e.g. one
        // without a NUMA node): one node with this process's CPU count is assumed, not this system's
        const char* xml = std::getenv("HWLOC_XMLFILE");
        cpu_set_t set;
        const int count = os_thread_affinity(set) == 0 ? CPU_COUNT(&set) : 0;
        const std::string cpus = std::to_string(count > 0 ? count : 1);
        record(std::string("hwloc could not load the topology") +
               (xml ? " from HWLOC_XMLFILE=" + quoted(xml) : std::string()) + ": one node with " + cpus +
               " CPUs assumed (not this system's: capabilities not probed, CPU numbers may not be the kernel's)");
        t = make_empty_topology();
        if (hwloc_topology_set_synthetic(t.get(), ("numa:1 pu:" + cpus).c_str()) != 0)
            throw_invalid("hwloc could not load the topology, nor a one-node stand-in");
        load_topology(t.get());
        return t;
    }

    if (!hwloc_topology_is_thissystem(t.get())) {
        record("hwloc loaded a topology that is not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC or "
               "HWLOC_FSROOT set?): capabilities not probed, node ids may not be the kernel's");
        return t;
    }
    const char* backend = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t.get()), "Backend");
    const int found = hwloc_get_nbobjs_by_type(t.get(), HWLOC_OBJ_NUMANODE);
    if (!without_linux && (backend == nullptr || std::string(backend) != "Linux"))
        record(std::string("hwloc did not read Linux sysfs (backend ") + (backend ? backend : "unknown") +
               "; HWLOC_COMPONENTS excludes linux, or /sys is hidden): " + std::to_string(found) +
               " NUMA node(s) assumed; nodes, memory sizes and distances may be missing");
    // Every node the kernel lets this process use must be one hwloc found.
    std::vector<unsigned> missing;
    for (unsigned id : allowed) {
        bool seen = false;
        for (int i = 0; i < found && !seen; ++i)
            seen = hwloc_get_obj_by_type(t.get(), HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i))->os_index == id;
        if (!seen) missing.push_back(id);
    }
    if (!missing.empty()) {
        std::string list;
        for (unsigned id : missing) list += (list.empty() ? "" : ",") + std::to_string(id);
        record("the kernel lets this process use nodes " + allowed_text + " (Mems_allowed_list) but hwloc "
               "found " + std::to_string(found) + " node(s), not node(s) " + list +
               ": placement cannot target them");
    }
    return t;
}

} // namespace detail
} // namespace numaplace

#endif
