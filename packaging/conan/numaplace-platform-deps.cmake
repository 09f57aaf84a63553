# Conan build module (cpp_info "cmake_build_modules"), included at the end of the numaplace-config.cmake that
# Conan's CMakeDeps generates for a consumer.
#
# hwloc and oneTBB as Conan packages: CMakeDeps has already found them (their generated hwloc-config.cmake and
# TBBConfig.cmake) and linked numaplace::numaplace to hwloc::hwloc and TBB::tbb. Nothing to do here.
#
# hwloc and oneTBB from the system ([platform_requires] in the profile, e.g. packaging/conan/system.profile):
# Conan treats them as "platform" packages, so CMakeDeps generates no files for them and leaves them out of
# numaplace::numaplace's link interface and of its find_dependency() calls. We then find them the way the
# installed numaplaceConfig.cmake does: hwloc through the Findhwloc.cmake installed beside this file
# (hwloc ships only hwloc.pc: pkg-config, then a plain header/library search) and oneTBB through the
# system's TBBConfig.cmake; and link them to numaplace::numaplace ourselves.
include(CMakeFindDependencyMacro)
if(NOT TARGET hwloc::hwloc)
    list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
    find_dependency(hwloc 2.0)
    list(POP_FRONT CMAKE_MODULE_PATH)
    target_link_libraries(numaplace::numaplace INTERFACE hwloc::hwloc)
endif()
if(NOT TARGET TBB::tbb)
    find_dependency(TBB)
    target_link_libraries(numaplace::numaplace INTERFACE TBB::tbb)
endif()
