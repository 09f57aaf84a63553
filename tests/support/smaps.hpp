// Test support: fields of /proc/self/smaps for the mapping that contains an address. Plain C++ (no gtest,
// no numaplace): bench_huge_pages reads its huge-page counter through it too.
#ifndef NUMAPLACE_TESTS_SMAPS_HPP_INCLUDED
#define NUMAPLACE_TESTS_SMAPS_HPP_INCLUDED

#include <iterator> // first: libstdc++ 12's _GLIBCXX_DEBUG header-order bug (see error.hpp)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace numaplace_test {

/// \returns the text after "field:" in /proc/self/smaps for the mapping containing p ("" if none):
/// e.g. "AnonHugePages" (kB) or "VmFlags" (two-letter flags).
inline std::string smaps_field(const void* p, const std::string& field) {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    bool inside = false;
    while (std::getline(in, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
            inside = lo <= addr && addr < hi;
            continue;
        }
        if (inside && line.compare(0, field.size() + 1, field + ":") == 0) return line.substr(field.size() + 1);
    }
    return "";
}

/// \returns the kB of a size field ("AnonHugePages", "Rss"), 0 if p is in no mapping.
inline std::size_t smaps_kb(const void* p, const std::string& field) {
    return std::strtoull(smaps_field(p, field).c_str(), nullptr, 10);
}

/// \returns whether the mapping containing p has VmFlag `flag` ("hg" MADV_HUGEPAGE, "nh" MADV_NOHUGEPAGE).
inline bool has_vm_flag(const void* p, const std::string& flag) {
    const std::string flags = " " + smaps_field(p, "VmFlags") + " ";
    return flags.find(" " + flag + " ") != std::string::npos;
}

} // namespace numaplace_test

#endif
