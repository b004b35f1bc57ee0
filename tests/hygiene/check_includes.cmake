# What <chorus/chorus.hpp> costs every user: the headers it pulls in. Runs
# the compiler's preprocessor with -H on a file that includes it and fails
# when the include tree holds a file-I/O or locale header (<fstream>,
# <locale>, <iostream>), or when a chorus header itself includes a stream
# header (<sstream>, <istream>, <ostream>): the model-file reader lives in
# <chorus/model/file.hpp> and reads with <cstdio>. (libstdc++'s <chrono>
# pulls <sstream> in C++20 mode for its formatting; that one is the
# standard library's, not ours.)
#   cmake -DCXX=<compiler> -DINCLUDE=<include dir> -DSOURCE=<file> [-DFLAGS=...] -P check_includes.cmake
execute_process(
  COMMAND ${CXX} -std=c++20 ${FLAGS} -I${INCLUDE} -E -H -x c++ ${SOURCE}
  OUTPUT_QUIET
  ERROR_VARIABLE tree
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preprocessing ${SOURCE} failed:\n${tree}")
endif()
string(REPLACE "\n" ";" lines "${tree}")
set(bad "")
set(parent "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^(\\.+) (.*)$")
    continue()
  endif()
  set(depth "${CMAKE_MATCH_1}")
  set(file "${CMAKE_MATCH_2}")
  string(LENGTH "${depth}" d)
  set(parent_${d} "${file}")
  math(EXPR up "${d} - 1")
  set(from "${SOURCE}")
  if(up GREATER 0)
    set(from "${parent_${up}}")
  endif()
  if(file MATCHES "/(fstream|locale|iostream)$")
    string(APPEND bad "  ${file} (included by ${from})\n")
  elseif(file MATCHES "/(sstream|istream|ostream)$" AND from MATCHES "/chorus/")
    string(APPEND bad "  ${file} (included by ${from})\n")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "<chorus/chorus.hpp> pulls in stream or locale headers:\n${bad}")
endif()
message(STATUS "include tree of ${SOURCE}: no file-I/O or locale headers")
