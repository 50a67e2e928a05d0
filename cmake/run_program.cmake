# Runs a program and checks how it ended. Inputs: PROGRAM, ARGS (a ;-list), EXPECT_CODE (default 0),
# EXPECT (a regular expression its output must match, optional), REJECT (one it must not match).
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 600)
if(NOT DEFINED EXPECT_CODE)
  set(EXPECT_CODE 0)
endif()
set(all "${out}${err}")
if(NOT code STREQUAL EXPECT_CODE)
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: exit code ${code}, expected ${EXPECT_CODE}\n${all}")
endif()
if(DEFINED EXPECT AND NOT all MATCHES "${EXPECT}")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: output does not match '${EXPECT}'\n${all}")
endif()
if(DEFINED REJECT AND all MATCHES "${REJECT}")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: output matches '${REJECT}'\n${all}")
endif()
message(STATUS "${all}")
