// shared_segment.hpp: layouts, creation and opening (memfd and POSIX names), placement of every part
// on its node whatever process touches it in whatever order, failure paths (seccomp EPERM, RLIMIT_AS,
// bad names and sizes) releasing everything. Runs on the host and in every guest layout; on one node
// every part is on node 0, which is still exact.
#include <numaplace/shared_segment.hpp>

#include "child.hpp"
#include "seccomp.hpp"

#include "smaps.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace numaplace;

namespace {

const std::size_t page = detail::page_size();

// The notes' block sizes, one part per usable node in turn (every node, memory-only ones included).
segment_layout notes_layout(std::size_t parts = 3) {
    const auto& topo = topology::get();
    const std::size_t sizes[] = {4, 3, 3};
    std::vector<segment_part> p;
    for (std::size_t k = 0; k < parts; ++k) p.push_back({topo.nodes()[k % topo.size()].id, sizes[k % 3]});
    return segment_layout(p);
}

std::size_t open_fds() {
    std::size_t n = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (::readdir(d)) ++n;
        ::closedir(d);
    }
    return n;
}

bool shm_exists(const std::string& name) {
    int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
}

std::string unique_name(const char* what) {
    return "/numaplace-test-" + std::string(what) + "-" + std::to_string(::getpid());
}

// Runs f in a forked child (tests/support/child.hpp); \returns its exit code (128 + signal if killed,
// 255 if it hung for a minute).
template <class F>
int in_child(F&& f) {
    return numaplace_test::run_child(std::forward<F>(f), 60);
}

bool binding_works() { return topology::get().capabilities().memory_binding; }

// Every page of every part is on the part's node.
void expect_placed(const shared_segment& s) {
    for (std::size_t k = 0; k < s.layout().size(); ++k) {
        const auto& part = s.layout().parts()[k];
        page_histogram h = s.where(k);
        EXPECT_EQ(h.pages, part.pages) << "part " << k;
        EXPECT_EQ(h.untouched, 0u) << "part " << k;
        EXPECT_EQ(h.on(part.node), part.pages) << "part " << k << " node " << part.node;
    }
}

} // namespace

TEST(shared_segment, layout_offsets_are_whole_pages_in_order) {
    segment_layout l = notes_layout();
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(l.offset(0), 0u);
    EXPECT_EQ(l.offset(1), 4 * page);
    EXPECT_EQ(l.offset(2), 7 * page);
    EXPECT_EQ(l.offset(3), 10 * page);
    EXPECT_EQ(l.bytes(), 10 * page);
    EXPECT_EQ(l.bytes(0), 4 * page);
    EXPECT_EQ(l.bytes(1), 3 * page);
    EXPECT_EQ(l.bytes(2), 3 * page);
    EXPECT_FALSE(l.huge_page_edges());
    const std::size_t per_huge = detail::huge_page_size() / page;
    EXPECT_TRUE(segment_layout({{0, per_huge}, {0, 2 * per_huge}}).huge_page_edges());
    EXPECT_FALSE(segment_layout({{0, per_huge}, {0, 1}}).huge_page_edges());
    EXPECT_EQ(l, notes_layout());
    EXPECT_NE(l, notes_layout(2));
    EXPECT_NE(l, segment_layout({{0, 4}, {0, 3}, {0, 4}}));
}

namespace {
using numaplace_test::has_vm_flag;
} // namespace

TEST(shared_segment, huge_pages_kept_off_unless_edges_are_huge_aligned) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const std::size_t per_huge = detail::huge_page_size() / page;
    shared_segment small = shared_segment::create(notes_layout());
    shared_segment aligned = shared_segment::create(segment_layout({{0, per_huge}, {0, per_huge}}));
    EXPECT_TRUE(has_vm_flag(small.data(), "nh"));
    EXPECT_FALSE(has_vm_flag(aligned.data(), "nh"));
    // openers' mappings too
    shared_segment opened = shared_segment::open_fd(small.fd(), small.layout());
    EXPECT_TRUE(has_vm_flag(opened.data(), "nh"));
}

