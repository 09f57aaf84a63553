# Findhwloc: provides the imported target hwloc::hwloc.
# hwloc ships no CMake package of its own (only hwloc.pc), so: try a CONFIG package first (a packager may
# provide one, e.g. vcpkg), then pkg-config, then a plain header/library search (hwloc_INCLUDE_DIR,
# hwloc_CONFIG_INCLUDE_DIR, hwloc_LIBRARY may be set by hand). Sets hwloc_FOUND and hwloc_VERSION.
include(FindPackageHandleStandardArgs)

if(NOT TARGET hwloc::hwloc)
    find_package(hwloc CONFIG QUIET)
endif()

if(NOT TARGET hwloc::hwloc)
    find_package(PkgConfig QUIET)
    if(PKG_CONFIG_FOUND)
        pkg_check_modules(PC_hwloc QUIET IMPORTED_TARGET GLOBAL hwloc)
        if(PC_hwloc_FOUND)
            # A target of its own, not an ALIAS: an export resolves an alias to the aliased name, and
            # numaplaceTargets.cmake would then name PkgConfig::PC_hwloc, which a consumer without pkg-config
            # (found hwloc by the plain search below) does not have. hwloc::hwloc exists on every path.
            add_library(hwloc::hwloc INTERFACE IMPORTED GLOBAL)
            target_link_libraries(hwloc::hwloc INTERFACE PkgConfig::PC_hwloc)
            set(hwloc_VERSION ${PC_hwloc_VERSION})
        endif()
    endif()
endif()

if(NOT TARGET hwloc::hwloc)
    find_path(hwloc_INCLUDE_DIR hwloc.h)
    # hwloc/autogen/config.h (HWLOC_VERSION) is architecture-specific: Debian keeps it under the multiarch
    # include dir (/usr/include/x86_64-linux-gnu), not beside hwloc.h. find_path searches both.
    find_path(hwloc_CONFIG_INCLUDE_DIR hwloc/autogen/config.h HINTS "${hwloc_INCLUDE_DIR}")
    find_library(hwloc_LIBRARY hwloc)
    if(hwloc_INCLUDE_DIR AND hwloc_CONFIG_INCLUDE_DIR AND hwloc_LIBRARY)
        add_library(hwloc::hwloc UNKNOWN IMPORTED)
        set(_hwloc_dirs "${hwloc_INCLUDE_DIR}")
        if(NOT hwloc_CONFIG_INCLUDE_DIR STREQUAL hwloc_INCLUDE_DIR)
            list(APPEND _hwloc_dirs "${hwloc_CONFIG_INCLUDE_DIR}")
        endif()
        set_target_properties(hwloc::hwloc PROPERTIES IMPORTED_LOCATION "${hwloc_LIBRARY}"
                              INTERFACE_INCLUDE_DIRECTORIES "${_hwloc_dirs}")
        file(STRINGS "${hwloc_CONFIG_INCLUDE_DIR}/hwloc/autogen/config.h" _hwloc_ver
             REGEX "#define HWLOC_VERSION \"[0-9.]+")
        string(REGEX MATCH "[0-9]+\\.[0-9]+(\\.[0-9]+)?" hwloc_VERSION "${_hwloc_ver}")
        unset(_hwloc_dirs)
        unset(_hwloc_ver)
    endif()
endif()

if(TARGET hwloc::hwloc)
    set(_hwloc_target_found TRUE)
endif()
find_package_handle_standard_args(hwloc REQUIRED_VARS _hwloc_target_found VERSION_VAR hwloc_VERSION
                                  NAME_MISMATCHED)
unset(_hwloc_target_found)
