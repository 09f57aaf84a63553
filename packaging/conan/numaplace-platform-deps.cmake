# Conan build module (cpp_info "cmake_build_modules"), included at the end of the numaplace-config.cmake that
# Conan's CMakeDeps generates for a consumer.
#
# hwloc and oneTBB as Conan packages: CMakeDeps has already found them and linked numaplace::core to
# hwloc::hwloc and numaplace::parallel to TBB::tbb. Nothing to do here.
#
# hwloc and oneTBB from the system ([platform_requires] in the profile, e.g. packaging/conan/system.profile):
# CMakeDeps generates no files for them and leaves them out of the targets' link interfaces, so we find
# them here: hwloc through numaplace's hwloc search (hwloc/Findhwloc.cmake beside this file: pkg-config,
# then a plain header/library search), oneTBB through the system's TBBConfig.cmake (optional: only
# numaplace::parallel needs it, and numaplace::compiled, which requires it).
if(NOT TARGET hwloc::hwloc)
    list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}/hwloc")
    find_package(hwloc 2.0 REQUIRED)
    list(POP_FRONT CMAKE_MODULE_PATH)
    target_link_libraries(numaplace::core INTERFACE hwloc::hwloc)
endif()
if(NOT TARGET TBB::tbb)
    find_package(TBB QUIET)
    if(TARGET TBB::tbb)
        target_link_libraries(numaplace::parallel INTERFACE TBB::tbb)
    endif()
endif()