TEST(shared_segment, layout_rejects_bad_input) {
    const int count = static_cast<int>(topology::get().size());
    EXPECT_THROW(segment_layout(std::vector<segment_part>{}), invalid_placement);
    EXPECT_THROW(segment_layout({{0, 0}}), invalid_placement);
    EXPECT_THROW(segment_layout({{0, 0}, {0, 0}}), invalid_placement);
    // A node this process cannot see is refused where it would be bound (create), not in the layout:
    // an opener in another cpuset builds the creator's layout.
    const segment_layout unseen({{0, 1}, {count, 1}});
    for (fallback fb : {fallback::strict, fallback::degrade}) {
        try {
            shared_segment::create(unseen, fb);
            ADD_FAILURE() << "no throw";
        } catch (const unknown_node& e) {
            EXPECT_EQ(e.node(), count);
            EXPECT_EQ(e.node_count(), topology::get().size());
        }
    }
    EXPECT_THROW(segment_layout({{-1, 1}}), unknown_node);
    // sizes: the largest page count a file offset holds fits; one more page, or a sum past it, does not
    const std::size_t max_pages = static_cast<std::size_t>(std::numeric_limits<off_t>::max()) / page;
    EXPECT_EQ(segment_layout({{0, max_pages}}).bytes(), max_pages * page);
    EXPECT_THROW(segment_layout({{0, max_pages + 1}}), std::bad_array_new_length);
    EXPECT_THROW(segment_layout({{0, max_pages}, {0, 1}}), std::bad_array_new_length);
    EXPECT_THROW(segment_layout({{0, SIZE_MAX}}), std::bad_array_new_length);
    EXPECT_THROW(segment_layout({{0, SIZE_MAX - 1}, {0, 2}}), std::bad_array_new_length);
    EXPECT_THROW(segment_layout({{0, SIZE_MAX / page + 1}}), std::bad_array_new_length);
    // an empty layout makes no segment
    EXPECT_THROW(shared_segment::create(segment_layout()), invalid_placement);
}

TEST(shared_segment, every_part_on_its_node_touched_by_this_process) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here (errno " << topology::get().capabilities().memory_binding_errno << ")";
    // one part per node, so in the guests every node (a memory-only one too) holds one part
    shared_segment s = shared_segment::create(notes_layout(std::max<std::size_t>(3, topology::get().size())));
    EXPECT_TRUE(s.bound());
    EXPECT_TRUE(s.name().empty());
    EXPECT_GE(s.fd(), 0);
    ASSERT_NE(s.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.data()) % page, 0u);
    // nothing touched yet: where() reports holes and creates none
    page_histogram before = s.where();
    EXPECT_EQ(before.pages, s.layout().bytes() / page);
    EXPECT_EQ(before.untouched, before.pages);
    EXPECT_EQ(s.where().untouched, before.pages);
    std::memset(s.data(), 1, s.bytes()); // all from one thread, on one node
    expect_placed(s);
}

TEST(shared_segment, parts_touched_by_other_processes_in_any_order) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const std::size_t parts = std::max<std::size_t>(3, topology::get().size());
    for (bool reverse : {false, true}) {
        shared_segment s = shared_segment::create(notes_layout(parts));
        // children touch one part each, one after the other, first to last or last to first; this
        // process never writes
        for (std::size_t i = 0; i < parts; ++i) {
            const std::size_t k = reverse ? parts - 1 - i : i;
            int code = in_child([&] {
                shared_segment mine = shared_segment::open_fd(s.fd(), s.layout());
                if (mine.bound()) return 10; // an opener binds nothing itself
                segment_block b = mine.block(k);
                std::memset(b.data, static_cast<int>(k + 1), b.bytes);
                // the child sees its part where the parent will
                return mine.where(k).on(b.node) == b.bytes / page ? 0 : 11;
            });
            ASSERT_EQ(code, 0) << "part " << k;
        }
        expect_placed(s);
        for (std::size_t k = 0; k < parts; ++k) {
            segment_block b = s.block(k);
            EXPECT_EQ(std::count(b.data, b.data + b.bytes, static_cast<char>(k + 1)), static_cast<long>(b.bytes));
        }
    }
}

