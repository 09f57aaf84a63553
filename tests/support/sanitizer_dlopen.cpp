// Linked into the test binaries of sanitizer builds only (scripts/test sets NUMAPLACE_SANITIZER_SHIM).
//
// oneTBB dlopens libtbbbind with RTLD_DEEPBIND, which the ASan/TSan runtimes refuse outright ("You are
// trying to dlopen ... with RTLD_DEEPBIND flag which is incompatible with sanitizer runtime",
// google/sanitizers#611): the process aborts before a single test runs. This definition of dlopen in the
// executable comes first in the global lookup scope, so libtbb's call lands here; it drops only the
// DEEPBIND flag (tbbbind then resolves hwloc from the already loaded libhwloc, the same library) and
// forwards to the next dlopen, the sanitizer's own interceptor. Nothing of numaplace is changed.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>

extern "C" void* dlopen(const char* file, int mode) {
    using dlopen_fn = void* (*)(const char*, int);
    static dlopen_fn next = reinterpret_cast<dlopen_fn>(dlsym(RTLD_NEXT, "dlopen"));
    return next(file, mode & ~RTLD_DEEPBIND);
}
