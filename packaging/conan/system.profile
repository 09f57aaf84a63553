# Offline Conan profile: hwloc and oneTBB come from the system (Debian 12: libhwloc-dev 2.9.0,
# libtbb-dev 2021.8.0 + libtbbbind-2-5), not from a remote. Conan records them as "platform" packages and
# downloads nothing; numaplace's version ranges (hwloc/[>=2.0 <3], onetbb/[>=2021.1 <2023]) accept them.
#   conan create . -pr:a packaging/conan/system.profile --build=missing
# Everything else (settings, compiler) comes from your default profile (`conan profile detect`).
include(default)

[platform_requires]
hwloc/2.9.0
onetbb/2021.8.0