TEST(shared_segment, random_layouts_against_prefix_sums) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const auto& topo = topology::get();
    std::uint64_t state = 12345; // fixed seed: the same layouts on every run
    auto next = [&state](std::uint64_t bound) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return (state >> 33) % bound;
    };
    for (int round = 0; round < 40; ++round) {
        std::vector<segment_part> parts(1 + next(8));
        std::size_t total = 0;
        for (auto& p : parts) {
            p.node = topo.nodes()[next(topo.size())].id;
            p.pages = next(6); // 0..5: empty parts too
            total += p.pages;
        }
        if (total == 0) {
            EXPECT_THROW(segment_layout{parts}, invalid_placement);
            continue;
        }
        segment_layout l(parts);
        std::size_t offset = 0;
        for (std::size_t k = 0; k < parts.size(); ++k) {
            ASSERT_EQ(l.offset(k), offset);
            ASSERT_EQ(l.bytes(k), parts[k].pages * page);
            offset += parts[k].pages * page;
        }
        ASSERT_EQ(l.bytes(), total * page);
        shared_segment s = shared_segment::create(l);
        // touch last part first, one page at a time
        for (std::size_t k = parts.size(); k-- > 0;) {
            segment_block b = s.block(k);
            ASSERT_EQ(b.data, s.data() + l.offset(k));
            ASSERT_EQ(b.node, parts[k].node);
            for (std::size_t i = 0; i < b.bytes; i += page) b.data[i] = 1;
        }
        expect_placed(s);
        page_histogram whole = s.where();
        for (int id = 0; id < static_cast<int>(topo.size()); ++id) {
            std::size_t expect = 0;
            for (const auto& p : parts) expect += p.node == id ? p.pages : 0;
            EXPECT_EQ(whole.on(id), expect) << "round " << round << " node " << id;
        }
    }
}

TEST(shared_segment, the_policy_is_the_segments_not_the_mappings) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    shared_segment s = shared_segment::create(notes_layout());
    // an unrelated mapping of the same segment, made in another process, reports each part's policy
    int code = in_child([&] {
        shared_segment other = shared_segment::open_fd(s.fd(), s.layout());
        for (std::size_t k = 0; k < other.layout().size(); ++k) {
            int mode = -1;
            unsigned long mask[16] = {};
            if (::syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, other.block(k).data, 2 /*MPOL_F_ADDR*/) != 0)
                return 20;
            if (mode != detail::mpol_bind) return 21;
            const unsigned os = topology::get().at(other.block(k).node).os_index;
            for (unsigned bit = 0; bit < sizeof mask * 8; ++bit)
                if (((mask[bit / 64] >> (bit % 64)) & 1ul) != (bit == os ? 1ul : 0ul)) return 22;
        }
        return 0;
    });
    EXPECT_EQ(code, 0);
}

TEST(shared_segment, named_create_open_and_unlink) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const std::string name = unique_name("named");
    {
        shared_segment s = shared_segment::create(name, notes_layout());
        EXPECT_EQ(s.name(), name);
        EXPECT_TRUE(shm_exists(name));
        // a second creator of the same name is refused, and does not unlink the first's name
        try {
            shared_segment::create(name, notes_layout());
            ADD_FAILURE() << "no throw";
        } catch (const std::system_error& e) {
            EXPECT_EQ(e.code().value(), EEXIST);
        }
        EXPECT_TRUE(shm_exists(name));
        // a child opens it by name, writes its part; a forked copy of the creator does not unlink
        int code = in_child([&] {
            shared_segment copy = std::move(s); // the creator object, destroyed in the child
            (void)copy;
            shared_segment mine = shared_segment::open(name, notes_layout());
            std::memset(mine.block(1).data, 7, mine.block(1).bytes);
            return 0;
        });
        ASSERT_EQ(code, 0);
        EXPECT_TRUE(shm_exists(name));
        EXPECT_EQ(s.block(1).data[0], 7);
        EXPECT_EQ(s.where(1).on(s.block(1).node), 3u);
        EXPECT_EQ(s.where(0).untouched, 4u);
        // the layout must match the segment's size
        EXPECT_THROW(shared_segment::open(name, notes_layout(2)), invalid_placement);
        EXPECT_THROW(shared_segment::open_fd(s.fd(), segment_layout({{0, 11}})), invalid_placement);
    }
    EXPECT_FALSE(shm_exists(name));
    try {
        shared_segment::open(name, notes_layout());
        ADD_FAILURE() << "no throw";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), ENOENT);
    }
}

