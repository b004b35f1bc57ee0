# The include graph of include/chorus (the `#include "..."` lines between
# chorus headers), checked against the layers the folders promise:
#
#   core  <  ops, plan, async  <  model  <  algo  <  exec  <  kernels
#         <  backend  <  comm  <  collectives  <  train  <  the top-level headers
#
# A header may include headers of its own layer or of layers to its left,
# never to its right: no algorithm in core/ops/model, no backend in algo/ or
# exec/, no collective call in a backend. backend/ holds the transports;
# they may use the step vocabulary of algo/ (schedule.hpp, policy.hpp) but
# no algorithm (the communicator in comm/ turns a policy into a schedule).
# And no cycle among the headers.
# Prints every header's line count, largest first (the layer it is in and
# what it includes), so the closing note of a change can quote it.
#   cmake -DINCLUDE=<include dir> -P check_include_graph.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT INCLUDE)
  message(FATAL_ERROR "usage: cmake -DINCLUDE=<include dir> -P check_include_graph.cmake")
endif()

set(_rank_core 0)
set(_rank_ops 1)
set(_rank_plan 1)
set(_rank_async 1)
set(_rank_model 2)
set(_rank_algo 3)
set(_rank_exec 4)
set(_rank_kernels 5)
set(_rank_backend 6)
set(_rank_comm 7)
set(_rank_collectives 8)
set(_rank_train 9)
set(_rank_top 10)

function(_layer_of file out)
  if(file MATCHES "^chorus/([a-z_]+)/")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${out} "top" PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE headers RELATIVE "${INCLUDE}" "${INCLUDE}/chorus/*.hpp" "${INCLUDE}/chorus/*.cuh")
list(SORT headers)
set(bad "")
set(sizes "")
foreach(h IN LISTS headers)
  _layer_of("${h}" layer)
  if(NOT DEFINED _rank_${layer})
    string(APPEND bad "  ${h}: folder '${layer}' has no layer (add it to check_include_graph.cmake)\n")
    continue()
  endif()
  # file(READ), not file(STRINGS): the latter splits at ';' and skips
  # lines it takes for binary (UTF-8 in comments).
  file(READ "${INCLUDE}/${h}" text)
  string(REGEX MATCHALL "\n" newlines "${text}")
  list(LENGTH newlines nlines)
  string(REGEX MATCHALL "\n[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"" incs "\n${text}")
  get_filename_component(dir "${h}" DIRECTORY)
  set(edges_${h} "")
  foreach(line IN LISTS incs)
    string(REGEX REPLACE "^\n[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*$" "\\1" rel "${line}")
    get_filename_component(target "${INCLUDE}/${dir}/${rel}" ABSOLUTE)
    file(RELATIVE_PATH target "${INCLUDE}" "${target}")
    if(NOT EXISTS "${INCLUDE}/${target}")
      string(APPEND bad "  ${h}: includes \"${rel}\", which does not exist\n")
      continue()
    endif()
    list(APPEND edges_${h} "${target}")
    _layer_of("${target}" tlayer)
    if(DEFINED _rank_${tlayer} AND _rank_${tlayer} GREATER _rank_${layer})
      string(APPEND bad "  ${h} (${layer}) includes ${target} (${tlayer}): a higher layer\n")
    endif()
    if(layer STREQUAL "backend" AND tlayer STREQUAL "algo" AND NOT target MATCHES "^chorus/algo/(schedule|policy)\\.hpp$")
      string(APPEND bad "  ${h} includes ${target}: a transport includes no algorithm\n")
    endif()
  endforeach()
  math(EXPR key "100000 + ${nlines}")
  list(APPEND sizes "${key} ${nlines} ${h}")
endforeach()

# Cycles: every header's reachable set, grown until it stops changing; a
# header that reaches itself is on a cycle.
foreach(h IN LISTS headers)
  set(reach "${edges_${h}}")
  set(frontier "${edges_${h}}")
  while(frontier)
    set(next "")
    foreach(f IN LISTS frontier)
      foreach(g IN LISTS edges_${f})
        if(NOT g IN_LIST reach)
          list(APPEND reach "${g}")
          list(APPEND next "${g}")
        endif()
      endforeach()
    endforeach()
    set(frontier "${next}")
  endwhile()
  if(h IN_LIST reach)
    string(APPEND bad "  ${h} includes itself through a cycle\n")
  endif()
endforeach()

list(SORT sizes ORDER DESCENDING)
set(report "")
foreach(entry IN LISTS sizes)
  string(REPLACE " " ";" parts "${entry}")
  list(GET parts 1 n)
  list(GET parts 2 h)
  string(APPEND report "  ${n}\t${h}\n")
endforeach()
list(LENGTH headers nh)
message(STATUS "include/chorus: ${nh} headers, largest first:\n${report}")
if(bad)
  message(FATAL_ERROR "include graph:\n${bad}")
endif()
message(STATUS "include graph: layered, no cycle")
