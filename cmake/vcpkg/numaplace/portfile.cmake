# vcpkg port for numaplace (header-only; the feature "compiled" builds libnumaplace, the separately compiled
# mode, and "tools" one program, numaplace-info).
#
# Where the sources come from (packaging/README.md, "vcpkg"):
# - overlay port in a numaplace checkout (cmake/vcpkg/numaplace, three levels under the checkout): builds that
#   checkout in place. vcpkg hashes the port's files, not these sources: after changing the sources,
#   `vcpkg remove numaplace` and install again with --no-binarycaching, or the binary cache hands back the
#   older build. To build another checkout, set NUMAPLACE_SOURCE_DIR and let it through vcpkg's clean
#   environment: VCPKG_KEEP_ENV_VARS=NUMAPLACE_SOURCE_DIR NUMAPLACE_SOURCE_DIR=/path/to/numaplace vcpkg install ...
# - the port copied out of the checkout (a registry's ports/numaplace): downloads the release tag
#   v${VERSION} (VERSION is vcpkg.json's "version") with vcpkg_from_github, checked against
#   numaplace_release_sha512 below: the newest release of packaging/release.txt (0.1.0: commit f7c0944), the
#   SHA512 of `git archive --format=tar --prefix=numaplace-X.Y.Z/ COMMIT | gzip -n`, which is GitHub's archive
#   of the tag once it points at COMMIT. `scripts/release stamp` writes it and vcpkg.json's "version",
#   `scripts/release check` checks both (packaging/README.md, "Making a release"). The SHA512 is part of the
#   port, so the ABI hash changes with the sources.
set(numaplace_release_sha512 "7ca0c8d8ad7075a5b0155422e884efe06b18945f1190a86ce32c7179d7296f702155d73ab48a8c051787eea52ed7cf8e226ff9363a118b8a56a02b68af160b93") # SHA512 of https://github.com/numaplace/numaplace/archive/v${VERSION}.tar.gz

if(DEFINED ENV{NUMAPLACE_SOURCE_DIR})
    file(REAL_PATH "$ENV{NUMAPLACE_SOURCE_DIR}" SOURCE_PATH)
elseif(EXISTS "${CURRENT_PORT_DIR}/../../../include/numaplace/numaplace.hpp")
    file(REAL_PATH "${CURRENT_PORT_DIR}/../../.." SOURCE_PATH)
elseif(numaplace_release_sha512)
    vcpkg_from_github(
        OUT_SOURCE_PATH SOURCE_PATH
        REPO numaplace/numaplace
        REF "v${VERSION}"
        SHA512 "${numaplace_release_sha512}"
        HEAD_REF main
    )
else()
    message(FATAL_ERROR "numaplace ${VERSION} has no release archive yet: use the port from a numaplace checkout "
                        "(--overlay-ports=<checkout>/cmake/vcpkg) or set NUMAPLACE_SOURCE_DIR")
endif()
if(NOT EXISTS "${SOURCE_PATH}/include/numaplace/numaplace.hpp")
    message(FATAL_ERROR "numaplace sources not found at '${SOURCE_PATH}' (set NUMAPLACE_SOURCE_DIR)")
endif()

# Header-only, one configuration is enough: the headers are the same, and the one program (numaplace-info)
# is a tool. libnumaplace (feature compiled) is built in both, as other libraries' ports are.
if(NOT "compiled" IN_LIST FEATURES)
    set(VCPKG_BUILD_TYPE release)
endif()

# parallel -> -DNUMAPLACE_PARALLEL=ON: oneTBB is required, configuring fails without it (numaplace[core], the
# feature off, installs numaplace::core only and its numaplaceConfig.cmake says so to find_package).
# tools -> -DNUMAPLACE_INSTALL_TOOLS=ON: builds and installs numaplace-info (needs parallel; vcpkg.json).
# compiled -> -DNUMAPLACE_COMPILED=ON: libnumaplace (static or shared as the triplet says), numaplace::compiled.
vcpkg_check_features(OUT_FEATURE_OPTIONS feature_options
    FEATURES
        parallel NUMAPLACE_PARALLEL
        tools    NUMAPLACE_INSTALL_TOOLS
        compiled NUMAPLACE_COMPILED
)

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        ${feature_options}
        -DNUMAPLACE_BUILD_TESTS=OFF
        -DNUMAPLACE_BUILD_EXAMPLES=OFF
        -DNUMAPLACE_BUILD_BENCHMARKS=OFF
        -DNUMAPLACE_INSTALL=ON
        # numaplace-core.pc has a `Libs:` line (-pthread): vcpkg accepts such .pc files only in lib/pkgconfig.
        -DNUMAPLACE_INSTALL_PKGCONFIGDIR=lib/pkgconfig
)
vcpkg_cmake_install()

# CMakeLists.txt installs numaplaceConfig.cmake, numaplaceTargets.cmake and Findhwloc.cmake (which the config
# uses to find hwloc) to ${CMAKE_INSTALL_DATADIR}/cmake/numaplace; vcpkg wants them in share/numaplace.
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/numaplace)

# lib/pkgconfig/numaplace-core.pc, numaplace.pc with the feature parallel, numaplace-compiled.pc with compiled
# (and debug/lib/pkgconfig's). They are already relocatable (prefix=${pcfiledir}/../..); this checks that
# pkg-config resolves them against the installed hwloc and tbb.
vcpkg_fixup_pkgconfig()

if("tools" IN_LIST FEATURES)
    vcpkg_copy_tools(TOOL_NAMES numaplace-info AUTO_CLEAN) # bin/numaplace-info -> tools/numaplace/
endif()

if("compiled" IN_LIST FEATURES)
    file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")
else()
    file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")  # none with VCPKG_BUILD_TYPE release; never wanted
endif()

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
