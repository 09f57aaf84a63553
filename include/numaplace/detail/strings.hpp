#ifndef NUMAPLACE_DETAIL_STRINGS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_STRINGS_HPP_INCLUDED

/// \file
/// Text the kernel gives (id lists, sysfs choice lists) and text numaplace's messages quote.

#include <cstdlib>
#include <iterator> // before <string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <string>
#include <vector>

namespace numaplace {
namespace detail {

/// \returns the ids of a kernel list ("0-3,5" in sysfs and /proc: {0, 1, 2, 3, 5}); malformed parts are
/// skipped.
inline std::vector<unsigned> parse_id_list(const std::string& text) {
    std::vector<unsigned> ids;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string::npos) comma = text.size();
        const std::string part = text.substr(pos, comma - pos);
        pos = comma + 1;
        char* end = nullptr;
        const unsigned long first = std::strtoul(part.c_str(), &end, 10);
        if (end == part.c_str()) continue;
        unsigned long last = first;
        if (*end == '-') last = std::strtoul(end + 1, &end, 10);
        for (unsigned long id = first; id <= last && id < first + 65536; ++id) ids.push_back(static_cast<unsigned>(id));
    }
    return ids;
}

/// The selected word in a sysfs choice list such as "always [madvise] never".
inline std::string bracketed(const std::string& line) {
    auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return line;
    return line.substr(open + 1, close - open - 1);
}

/// \returns `value` in double quotes, printable: bytes outside printable ASCII as \xHH, `"` and `\` escaped
/// (an environment variable's value quoted in a message stays one line of text).
inline std::string quoted(const char* value) {
    std::string out = "\"";
    for (const char* c = value; *c; ++c) {
        const auto b = static_cast<unsigned char>(*c);
        if (b == '"' || b == '\\') {
            out += '\\';
            out += *c;
        } else if (b >= 0x20 && b < 0x7f) {
            out += *c;
        } else {
            const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 15];
        }
    }
    return out + "\"";
}

} // namespace detail
} // namespace numaplace

#endif
