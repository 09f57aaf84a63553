# numaplace_readme_example(<README.md> <out.cpp>): writes the C++ block of README.md's "Compare placements
# in your Google Benchmark" example (between `<!-- example: benchmark -->` and `<!-- end of example -->`)
# to <out.cpp>, so the example is compiled exactly as the README prints it. Fails when the markers or the
# ```cpp fence are missing. Used by this consumer project and by tests/CMakeLists.txt (its guest run).
function(numaplace_readme_example readme out)
    file(READ "${readme}" text)
    string(FIND "${text}" "<!-- example: benchmark -->" begin)
    string(FIND "${text}" "<!-- end of example -->" end)
    if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
        message(FATAL_ERROR "numaplace_readme_example: no '<!-- example: benchmark -->' ... '<!-- end of example -->' in ${readme}")
    endif()
    math(EXPR length "${end} - ${begin}")
    string(SUBSTRING "${text}" ${begin} ${length} block)
    if(NOT block MATCHES "```cpp\n(.*)```")
        message(FATAL_ERROR "numaplace_readme_example: no ```cpp block between the markers in ${readme}")
    endif()
    file(CONFIGURE OUTPUT "${out}" CONTENT "${CMAKE_MATCH_1}" @ONLY)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${readme}")
endfunction()