TEST(shared_segment, bad_names_and_descriptors) {
    const std::string too_long = "/" + std::string(NAME_MAX, 'x');
    for (const std::string& name : {std::string(), std::string("/"), std::string("noslash"), std::string("/a/b"), too_long,
                                    std::string("/."), std::string("/.."), std::string("/a\0b", 4)}) {
        EXPECT_THROW(shared_segment::create(name, notes_layout()), invalid_placement) << name;
        EXPECT_THROW(shared_segment::open(name, notes_layout()), invalid_placement) << name;
        EXPECT_THROW(shared_segment::remove(name), invalid_placement) << name;
    }
    EXPECT_THROW(shared_segment::open("a/b", notes_layout()), invalid_placement);
    EXPECT_THROW(shared_segment::open_fd(-1, notes_layout()), std::system_error);
    // a descriptor of something else (size 0), and a closed one
    int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);
    EXPECT_THROW(shared_segment::open_fd(null_fd, notes_layout()), invalid_placement);
    ::close(null_fd);
    EXPECT_THROW(shared_segment::open_fd(null_fd, notes_layout()), std::system_error);
}

TEST(shared_segment, an_opener_need_not_see_the_creators_nodes) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const int count = static_cast<int>(topology::get().size());
    const std::string name = unique_name("unseen");
    shared_segment created = shared_segment::create(name, segment_layout({{0, 2}, {count - 1, 3}}));
    // The opener's view: the same page counts, the second part on a node id it does not have.
    shared_segment opened = shared_segment::open(name, segment_layout({{0, 2}, {count + 5, 3}}));
    EXPECT_EQ(opened.bytes(), 5 * page);
    opened.data()[0] = 7;
    EXPECT_EQ(created.data()[0], 7);
}

TEST(shared_segment, remove_unlinks_a_segment_left_behind) {
    const std::string name = unique_name("left");
    // A creator killed before its destructor ran leaves the name: here, a plain shm_open stands for it.
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ASSERT_TRUE(shm_exists(name));
    EXPECT_TRUE(shared_segment::remove(name));
    EXPECT_FALSE(shm_exists(name));
    EXPECT_FALSE(shared_segment::remove(name)); // nothing left: false, no throw
}

TEST(shared_segment, moved_from_is_empty_and_reusable) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    shared_segment a = shared_segment::create(notes_layout());
    char* data = a.data();
    shared_segment b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(a.bytes(), 0u);
    EXPECT_EQ(a.fd(), -1);
    EXPECT_EQ(a.layout().size(), 0u);
    EXPECT_FALSE(a.bound());
    EXPECT_THROW(a.block(0), std::out_of_range);
    EXPECT_EQ(a.where().pages, 0u);
    EXPECT_EQ(b.data(), data);
    EXPECT_THROW(b.block(3), std::out_of_range);
    a = std::move(b); // assign into the moved-from one
    EXPECT_EQ(a.data(), data);
    a = shared_segment::create(notes_layout(1)); // the old mapping is released
    EXPECT_EQ(a.bytes(), 4 * page);
    shared_segment empty;
    EXPECT_EQ(empty.bytes(), 0u);
}

TEST(shared_segment, destruction_releases_mapping_and_descriptor) {
    auto segment_mappings = [] {
        std::ifstream maps("/proc/self/maps");
        std::string line;
        std::size_t n = 0;
        while (std::getline(maps, line)) n += line.find("/memfd:numaplace-segment") != std::string::npos;
        return n;
    };
    const std::size_t fds = open_fds(), mappings = segment_mappings();
    {
        shared_segment s = shared_segment::create(notes_layout(), fallback::degrade);
        std::memset(s.data(), 1, s.bytes());
        shared_segment other = shared_segment::open_fd(s.fd(), s.layout());
        EXPECT_EQ(open_fds(), fds + 2);
        // two mappings; the creator's is split into one VMA per run of parts with the same node
        std::size_t runs = 1;
        for (std::size_t k = 1; k < s.layout().size(); ++k)
            runs += s.layout().parts()[k].node != s.layout().parts()[k - 1].node;
        EXPECT_EQ(segment_mappings(), mappings + runs + 1);
        shared_segment moved = std::move(other);
        EXPECT_EQ(open_fds(), fds + 2);
    }
    EXPECT_EQ(open_fds(), fds);
    EXPECT_EQ(segment_mappings(), mappings);
}

