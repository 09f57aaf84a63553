// numaplace-info: the machine as numaplace sees it. Nodes, CPUs, memory (total and free, as
// `numactl --hardware` shows them), distances and every capability, with each degradation spelled out.
//   numaplace-info [--json] [--help]
// Exit status: 0 report printed, 1 the topology could not be read or the report not written (stdout
// closed, a full disk: one line on stderr), 2 bad arguments.
#include <numaplace/numaplace.hpp>
#include <numaplace/report.hpp>
#include <numaplace/tiers.hpp>

#include <hwloc.h> // calls hwloc on topology::native(): numaplace's headers declare hwloc's types only

#include <oneapi/tbb/info.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <link.h>

namespace {

const char* const usage_text =
    "usage: numaplace-info [--json] [--help]\n"
    "Prints the NUMA nodes numaplace may use (CPUs, memory total and free), their distances, what the kernel\n"
    "and sandbox allow (memory binding, page queries, CPU binding, which counters observation can read), each\n"
    "node's explicit huge page pools (size, total, free, surplus) and what limits their use here, the\n"
    "degradations so far and how oneTBB's\n"
    "arenas are pinned.\n"
    "  --json   the same as one JSON object (nodes, distances, capabilities, huge_pages, degradations,\n"
    "           observation, tbb)\n"
    "  --help   this text\n";

/// Free memory of a node in bytes, from /sys/devices/system/node/node<os>/meminfo; -1 if unreadable or
/// when the topology is not this system's (its nodes are not the kernel's).
std::int64_t free_bytes(const numaplace::topology& topo, unsigned os_index) {
    if (!topo.is_this_system()) return -1;
    std::ifstream in("/sys/devices/system/node/node" + std::to_string(os_index) + "/meminfo");
    std::string line;
    while (std::getline(in, line)) {
        // "Node 0 MemFree:        1234567 kB"
        const auto pos = line.find("MemFree:");
        if (pos == std::string::npos) continue;
        std::istringstream rest(line.substr(pos + 8));
        std::int64_t kb = -1;
        if (rest >> kb) return kb * 1024;
    }
    return -1;
}

/// The path of the first loaded shared object whose name contains `fragment`, or "" if none.
std::string loaded_path(const char* fragment) {
    struct search {
        const char* fragment;
        std::string path;
    } s{fragment, {}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
            auto* st = static_cast<search*>(data);
            if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, st->fragment) != nullptr) {
                st->path = info->dlpi_name;
                return 1;
            }
            return 0;
        },
        &s);
    return s.path;
}

// The length of the well-formed UTF-8 sequence at s[i] (Unicode's table 3-7), or 0.
std::size_t utf8_length(const std::string& s, std::size_t i) {
    const auto at = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
    const unsigned b = at(0);
    const auto tail = [&](std::size_t k) { return at(k) >= 0x80 && at(k) <= 0xbf; };
    if (b < 0x80) return 1;
    if (b >= 0xc2 && b <= 0xdf) return tail(1) ? 2 : 0;
    if (b >= 0xe0 && b <= 0xef) {
        const unsigned lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
        return at(1) >= lo && at(1) <= hi && tail(2) ? 3 : 0;
    }
    if (b >= 0xf0 && b <= 0xf4) {
        const unsigned lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
        return at(1) >= lo && at(1) <= hi && tail(2) && tail(3) ? 4 : 0;
    }
    return 0;
}

// A JSON string: valid UTF-8 kept, a byte that is not (a path or message with other bytes) as U+FFFD.
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size();) {
        const char c = s[i];
        const std::size_t n = utf8_length(s, i);
        if (n == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        if (n > 1) {
            out.append(s, i, n);
            i += n;
            continue;
        }
        ++i;
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
                out += buf;
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

const char* json_bool(bool b) { return b ? "true" : "false"; }

/// Whether hwloc read the whole machine: no degradation recorded by the topology loader ("topology: ...").
bool topology_readable() {
    for (const auto& m : numaplace::degradations())
        if (m.rfind("topology: ", 0) == 0) return false;
    return true;
}
/// The hwloc backend that discovered the topology ("Linux" when read from sysfs).
std::string topology_backend(const numaplace::topology& topo) {
    const char* b = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo.native()), "Backend");
    return b ? b : "unknown";
}

template <class Range>
std::string json_numbers(const Range& r) {
    std::string out = "[";
    bool first = true;
    for (const auto& v : r) {
        out += (first ? "" : ", ") + std::to_string(v);
        first = false;
    }
    return out + "]";
}

