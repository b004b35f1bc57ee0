# ctest helper (the bench.usage_* tests): runs PROG with ARGS (comma
# separated), and passes only if it exits 2 (a bad command line) with a
# message on stderr that names EXPECT (the flag at fault). Optional
# LAUNCHER: comma separated, put before PROG (mpiexec,-n,1).
#   cmake -DPROG=... -DARGS=-a,ring -DEXPECT=-a: [-DLAUNCHER=...] -P expect_usage_error.cmake
string(REPLACE "," ";" ARGS "${ARGS}")
string(REPLACE "," ";" LAUNCHER "${LAUNCHER}")
execute_process(COMMAND ${LAUNCHER} ${PROG} ${ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "${EXPECT}" at)
if(NOT rc EQUAL 2 OR at EQUAL -1)
  message(FATAL_ERROR "expected exit 2 and '${EXPECT}' on stderr; got exit ${rc}\nstderr:\n${err}\nstdout:\n${out}")
endif()
string(REGEX MATCH "[^\n]*" first "${err}")
message(STATUS "exit 2: ${first}")
