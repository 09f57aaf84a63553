#ifndef NUMAPLACE_DETAIL_NUMASTAT_HPP_INCLUDED
#define NUMAPLACE_DETAIL_NUMASTAT_HPP_INCLUDED

/// \file
/// The kernel's system-wide memory counters as observe.hpp reads them: files of "key value" lines
/// (/sys/devices/system/node/node<N>/numastat, /proc/vmstat), read whole with open/read so that a
/// refusal keeps its exact errno. Never throws but std::bad_alloc.

#include "strings.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <iterator> // before <string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace numaplace {
namespace detail {

/// The "key value" lines of one counter file; a line that does not parse is skipped.
struct counter_file {
    std::vector<std::pair<std::string, std::uint64_t>> values;

    /// \returns whether `key` is in the file, and its value in `out`.
    bool get(const char* key, std::uint64_t& out) const noexcept {
        for (const auto& kv : values)
            if (kv.first == key) {
                out = kv.second;
                return true;
            }
        return false;
    }
};

/// \effects parses "key value" lines of `text` into `out`.
inline void parse_counter_lines(const std::string& text, counter_file& out) {
    out.values.clear();
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        const std::size_t space = text.find(' ', pos);
        if (space != std::string::npos && space < end && space > pos) {
            const char* digits = text.c_str() + space + 1;
            char* stop = nullptr;
            errno = 0;
            const unsigned long long v = std::strtoull(digits, &stop, 10);
            if (stop != digits && errno == 0 && (*stop == '\n' || *stop == '\0' || *stop == ' '))
                out.values.emplace_back(text.substr(pos, space - pos), static_cast<std::uint64_t>(v));
        }
        pos = end + 1;
    }
}

/// \effects reads the whole file `path` into `text`. \returns 0 or errno (ENOENT: /sys hidden or no
/// such node; EACCES; EMFILE at the descriptor limit).
inline int os_read_small_file(const std::string& path, std::string& text) {
    text.clear();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno != 0 ? errno : ENOENT;
    char buf[4096];
    int err = 0;
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) err = errno;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return err;
}

/// \effects reads the counter file `path` into `out`. \returns 0 or errno.
inline int read_counter_file(const std::string& path, counter_file& out) {
    std::string text;
    if (const int err = os_read_small_file(path, text)) return err;
    parse_counter_lines(text, out);
    return 0;
}

/// \returns the path of OS node `os`'s numastat file.
inline std::string numastat_path(unsigned os) {
    return "/sys/devices/system/node/node" + std::to_string(os) + "/numastat";
}

/// \effects lists the kernel's online nodes (/sys/devices/system/node/online). \returns 0 or errno.
inline int os_online_nodes(std::vector<unsigned>& nodes) {
    std::string text;
    if (const int err = os_read_small_file("/sys/devices/system/node/online", text)) return err;
    nodes = parse_id_list(text);
    return nodes.empty() ? ENOENT : 0;
}

} // namespace detail
} // namespace numaplace

#endif
