# Runs a command that must fail (exit code not 0) within SECONDS seconds, its output matching EXPECT.
# Inputs: COMMAND (a |-separated list), SECONDS, EXPECT (a regular expression).
string(REPLACE "|" ";" command "${COMMAND}")
string(TIMESTAMP start "%s")
execute_process(COMMAND ${command} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 120)
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
set(all "${out}${err}")
if(code STREQUAL "0")
  message(FATAL_ERROR "${COMMAND}: succeeded, expected a failure\n${all}")
endif()
if(elapsed GREATER SECONDS)
  message(FATAL_ERROR "${COMMAND}: ended after ${elapsed} s (${code}), more than ${SECONDS} s\n${all}")
endif()
if(NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "${COMMAND}: output does not match '${EXPECT}'\n${all}")
endif()
message(STATUS "failed as expected after ${elapsed} s (exit ${code}):\n${all}")
