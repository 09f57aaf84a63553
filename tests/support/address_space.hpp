// Limiting the address space in a test's fresh process (RLIMIT_AS, what `ulimit -v` sets on batch systems).
#ifndef NUMAPLACE_TEST_SUPPORT_ADDRESS_SPACE_HPP_INCLUDED
#define NUMAPLACE_TEST_SUPPORT_ADDRESS_SPACE_HPP_INCLUDED

#include <cstddef>
#include <cstdio>

#include <sys/resource.h>
#include <unistd.h>

namespace numaplace_test {

/// \effects sets RLIMIT_AS to the address space in use plus `headroom`. \returns whether it did.
inline bool limit_address_space(std::size_t headroom) {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    unsigned long vm_pages = 0;
    const bool read = f && std::fscanf(f, "%lu", &vm_pages) == 1;
    if (f) std::fclose(f);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const rlimit lim{vm_pages * page + headroom, vm_pages * page + headroom};
    return read && ::setrlimit(RLIMIT_AS, &lim) == 0;
}

} // namespace numaplace_test

#endif
