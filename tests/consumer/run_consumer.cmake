# cmake -P helper for the consumer tests (see CMakeLists.txt here).
#
#   MODE=install : rm -rf PREFIX, then cmake --install CHORUS_BINARY_DIR --prefix PREFIX
#   MODE=build   : rm -rf BINARY_DIR, configure SOURCE_DIR there with GENERATOR,
#                  MAKE_PROGRAM, CXX_COMPILER, BUILD_TYPE and OPTIONS ('|'-separated,
#                  since ';' does not survive add_test), build, run ./consumer.
#                  With EXPECT_PREFIX set, also check that chorus_DIR lies in it.
cmake_minimum_required(VERSION 3.25)

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "run: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: command failed (${rc}): ${shown}")
  endif()
endfunction()

if(BUILD_TYPE)
  set(config_args --config "${BUILD_TYPE}")
endif()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE "${PREFIX}")
  run("${CMAKE_COMMAND}" --install "${CHORUS_BINARY_DIR}" --prefix "${PREFIX}" ${config_args})
  if(NOT EXISTS "${PREFIX}/include/chorus/chorus.hpp")
    message(FATAL_ERROR "consumer test: ${PREFIX}/include/chorus/chorus.hpp was not installed")
  endif()
  return()
endif()

if(NOT MODE STREQUAL "build")
  message(FATAL_ERROR "run_consumer.cmake: MODE must be install or build")
endif()

string(REPLACE "|" ";" options "${OPTIONS}")
set(configure_args -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -G "${GENERATOR}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()

file(REMOVE_RECURSE "${BINARY_DIR}")
run("${CMAKE_COMMAND}" ${configure_args} ${options})

if(EXPECT_PREFIX)
  file(STRINGS "${BINARY_DIR}/CMakeCache.txt" dir_line REGEX "^chorus_DIR:")
  string(REGEX REPLACE "^chorus_DIR:[A-Z]+=" "" found_dir "${dir_line}")
  file(REAL_PATH "${EXPECT_PREFIX}" expect_real)
  file(REAL_PATH "${found_dir}" found_real)
  string(FIND "${found_real}" "${expect_real}/" pos)
  if(NOT pos EQUAL 0)
    message(FATAL_ERROR "consumer test: found chorus in '${found_dir}', not under '${EXPECT_PREFIX}'")
  endif()
endif()

run("${CMAKE_COMMAND}" --build "${BINARY_DIR}" ${config_args})

set(exe "${BINARY_DIR}/consumer")
if(BUILD_TYPE AND EXISTS "${BINARY_DIR}/${BUILD_TYPE}/consumer")  # multi-config
  set(exe "${BINARY_DIR}/${BUILD_TYPE}/consumer")
endif()
run("${exe}")