TEST(shared_segment, strict_throws_and_releases_under_seccomp) {
    const std::string name = unique_name("seccomp");
    int code = numaplace_test::run_denied(numaplace_test::memory_policy_syscalls(), [&] {
        const std::size_t fds = open_fds();
        for (int named = 0; named < 2; ++named) {
            try {
                if (named) shared_segment::create(name, notes_layout());
                else shared_segment::create(notes_layout());
                return 30;
            } catch (const placement_error& e) {
                if (e.error_number() != EPERM) return 31;
                if (e.bytes() != 4 * page || e.node() != notes_layout().parts()[0].node) return 32;
            }
            if (open_fds() != fds) return 33;
            if (shm_exists(name)) return 34;
        }
        // degrading: usable, not bound, recorded
        const std::size_t before = degradation_count();
        shared_segment s = shared_segment::create(name, notes_layout(), fallback::degrade);
        if (s.bound() || degradation_count() != before + 1) return 35;
        bool named_in_log = false;
        for (const auto& m : degradations())
            named_in_log |= m.find("shared_segment: mbind of part 0 to node " + std::to_string(notes_layout().parts()[0].node) +
                                    " refused (Operation not permitted): left to first touch") != std::string::npos;
        if (!named_in_log) return 36;
        std::memset(s.data(), 3, s.bytes());
        if (s.where().touched() != 10) return 37;
        return 0;
    });
    EXPECT_EQ(code, 0);
    EXPECT_FALSE(shm_exists(name));
}

TEST(shared_segment, a_part_larger_than_its_node) {
    const auto& topo = topology::get();
    const node& n = topo.nodes().back();
    if (n.memory == 0) GTEST_SKIP() << "node memory unknown";
    const std::size_t pages = n.memory / page + 1;
    segment_layout huge({{0, 1}, {n.id, pages}});
    // Admission counts every part of a node together (here: 1 + pages on one node of a one-node host),
    // and refuses with ENOMEM for every fallback: a fallback cannot make memory that does not exist.
    const std::size_t on_node = (n.id == 0 ? 1 + pages : pages) * page;
    for (fallback fb : {fallback::strict, fallback::degrade}) {
        const std::size_t fds = open_fds();
        try {
            shared_segment::create(huge, fb);
            ADD_FAILURE() << "no throw";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_EQ(e.node(), n.id);
            EXPECT_EQ(e.bytes(), on_node);
        }
        EXPECT_EQ(open_fds(), fds);
    }
}

TEST(shared_segment, two_parts_that_fit_alone_but_not_together_are_refused) {
    const auto& topo = topology::get();
    const node& n = topo.nodes().back();
    if (n.memory == 0) GTEST_SKIP() << "node memory unknown";
    const std::size_t half = n.memory / page / 2 + 16; // each below the node, together above it
    segment_layout two({{n.id, half}, {n.id, half}});
    try {
        shared_segment::create(two, fallback::degrade);
        ADD_FAILURE() << "no throw";
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM);
        EXPECT_EQ(e.node(), n.id);
        EXPECT_EQ(e.bytes(), 2 * half * page);
    }
}

