# Runs COMMAND (a ;-list) and passes only when it exits non-zero and a
# surviving rank printed the chorus error it caught.
cmake_policy(SET CMP0007 NEW) # list(FILTER) below drops the empty elements
list(FILTER COMMAND EXCLUDE REGEX "^$")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
message("${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although a rank was killed")
endif()
if(NOT out MATCHES "rank [0-9] caught after [0-9.]+ s \\(deadline 20 s\\): chorus::all_reduce: ")
  message(FATAL_ERROR "no surviving rank reported a chorus error")
endif()
message("ok: exit status ${rc} and a chorus error on a surviving rank")
