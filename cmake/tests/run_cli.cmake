# Runs one command-line test (ctest): cmake -DCMD=<arguments joined by @@> [-DRC=0] [-DSTDOUT=regex] [-DSTDERR=regex]
#   [-DSTDERR_LINES=n] [-DSTDOUT_EMPTY=ON] [-DJSON_CHECK=<python3 executable>] -P run_cli.cmake
# Fails unless the exit status is RC and the output matches. A command whose stdout starts with "SKIP: "
# (a wrapper that cannot set up its environment here) passes that line on and checks nothing: the test
# sets SKIP_REGULAR_EXPRESSION "SKIP: " and ctest reports it skipped. JSON_CHECK: stdout must be valid JSON
# (python3 -m json.tool) holding per-node total and free memory, distances, capabilities, degradations, tbb.
if(NOT DEFINED RC)
    set(RC 0)
endif()
string(REPLACE "@@" ";" CMD "${CMD}") # arguments joined by @@ (a ; would not survive add_test)
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(where "command: ${CMD}\nexit status: ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(out MATCHES "^SKIP: ")
    message(STATUS "${out}")
    return()
endif()
if(NOT rc STREQUAL RC)
    message(FATAL_ERROR "expected exit status ${RC}\n${where}")
endif()
if(DEFINED STDOUT AND NOT out MATCHES "${STDOUT}")
    message(FATAL_ERROR "stdout does not match '${STDOUT}'\n${where}")
endif()
if(DEFINED STDERR AND NOT err MATCHES "${STDERR}")
    message(FATAL_ERROR "stderr does not match '${STDERR}'\n${where}")
endif()
if(STDOUT_EMPTY AND NOT out STREQUAL "")
    message(FATAL_ERROR "stdout not empty\n${where}")
endif()
if(DEFINED STDERR_LINES)
    string(REGEX MATCHALL "\n" newlines "${err}")
    list(LENGTH newlines n)
    if(NOT n EQUAL STDERR_LINES)
        message(FATAL_ERROR "expected ${STDERR_LINES} line(s) on stderr, got ${n}\n${where}")
    endif()
endif()
if(JSON_CHECK)
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/cli-output.json "${out}")
    execute_process(COMMAND ${JSON_CHECK} -m json.tool ${CMAKE_CURRENT_BINARY_DIR}/cli-output.json
                    RESULT_VARIABLE jrc OUTPUT_QUIET ERROR_VARIABLE jerr)
    if(NOT jrc EQUAL 0)
        message(FATAL_ERROR "not valid JSON (python3 -m json.tool): ${jerr}\n${where}")
    endif()
    execute_process(COMMAND ${JSON_CHECK} -c [[
import json, sys
r = json.load(open(sys.argv[1]))
n = len(r["nodes"])
assert n >= 1 and n == r["capabilities"]["nodes"], "node count"
for node in r["nodes"]:
    assert 0 < node["memory_free_bytes"] <= node["memory_total_bytes"], node
    assert node["cores"] >= 0 and isinstance(node["cpus"], list), node
assert len(r["distances"]) == n and all(len(row) == n for row in r["distances"]), "distances"
assert all(r["distances"][i][i] == 10 for i in range(n)), "diagonal"
assert r["degradations"]["count"] >= len(r["degradations"]["messages"]), "degradations"
assert isinstance(r["tbb"]["interface_version"], int) and r["tbb"]["pinning"], "tbb"
assert r["tbb"]["tbbbind_loaded"] == (r["tbb"]["tbbbind_library"] != ""), "tbbbind"
]] ${CMAKE_CURRENT_BINARY_DIR}/cli-output.json RESULT_VARIABLE jrc ERROR_VARIABLE jerr)
    if(NOT jrc EQUAL 0)
        message(FATAL_ERROR "JSON content wrong: ${jerr}\n${where}")
    endif()
endif()
