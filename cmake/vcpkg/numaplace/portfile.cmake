# vcpkg overlay port for numaplace (header-only). numaplace is not published, so the port builds this
# repository in place instead of downloading a release:
#   vcpkg install numaplace --overlay-ports=<repo>/cmake/vcpkg
# The port directory is <repo>/cmake/vcpkg/numaplace, so the sources are three levels up. To build another
# checkout set NUMAPLACE_SOURCE_DIR and let it through vcpkg's clean environment:
#   VCPKG_KEEP_ENV_VARS=NUMAPLACE_SOURCE_DIR NUMAPLACE_SOURCE_DIR=/path/to/numaplace vcpkg install ...
# vcpkg hashes the port files, not these sources: after changing the sources, `vcpkg remove numaplace` and
# install again with --no-binarycaching, or the binary cache hands back the older build.
if(DEFINED ENV{NUMAPLACE_SOURCE_DIR})
    file(REAL_PATH "$ENV{NUMAPLACE_SOURCE_DIR}" SOURCE_PATH)
else()
    file(REAL_PATH "${CURRENT_PORT_DIR}/../../.." SOURCE_PATH)
endif()
if(NOT EXISTS "${SOURCE_PATH}/include/numaplace/numaplace.hpp")
    message(FATAL_ERROR "numaplace sources not found at '${SOURCE_PATH}' (set NUMAPLACE_SOURCE_DIR)")
endif()

# Header-only: one configuration is enough, and nothing is compiled.
set(VCPKG_BUILD_TYPE release)

# numaplace[core] (feature "parallel" off): no oneTBB, numaplace::core only.
if(NOT "parallel" IN_LIST FEATURES)
    set(feature_options -DCMAKE_DISABLE_FIND_PACKAGE_TBB=ON)
endif()

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        ${feature_options}
        -DNUMAPLACE_BUILD_TESTS=OFF
        -DNUMAPLACE_BUILD_EXAMPLES=OFF
        -DNUMAPLACE_BUILD_BENCHMARKS=OFF
        -DNUMAPLACE_INSTALL=ON
)
vcpkg_cmake_install()

# CMakeLists.txt installs numaplaceConfig.cmake, numaplaceTargets.cmake and Findhwloc.cmake (which the config
# uses to find hwloc) to ${CMAKE_INSTALL_DATADIR}/cmake/numaplace; vcpkg wants them in share/numaplace.
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/numaplace)

# numaplace-core.pc and numaplace.pc are installed to share/pkgconfig (architecture-independent), but
# numaplace-core.pc has a `Libs:` line (-pthread), and vcpkg accepts only .pc files without Libs there:
# move them to lib/pkgconfig. Without the parallel feature numaplace.pc (which requires tbb) is dropped.
file(MAKE_DIRECTORY "${CURRENT_PACKAGES_DIR}/lib/pkgconfig")
file(RENAME "${CURRENT_PACKAGES_DIR}/share/pkgconfig/numaplace-core.pc" "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/numaplace-core.pc")
if("parallel" IN_LIST FEATURES)
    file(RENAME "${CURRENT_PACKAGES_DIR}/share/pkgconfig/numaplace.pc" "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/numaplace.pc")
endif()
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/share/pkgconfig")
vcpkg_fixup_pkgconfig()  # prefix=${pcfiledir}/../.. instead of the absolute packages directory

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")  # none with VCPKG_BUILD_TYPE release; never wanted

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
