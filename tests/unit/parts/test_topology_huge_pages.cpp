// report.hpp's explicit huge page lines and numaplace-info's "huge_pages" object: every node's pools as
// sysfs has them (size, total, free, surplus), and what limits their use (cgroup, RLIMIT_MEMLOCK).
#include <numaplace/huge_pages.hpp>
#include <numaplace/report.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>

using namespace numaplace;

namespace {
std::string run_info_json() {
    const std::string exe = NUMAPLACE_INFO_EXE;
    std::string out;
    if (exe.empty()) return out;
    if (std::FILE* f = ::popen((exe + " --json").c_str(), "r")) {
        char buf[4096];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
        ::pclose(f);
    }
    return out;
}
} // namespace

TEST(topology, report_prints_each_nodes_huge_page_pools) {
    std::ostringstream os;
    print_report(os);
    const std::string r = os.str();
    ASSERT_NE(r.find("\nexplicit huge pages:         "), std::string::npos) << r;
    if (explicit_page_sizes().empty()) {
        EXPECT_NE(r.find("explicit huge pages:         none"), std::string::npos) << r;
        return;
    }
    for (const auto& n : topology::get().nodes()) {
        std::string line = "\n  node " + std::to_string(n.id) + " pools:";
        const auto pools = huge_page_pools(n.id);
        for (std::size_t i = 0; i < pools.size(); ++i)
            line += std::string(i ? ";" : "") + " " + page_bytes_name(pools[i].page_bytes) + ": " + std::to_string(pools[i].total) +
                    " total, " + std::to_string(pools[i].free) + " free, " + std::to_string(pools[i].surplus) + " surplus";
        EXPECT_NE(r.find(line + "\n"), std::string::npos) << "no line '" << line << "' in\n" << r;
    }
    for (std::size_t s : explicit_page_sizes())
        EXPECT_NE(r.find("\n  usable " + page_bytes_name(s) + ": "), std::string::npos) << r;
    EXPECT_NE(r.find("\n  RLIMIT_MEMLOCK: "), std::string::npos) << r;
    // numaplace-info --json: the same pools
    const std::string json = run_info_json();
    if (std::string(NUMAPLACE_INFO_EXE).empty()) return; // examples not built
    ASSERT_NE(json.find("\"huge_pages\": {\"sizes\": ["), std::string::npos) << json;
    for (const auto& n : topology::get().nodes())
        for (const auto& p : huge_page_pools(n.id))
            EXPECT_NE(json.find("{\"node\": " + std::to_string(n.id) + ", \"page_bytes\": " + std::to_string(p.page_bytes) +
                                ", \"total\": " + std::to_string(p.total) + ", \"free\": " + std::to_string(p.free)),
                      std::string::npos)
                << json;
    EXPECT_NE(json.find("\"memlock_applies_to\": \"SHM_HUGETLB\""), std::string::npos) << json;
}