TEST(shared_segment, mapping_failure_releases_everything) {
    const std::string name = unique_name("rlimit");
    int code = in_child([&] {
        const std::size_t fds = open_fds();
        // address space in use now (huge under ASan) plus 256 MiB
        std::size_t vm_kib = 0;
        {
            std::ifstream status("/proc/self/status");
            std::string key;
            while (status >> key)
                if (key == "VmSize:" && status >> vm_kib) break;
        }
        if (vm_kib == 0) return 45;
        const rlim_t limit = (vm_kib << 10) + (std::size_t(256) << 20);
        rlimit lim{limit, limit};
        if (::setrlimit(RLIMIT_AS, &lim) != 0) return 40;
        segment_layout big({{0, (std::size_t(1) << 30) / page}}); // 1 GiB: more address space than allowed
        for (int named = 0; named < 2; ++named) {
            try {
                if (named) shared_segment::create(name, big);
                else shared_segment::create(big);
                return 41;
            } catch (const placement_error& e) {
                if (e.error_number() != ENOMEM) return 42;
            }
            if (open_fds() != fds) return 43;
            if (shm_exists(name)) return 44;
        }
        return 0;
    });
    EXPECT_EQ(code, 0);
}

TEST(shared_segment, started_under_seccomp) {
    // A process started under a container-like filter (mbind, set_mempolicy refused): strict creation
    // throws EPERM; degrading creates a usable segment and records it. Re-runs this test after exec.
    if (numaplace_test::rerun_started_under_seccomp()) return;
    EXPECT_FALSE(topology::get().capabilities().memory_binding);
    try {
        shared_segment::create(notes_layout());
        ADD_FAILURE() << "no throw";
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), EPERM);
    }
    const std::size_t before = degradation_count();
    shared_segment s = shared_segment::create(notes_layout(), fallback::degrade);
    EXPECT_FALSE(s.bound());
    EXPECT_EQ(degradation_count(), before + 1);
    std::memset(s.data(), 1, s.bytes());
    EXPECT_EQ(s.where().touched(), 10u);
}

// A layout of the same total size but other parts is refused by an opener (the creator's layout is
// recorded in a trailer page after the parts), by name and by descriptor.
TEST(shared_segment, an_opener_with_other_parts_of_the_same_size_is_refused) {
    if (!binding_works()) GTEST_SKIP() << "mbind refused here";
    const std::string name = unique_name("parts");
    shared_segment s = shared_segment::create(name, segment_layout({{0, 2}, {0, 3}}));
    EXPECT_NO_THROW(shared_segment::open(name, segment_layout({{0, 2}, {0, 3}})));
    for (const segment_layout& other : {segment_layout({{0, 3}, {0, 2}}), segment_layout({{0, 5}}),
                                        segment_layout({{0, 1}, {0, 1}, {0, 3}})}) {
        EXPECT_THROW(shared_segment::open(name, other), invalid_placement);
        EXPECT_THROW(shared_segment::open_fd(s.fd(), other), invalid_placement);
    }
    // a file of the right size that numaplace did not make
    const int fd = ::memfd_create("not-a-segment", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(6 * page)), 0);
    EXPECT_THROW(shared_segment::open_fd(fd, segment_layout({{0, 5}})), invalid_placement);
    ::close(fd);
}

// Whoever touches first, the placement holds: an opener that polls for the name and writes the moment
// it can open the segment finds every part already bound (the size, which openers check, is published
// last). Needs two nodes to tell a bound page from a first-touched one.
TEST(shared_segment, a_racing_opener_that_writes_at_once_finds_every_part_bound) {
    const auto& topo = topology::get();
    if (topo.size() < 2 || !binding_works()) GTEST_SKIP() << "needs two nodes and binding";
    const int far = topo.nodes().back().id; // the opener runs on node 0's cpus, parts on the last node too
    const segment_layout layout({{far, 8}, {0, 8}, {far, 8}});
    int misplaced = 0;
    for (int round = 0; round < 60; ++round) {
        const std::string name = unique_name("race") + std::to_string(round);
        std::atomic<bool> go{false};
        std::thread opener([&] {
            cpu_set_t set;
            CPU_ZERO(&set);
            for (unsigned c : topo.at(0).cpus) CPU_SET(c, &set);
            sched_setaffinity(0, sizeof set, &set);
            while (!go.load()) {
            }
            for (;;) {
                try {
                    shared_segment mine = shared_segment::open(name, layout);
                    std::memset(mine.data(), 1, mine.bytes());
                    return;
                } catch (const std::exception&) { // not there yet, or not published yet
                }
            }
        });
        go = true;
        shared_segment s = shared_segment::create(name, layout);
        opener.join();
        for (std::size_t k = 0; k < layout.size(); ++k) {
            const page_histogram h = s.where(k);
            if (h.on(layout.parts()[k].node) != h.pages) ++misplaced;
        }
    }
    EXPECT_EQ(misplaced, 0) << "parts with pages off their node, of 180";
}

