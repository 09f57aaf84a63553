// Test support: the checks several test files share. Expectations are computed from topology::get(), so
// they hold on any number of nodes.
#ifndef NUMAPLACE_TESTS_EXPECT_HPP_INCLUDED
#define NUMAPLACE_TESTS_EXPECT_HPP_INCLUDED

#include <numaplace/error.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/topology.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <typeinfo>
#include <vector>

namespace numaplace_test {

inline bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

/// Runs `f`, which must throw unknown_node for `id`; checks type, accessors and message.
inline void expect_unknown_node(const std::function<void()>& f, int id, const char* what) {
    SCOPED_TRACE(what);
    const std::size_t n = numaplace::topology::get().size();
    try {
        f();
        ADD_FAILURE() << "no exception for node " << id;
    } catch (const numaplace::unknown_node& e) {
        EXPECT_EQ(e.node(), id);
        EXPECT_EQ(e.node_count(), n);
        const std::string msg = e.what();
        EXPECT_TRUE(contains(msg, "unknown NUMA node id " + std::to_string(id))) << msg;
        EXPECT_TRUE(contains(msg, "0.." + std::to_string(n - 1))) << msg;
        // it is an invalid_argument
        const std::invalid_argument& base = e;
        EXPECT_EQ(std::string(base.what()), msg);
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type for node " << id << ": " << e.what();
    }
}

/// Runs `f`, which must throw invalid_placement whose message contains `word`.
inline void expect_invalid(const std::function<void()>& f, const std::string& word, const char* what) {
    SCOPED_TRACE(what);
    try {
        f();
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::invalid_placement& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("numaplace: ", 0), 0u) << msg;
        EXPECT_TRUE(contains(msg, word)) << msg;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
    }
}

/// Runs `f`, which must throw std::system_error with errno `err` and a message containing `word`.
inline void expect_system_error(const std::function<void()>& f, int err, const std::string& word, const char* what) {
    SCOPED_TRACE(what);
    try {
        f();
        ADD_FAILURE() << "no exception";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), err) << e.what();
        EXPECT_TRUE(contains(e.what(), word)) << e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
    }
}

/// Runs `f`, which must throw placement_error with ENOMEM.
template <class F>
void expect_enomem(F f, const std::string& what) {
    try {
        f();
        ADD_FAILURE() << what << ": no exception";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM) << what;
    } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": wrong exception " << typeid(e).name() << ": " << e.what();
    }
}

/// Sizes no allocation can serve: SIZE_MAX and below it, where page rounding or alignment would overflow.
inline const std::vector<std::size_t>& huge_sizes() {
    static const std::size_t page = numaplace::detail::page_size();
    static const std::vector<std::size_t> sizes{SIZE_MAX,        SIZE_MAX - 1,    SIZE_MAX - 8,   SIZE_MAX - 100,
                                                SIZE_MAX - page + 1, SIZE_MAX - page, SIZE_MAX - 2 * page,
                                                SIZE_MAX / 2 + 1, std::size_t(1) << 62};
    return sizes;
}

/// Virtual memory size of this process in bytes (from /proc/self/status).
inline std::size_t virtual_size() {
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "VmSize:") {
            std::size_t kb = 0;
            in >> kb;
            return kb * 1024;
        }
        std::string rest;
        std::getline(in, rest);
    }
    return 0;
}

/// Checks that the blocks of `p` tile [0, p.size()) in order, each of its node.
template <class P>
void expect_tiles(const P& p) {
    std::size_t at = 0;
    for (std::size_t k = 0; k < p.block_count(); ++k) {
        const numaplace::block b = p.block(k);
        EXPECT_EQ(b.node, p.nodes()[k]);
        EXPECT_EQ(b.begin, at) << "block " << k;
        EXPECT_LE(b.begin, b.end);
        at = b.end;
    }
    EXPECT_EQ(at, p.size());
}

} // namespace numaplace_test

#endif