// The explicit huge page pools per node and what limits their use, as one JSON object.
std::string huge_pages_json(const numaplace::topology& topo) {
    std::ostringstream os;
    const std::vector<std::size_t> sizes = topo.is_this_system() ? numaplace::explicit_page_sizes() : std::vector<std::size_t>{};
    os << "{\"sizes\": " << json_numbers(sizes) << ", \"pools\": [";
    bool first = true;
    for (const auto& n : topo.nodes())
        for (const auto& p : topo.is_this_system() ? numaplace::huge_page_pools(n.id, topo) : std::vector<numaplace::huge_page_pool>{}) {
            os << (first ? "" : ", ") << "{\"node\": " << n.id << ", \"page_bytes\": " << p.page_bytes << ", \"total\": " << p.total
               << ", \"free\": " << p.free << ", \"surplus\": " << p.surplus << '}';
            first = false;
        }
    os << "], \"usable\": [";
    first = true;
    for (std::size_t s : sizes) {
        const numaplace::huge_page_usability u = numaplace::huge_page_usage_limits(s);
        os << (first ? "" : ", ") << "{\"page_bytes\": " << s << ", \"cgroup_visible\": " << json_bool(u.cgroup_visible)
           << ", \"cgroup_limit_bytes\": ";
        if (u.cgroup_visible && u.cgroup_limited) os << u.cgroup_limit; else os << "null";
        os << ", \"cgroup_usage_bytes\": " << u.cgroup_usage << '}';
        first = false;
    }
    const std::size_t memlock = numaplace::detail::os_memlock_limit();
    os << "], \"memlock_limit_bytes\": ";
    if (memlock == SIZE_MAX) os << "null"; else os << memlock;
    os << ", \"memlock_applies_to\": \"SHM_HUGETLB\", \"hugetlbfs_mounted\": " << json_bool(numaplace::detail::os_hugetlbfs_mounted()) << '}';
    return os.str();
}

