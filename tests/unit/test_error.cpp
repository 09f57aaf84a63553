// error.hpp: the exception types numaplace throws (their hierarchy, accessors, messages and copies).
// Which call throws which error, and when, is tested with the header of that call: unknown ids and
// malformed arguments in test_placement, test_partition, test_topology, test_pmr and test_memory; capacity
// refusals in test_memory; refusals by the kernel in test_placement.

#include <numaplace/error.hpp>

#include <gtest/gtest.h>

#include <cerrno>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

static_assert(std::is_base_of<std::invalid_argument, numaplace::unknown_node>::value, "");
static_assert(std::is_base_of<std::invalid_argument, numaplace::invalid_placement>::value, "");
static_assert(std::is_base_of<std::bad_alloc, numaplace::placement_error>::value, "");

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

} // namespace

TEST(error, unknown_node_message_names_the_id_and_the_valid_range) {
    numaplace::unknown_node e(7, 4);
    EXPECT_EQ(e.node(), 7);
    EXPECT_EQ(e.node_count(), 4u);
    EXPECT_EQ(std::string(e.what()), "numaplace: unknown NUMA node id 7 (valid ids: 0..3)");
    numaplace::unknown_node none(0, 0);
    EXPECT_TRUE(contains(none.what(), "none")) << none.what();
    numaplace::unknown_node negative(-1, 2);
    EXPECT_TRUE(contains(negative.what(), "id -1")) << negative.what();
    EXPECT_TRUE(contains(negative.what(), "0..1")) << negative.what();
}

// --- placement_error: what a refused placement carries ---------------------------------------------

TEST(error, placement_error_carries_node_bytes_and_errno) {
    numaplace::placement_error e(3, 12345, ENOMEM, "something refused");
    EXPECT_EQ(e.node(), 3);
    EXPECT_EQ(e.bytes(), 12345u);
    EXPECT_EQ(e.error_number(), ENOMEM);
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "numaplace: something refused")) << msg;
    EXPECT_TRUE(contains(msg, "node 3")) << msg;
    EXPECT_TRUE(contains(msg, "12345 bytes")) << msg;
    EXPECT_TRUE(contains(msg, "errno " + std::to_string(ENOMEM))) << msg;
    numaplace::placement_error several(-1, 1, EPERM, "x");
    EXPECT_TRUE(contains(several.what(), "node any")) << several.what();
    const std::bad_alloc& base = e;
    EXPECT_EQ(std::string(base.what()), msg);
}

TEST(error, placement_error_copies_never_throw_and_share_the_message) {
    static_assert(std::is_nothrow_copy_constructible<numaplace::placement_error>::value, "");
    static_assert(std::is_nothrow_copy_assignable<numaplace::placement_error>::value, "");
    static_assert(std::is_nothrow_copy_constructible<numaplace::invalid_placement>::value, "");
    static_assert(std::is_nothrow_copy_constructible<numaplace::unknown_node>::value, "");
    const numaplace::placement_error e(1, 4096, EPERM, std::string(200, 'x'));
    numaplace::placement_error copy = e;
    // the copy shares the message buffer (reference counted): copying and what() allocate nothing
    EXPECT_EQ(copy.what(), e.what());
    numaplace::placement_error other(2, 1, ENOMEM, "other");
    other = e;
    EXPECT_EQ(other.what(), e.what());
    EXPECT_EQ(other.node(), 1);
    EXPECT_EQ(other.bytes(), 4096u);
    EXPECT_EQ(other.error_number(), EPERM);
    // moved-from stays valid
    numaplace::placement_error moved = std::move(copy);
    EXPECT_STREQ(copy.what(), e.what()); // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(moved.node(), 1);
}
