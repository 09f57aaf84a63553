# The code blocks of the docs, compiled as they are printed. A block is marked in the markdown by the
# comment lines around it:
#   <!-- example: NAME -->            a program (the default kind; e.g. docs/guide.md's "benchmark")
#   <!-- example: NAME fragment -->   a fragment of a program: statements, and #include lines
#   ```cpp
#   ...
#   ```
#   <!-- end of example -->
#
# numaplace_readme_example(<file.md> <out.cpp> [NAME]): writes the ```cpp block of example NAME (default
# "benchmark": docs/guide.md's "Compare placements in your Google Benchmark") to <out.cpp>. Used by the
# consumer project in this directory and by tests/CMakeLists.txt (its guest run).
# numaplace_readme_fragment(<file.md> NAME <out-head> <out-body>): example NAME's #include lines to
# <out-head> (for file scope) and the rest to <out-body>, for a harness to #include inside a function
# (tests/stress/test_readme.cpp). Both fail when the markers or the ```cpp fence are missing, and re-run
# CMake when the markdown file changes, so a changed block changes the test.
function(_numaplace_doc_block file name kind out_var)
    file(READ "${file}" text)
    set(marker "<!-- example: ${name} -->")
    if(kind STREQUAL "fragment")
        set(marker "<!-- example: ${name} fragment -->")
    endif()
    string(FIND "${text}" "${marker}" begin)
    if(begin EQUAL -1)
        message(FATAL_ERROR "numaplace_readme_example: no '${marker}' ... '<!-- end of example -->' in ${file}")
    endif()
    string(SUBSTRING "${text}" ${begin} -1 rest)
    string(FIND "${rest}" "<!-- end of example -->" end)
    if(end EQUAL -1)
        message(FATAL_ERROR "numaplace_readme_example: no '<!-- end of example -->' after '${marker}' in ${file}")
    endif()
    string(SUBSTRING "${rest}" 0 ${end} block)
    if(NOT block MATCHES "```cpp\n(.*)```")
        message(FATAL_ERROR "numaplace_readme_example: no ```cpp block between the markers of '${name}' in ${file}")
    endif()
    set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${file}")
endfunction()

function(numaplace_readme_example readme out)
    set(name benchmark)
    if(ARGC GREATER 2)
        set(name "${ARGV2}")
    endif()
    _numaplace_doc_block("${readme}" "${name}" program code)
    file(CONFIGURE OUTPUT "${out}" CONTENT "${code}" @ONLY)
endfunction()

function(numaplace_readme_fragment file name out_head out_body)
    _numaplace_doc_block("${file}" "${name}" fragment code)
    string(REGEX MATCHALL "#include[^\n]*" includes "${code}")
    string(JOIN "\n" head ${includes})
    string(REGEX REPLACE "#include[^\n]*\n" "" body "${code}")
    file(CONFIGURE OUTPUT "${out_head}" CONTENT "// ${file}, example ${name}: its #include lines\n${head}\n" @ONLY)
    file(CONFIGURE OUTPUT "${out_body}" CONTENT "// ${file}, example ${name}: the fragment\n${body}" @ONLY)
endfunction()