void print_json(std::ostream& os, const numaplace::topology& topo, const numaplace::arena_report& arenas) {
    const auto& caps = topo.capabilities();
    const numaplace::heap_sharding_report shards = numaplace::heap_sharding(); // first: a bad NUMAPLACE_HEAP_SHARDS is a degradation
    os << "{\n  \"nodes\": [";
    bool first = true;
    for (const auto& n : topo.nodes()) {
        os << (first ? "\n" : ",\n") << "    {\"id\": " << n.id << ", \"os_index\": " << n.os_index
           << ", \"cpus\": " << json_numbers(n.cpus) << ", \"cores\": " << n.cores
           << ", \"memory_total_bytes\": " << n.memory << ", \"memory_free_bytes\": ";
        const std::int64_t free = free_bytes(topo, n.os_index);
        if (free < 0) os << "null"; else os << free;
        os << '}';
        first = false;
    }
    os << "\n  ],\n  \"distances\": [";
    first = true;
    for (const auto& a : topo.nodes()) {
        std::vector<unsigned> row;
        for (const auto& b : topo.nodes()) row.push_back(topo.distance(a.id, b.id));
        os << (first ? "" : ", ") << json_numbers(row);
        first = false;
    }
    os << "],\n  \"distances_known\": " << json_bool(caps.distances_known) << ",\n  \"capabilities\": {"
       << "\"nodes\": " << caps.nodes << ", \"system_nodes\": " << caps.system_nodes
       << ", \"probed\": " << json_bool(caps.probed)
       << ", \"memory_binding\": " << json_bool(caps.memory_binding)
       << ", \"memory_binding_errno\": " << caps.memory_binding_errno
       << ", \"page_query\": " << json_bool(caps.page_query) << ", \"page_query_errno\": " << caps.page_query_errno
       << ", \"cpu_binding\": " << json_bool(caps.cpu_binding) << ", \"cpu_binding_errno\": " << caps.cpu_binding_errno
       << ", \"preferred_many\": " << json_bool(caps.preferred_many)
       << ", \"weighted_interleave\": " << json_bool(caps.weighted_interleave)
       << ", \"numa_balancing_bind\": " << json_bool(caps.numa_balancing_bind)
       << ", \"memory_attributes\": " << json_bool(caps.memory_attributes)
       << ", \"transparent_huge_pages\": " << json_string(caps.thp) << ", \"numa_balancing\": " << caps.numa_balancing
       << ", \"topology_readable\": " << json_bool(topology_readable())
       << ", \"topology_backend\": " << json_string(topology_backend(topo))
       << "},\n  \"huge_pages\": " << huge_pages_json(topo)
       << ",\n  \"heap\": {\"shards\": " << shards.shards << ", \"shards_limit\": " << shards.limit
       << ", \"shards_chosen\": " << json_bool(shards.chosen) << ", \"thread_caches\": " << shards.thread_caches
       << ", \"cpus\": " << shards.cpus << ", \"shards_reason\": " << json_string(shards.reason)
       << "},\n  \"degradations\": {\"count\": " << numaplace::degradation_count() << ", \"messages\": [";
    first = true;
    for (const auto& m : numaplace::degradations()) {
        os << (first ? "" : ", ") << json_string(m);
        first = false;
    }
    os << "]},\n  \"observation\": {";
    first = true;
    for (auto g : {numaplace::counter_group::numastat, numaplace::counter_group::vmstat, numaplace::counter_group::software,
                   numaplace::counter_group::node_access}) {
        const numaplace::group_status& st = numaplace::observation_capabilities().status(g);
        os << (first ? "" : ", ") << '"' << numaplace::name(g) << "\": {\"available\": " << json_bool(st.measured)
           << ", \"system_wide\": " << json_bool(st.system_wide) << ", \"errno\": " << st.error
           << ", \"reason\": " << json_string(st.reason) << '}';
        first = false;
    }
    os << "},\n";
    if (caps.memory_attributes) { // each node with CPUs: every node's bandwidth and latency from it, as the text (report.hpp's tier_table)
        os << "  \"memory_tiers\": [";
        first = true;
        for (const auto& from : topo.nodes()) {
            if (!from.has_cpus()) continue;
            const numaplace::memory_tier_table table =
                numaplace::tier_table(numaplace::memory_tiers::of(from.id, numaplace::memory_attribute::bandwidth, topo),
                                      numaplace::memory_tiers::of(from.id, numaplace::memory_attribute::latency, topo));
            const auto number = [](const auto& v) { return v ? std::to_string(*v) : std::string("null"); };
            os << (first ? "\n" : ",\n") << "    {\"initiator\": " << from.id << ", \"ranked_by\": "
               << (!table.ranked_by ? "null" : *table.ranked_by == numaplace::memory_attribute::bandwidth ? "\"bandwidth\"" : "\"latency\"") << ", \"tiers\": [";
            bool first_row = true;
            for (const auto& row : table.rows) {
                os << (first_row ? "" : ", ") << "{\"nodes\": " << json_numbers(row.nodes.ids()) << ", \"rank\": " << number(row.rank)
                   << ", \"bandwidth\": " << number(row.bandwidth) << ", \"latency\": " << number(row.latency) << '}';
                first_row = false;
            }
            os << "], \"unknown\": " << json_numbers(table.unknown.ids()) << '}';
            first = false;
        }
        os << "\n  ],\n";
    }
    os << "  \"tbb\": {\"interface_version\": " << arenas.tbb_interface_version
       << ", \"library\": " << json_string(loaded_path("libtbb.so"))
       << ", \"tbbbind_loaded\": " << json_bool(arenas.tbbbind_loaded)
       << ", \"tbbbind_library\": " << json_string(loaded_path("libtbbbind"))
       << ", \"numa_nodes\": " << json_numbers(arenas.tbb_numa_nodes)
       << ", \"pinning\": " << json_string(numaplace::name(arenas.pinning))
       << ", \"pinning_reason\": " << json_string(arenas.reason) << "},\n  \"binding\": {\"cpus\": ";
    // The process's binding (taskset, mpirun --bind-to, Slurm): the arenas' and the default partition's.
    const numaplace::cpu_binding bound = numaplace::cpu_binding::of(topo);
    std::vector<unsigned> cpus;
    for (int id : bound.nodes()) cpus.insert(cpus.end(), bound.cpus(id).begin(), bound.cpus(id).end());
    os << json_numbers(cpus) << ", \"nodes\": " << json_numbers(bound.nodes().ids())
       << ", \"weights\": " << json_numbers(bound.weights()) << ", \"whole\": " << json_bool(bound.whole_of(topo))
       << ", \"rebound\": " << json_bool(arenas.rebound) << "}\n}\n";
}

