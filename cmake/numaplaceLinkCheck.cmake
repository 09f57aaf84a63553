# Stops configuring when a target links a numaplace target that no find_package(numaplace) made where that
# target is defined (its component not asked for, or asked for as optional and not found), saying which
# component to ask for. Without it CMake fails only at the generate step ("...but the target was not
# found"). Included by numaplaceConfig.cmake; the check runs once, at the end of the top directory. It needs
# CMake 3.21, as numaplace's own build does (cmake_language(DEFER), the directory property IMPORTED_TARGETS);
# with an older CMake, CMake's own error at the generate step stands.
#
# Only plain link items are checked (numaplace::x, or $<LINK_ONLY:numaplace::x> as CMake writes a static
# library's private links): an item inside another generator expression ($<TARGET_NAME_IF_EXISTS:...>, a
# condition) may be meant to vanish, and CMake checks what it yields.
if(CMAKE_VERSION VERSION_LESS 3.21 OR CMAKE_SCRIPT_MODE_FILE)
    return()
endif()
cmake_policy(VERSION 3.21) # for the functions below (IN_LIST), whatever the consumer's policies

# The error for one link of `target` (defined in `dir`) to the missing numaplace target `item`; `seen`: the
# numaplace targets imported in that directory and above it.
function(_numaplace_link_error target dir item seen)
    string(REGEX REPLACE "^numaplace::" "" component "${item}")
    set(there "")
    foreach(name core parallel omp mpi benchmark compiled numaplace)
        if(numaplace::${name} IN_LIST seen OR TARGET numaplace::${name})
            list(APPEND there numaplace::${name})
        endif()
    endforeach()
    if(there)
        list(JOIN there ", " there)
        set(there "but the numaplace targets there are ${there}")
    else()
        set(there "but no find_package(numaplace) is in that directory or above it")
    endif()
    get_property(optional_missing GLOBAL PROPERTY _NUMAPLACE_OPTIONAL_NOT_FOUND)
    if(component STREQUAL "numaplace")
        message(SEND_ERROR "numaplace::numaplace needs find_package(numaplace): target ${target} (in ${dir}) "
                           "links it, ${there}")
    elseif(NOT component MATCHES "^(core|parallel|omp|mpi|benchmark|compiled)$")
        message(SEND_ERROR "numaplace has no target ${item} (target ${target} in ${dir} links it): its "
                           "targets are numaplace::core, numaplace::parallel, numaplace::omp, numaplace::mpi, "
                           "numaplace::benchmark, numaplace::compiled and numaplace::numaplace")
    elseif(component IN_LIST optional_missing)
        message(SEND_ERROR "${item} needs find_package(numaplace COMPONENTS ${component}): target ${target} "
                           "(in ${dir}) links it, but ${component} was asked for as OPTIONAL_COMPONENTS and not "
                           "found (numaplace_${component}_FOUND is false): link it only if(TARGET ${item}), "
                           "or ask for COMPONENTS ${component} to be told what is missing")
    else()
        message(SEND_ERROR "${item} needs find_package(numaplace COMPONENTS ${component}): target ${target} "
                           "(in ${dir}) links it, ${there}")
    endif()
endfunction()

# Checks the targets of `dir` and of its subdirectories; `seen`: the numaplace targets imported above it.
function(_numaplace_check_directory dir seen)
    get_property(imported DIRECTORY "${dir}" PROPERTY IMPORTED_TARGETS)
    list(FILTER imported INCLUDE REGEX "^numaplace::")
    list(APPEND seen ${imported})
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
        set(reported "")
        foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
            get_property(links TARGET "${target}" PROPERTY ${property})
            set(elsewhere FALSE)
            foreach(item IN LISTS links)
                # Items between ::@(directory) and ::@ were linked from another directory (CMP0079), whose
                # targets they name: left to CMake.
                if(item MATCHES "^::@")
                    string(COMPARE NOTEQUAL "${item}" "::@" elsewhere)
                    continue()
                endif()
                string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
                # TARGET: defined in the top directory, GLOBAL or an ALIAS (numaplace as a subproject).
                if(NOT elsewhere AND item MATCHES "^numaplace::[^$<>]+$" AND NOT item IN_LIST seen
                   AND NOT TARGET "${item}" AND NOT item IN_LIST reported)
                    _numaplace_link_error("${target}" "${dir}" "${item}" "${seen}")
                    list(APPEND reported "${item}")
                endif()
            endforeach()
        endforeach()
    endforeach()
    get_property(subdirectories DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(subdirectory IN LISTS subdirectories)
        _numaplace_check_directory("${subdirectory}" "${seen}")
    endforeach()
endfunction()

function(_numaplace_check_links)
    _numaplace_check_directory("${CMAKE_SOURCE_DIR}" "")
endfunction()

get_property(_numaplace_link_check GLOBAL PROPERTY _NUMAPLACE_LINK_CHECK)
if(NOT _numaplace_link_check)
    set_property(GLOBAL PROPERTY _NUMAPLACE_LINK_CHECK TRUE)
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _numaplace_check_links)
endif()
unset(_numaplace_link_check)