// An opener that comes while the creator is still at work (the name exists, its size is not set yet)
// waits for it: it never takes that moment for another layout (invalid_placement). A name whose size
// never comes (a creator that died before setting it) is std::system_error EAGAIN after the wait.
TEST(shared_segment, an_opener_waits_for_a_creator_at_work_and_gives_up_with_eagain) {
    const segment_layout layout({{0, 64}});
    const std::string name = unique_name("at-work");
    for (int round = 0; round < 100; ++round) {
        shared_segment::remove(name);
        const pid_t child = ::fork();
        if (child == 0) {
            for (;;) try {
                    shared_segment opened = shared_segment::open(name, layout);
                    ::_exit(opened.bytes() == layout.bytes() ? 0 : 2);
                } catch (const std::system_error& e) {
                    if (e.code().value() != ENOENT) ::_exit(3);
                } catch (const invalid_placement&) {
                    ::_exit(4);
                }
        }
        shared_segment created = shared_segment::create(name, layout);
        const int code = numaplace_test::wait_child(child, 60);
        ASSERT_EQ(code, 0) << "round " << round << ": 3: system_error other than ENOENT, 4: invalid_placement";
    }
    shared_segment::remove(name);
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600); // a creator that died
    ASSERT_GE(fd, 0);
    ::close(fd);
    try {
        (void)shared_segment::open(name, layout);
        ADD_FAILURE() << "opened a segment without a size";
    } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), EAGAIN) << e.what();
    }
    EXPECT_TRUE(shared_segment::remove(name));
}

// A full /dev/shm (a tmpfs of 64 KiB in a mount namespace of a child): create throws placement_error
// ENOSPC and leaves no name; the trailer page of a file there is ENOSPC too, never a SIGBUS; a segment
// that fits is made.
TEST(shared_segment, a_full_file_system_is_enospc_and_leaves_nothing) {
    const int code = numaplace_test::run_child([] {
        if (::unshare(CLONE_NEWNS) != 0) return 77;
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
        if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k") != 0) return 77;
        const std::size_t room = 65536 / page; // pages of the file system
        if (room < 4) return 77;
        try { // the segment and its trailer page are one page more than the room
            (void)shared_segment::create("/np-full", segment_layout({{0, room}}));
            return 2;
        } catch (const placement_error& e) {
            if (e.error_number() != ENOSPC) return 3;
        }
        if (::access("/dev/shm/np-full", F_OK) == 0) return 4;
        { // the boundary: parts and trailer exactly the room
            shared_segment fits = shared_segment::create("/np-fits", segment_layout({{0, room - 1}}));
            std::memset(fits.data(), 1, fits.bytes());
        }
        if (::access("/dev/shm/np-fits", F_OK) == 0) return 7;
        // fill it, then write a trailer page past the end of a sparse file there
        const int fill = ::open("/dev/shm/fill", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        std::vector<char> bytes(page, 1);
        while (::write(fill, bytes.data(), bytes.size()) > 0) {
        }
        const int fd = ::open("/dev/shm/sparse", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fill < 0 || fd < 0 || ::ftruncate(fd, static_cast<off_t>(2 * page)) != 0) return 5;
        if (detail::write_segment_trailer(fd, page, detail::segment_trailer::of(1, 1)) != ENOSPC) return 6;
        return 0;
    });
    if (code == 77) GTEST_SKIP() << "no mount namespace here (needs CAP_SYS_ADMIN)";
    EXPECT_EQ(code, 0) << "2: created, 3: not ENOSPC, 4: its name left, 5: setup, 6: trailer write not ENOSPC, 7: the exact fit's name "
                          "left; 98: the exact fit refused; 135: SIGBUS";
}