void print_text(std::ostream& os, const numaplace::topology& topo, const numaplace::arena_report& arenas) {
    const numaplace::heap_sharding_report shards = numaplace::heap_sharding(); // first: a bad NUMAPLACE_HEAP_SHARDS is a degradation
    numaplace::print_report(os, topo);
    os << "heap shards per node:        " << shards.shards << " now, "
       << (shards.chosen ? "chosen (NUMAPLACE_HEAP_SHARDS unset): " : "fixed: ") << shards.reason << '\n';
    os << "topology readable:           "
       << (topology_readable() ? "yes (hwloc backend " + topology_backend(topo) + ")"
                               : "NO (hwloc backend " + topology_backend(topo) +
                                     ": nodes may be missing, see the topology degradations above)")
       << '\n';
    os << "memory per node (numactl -H):\n";
    for (const auto& n : topo.nodes()) {
        os << "  node " << n.id << " size: " << (n.memory >> 20) << " MiB, free: ";
        const std::int64_t free = free_bytes(topo, n.os_index);
        if (free < 0) os << "unknown"; else os << (static_cast<std::uint64_t>(free) >> 20) << " MiB";
        os << '\n';
    }
    os << "oneTBB interface version:    " << arenas.tbb_interface_version << '\n'
       << "oneTBB library:              " << loaded_path("libtbb.so") << '\n'
       << "tbbbind loaded:              " << (arenas.tbbbind_loaded ? "yes" : "NO");
    if (arenas.tbbbind_loaded) os << " (" << loaded_path("libtbbbind") << ')';
    os << "\noneTBB numa nodes:          ";
    for (int id : arenas.tbb_numa_nodes) os << ' ' << id;
    os << (arenas.tbb_numa_nodes.size() == 1 && arenas.tbb_numa_nodes[0] == -1 ? "  (TBB sees no NUMA)" : "")
       << "\narena pinning:               " << numaplace::name(arenas.pinning) << " — " << arenas.reason << '\n';
    const numaplace::cpu_binding bound = numaplace::cpu_binding::of(topo);
    os << "process binding:             " << bound.to_string() << "; weights (cores)";
    for (std::size_t w : bound.weights()) os << ' ' << w;
    os << (bound.whole_of(topo) ? " (not bound: every CPU)" : " (bound: default partitions and arenas follow it)")
       << (arenas.rebound ? "; RE-BOUND since the arenas were made: the loops keep the binding above" : "") << '\n';
}

/// Writes `text` to stdout and flushes it. \returns 0 or the errno of the failed write.
int write_stdout(const std::string& text) {
    errno = 0;
    const bool ok = std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0 &&
                    !std::ferror(stdout);
    return ok ? 0 : errno != 0 ? errno : EIO;
}

/// The one line on stderr and exit status 1 when the report could not be written.
int write_failed(int error) {
    std::fprintf(stderr, "numaplace-info: cannot write the report to standard output: %s\n", std::strerror(error));
    return 1;
}

} // namespace

int main(int argc, char** argv) {
    bool json = false, help = false;
    for (int i = 1; i < argc; ++i) { // every argument checked before any is acted on
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            help = true;
            continue;
        }
        if (std::strcmp(argv[i], "--json") == 0) {
            json = true;
            continue;
        }
        std::cerr << "numaplace-info: unknown option '" << argv[i] << "' (see numaplace-info --help)\n";
        return 2;
    }
    if (help) {
        if (::fcntl(1, F_GETFD) == -1) return write_failed(errno);
        const int error = write_stdout(usage_text);
        return error ? write_failed(error) : 0;
    }
    // A closed stdout fails now, before a file opened while loading could take descriptor 1.
    if (::fcntl(1, F_GETFD) == -1) return write_failed(errno);
    try {
        const auto& topo = numaplace::topology::get();
        numaplace::arena_report arenas = numaplace::arena_capabilities();
        // One node with CPUs: the loops do not ask oneTBB; this tool does, about this system only (tbbbind
        // reads HWLOC_XMLFILE too, and crashes on an XML hwloc refused: the topology's stand-in then)
        if (arenas.tbb_numa_nodes.empty() && topo.is_this_system()) {
            for (int id : tbb::info::numa_nodes()) arenas.tbb_numa_nodes.push_back(id);
            arenas.tbbbind_loaded = !loaded_path("libtbbbind").empty();
        }
        // Built in full first: an exception cannot leave half a JSON object on stdout.
        std::ostringstream out;
        if (json) print_json(out, topo, arenas); else print_text(out, topo, arenas);
        if (const int error = write_stdout(out.str())) return write_failed(error);
    } catch (const std::exception& e) {
        std::cerr << "numaplace-info: " << e.what() << '\n';
        return 1;
    }
    return 0;
}
