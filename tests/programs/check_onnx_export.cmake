# scripts/export-onnx.py MODEL, run as a user runs it, writes a graph that tessera-train prices as the
# checked-in export (CHECKED_IN): the same "model:" line and modelled epoch. Prints "skipped: " (the
# test's SKIP_REGULAR_EXPRESSION) where /usr/bin/python3 lacks Debian's python3-torch and
# python3-torchvision (the script exits 77).
# Inputs: PROGRAM (tessera-train), SCRIPT, MODEL, CHECKED_IN, ARGS, WORK.
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND /usr/bin/python3 ${SCRIPT} ${MODEL} ${WORK}/${MODEL}.onnx RESULT_VARIABLE code
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(code EQUAL 77)
  message(STATUS "skipped: ${err}")
  return()
elseif(NOT code EQUAL 0)
  message(FATAL_ERROR "export-onnx.py ${MODEL}: exit ${code}\n${out}\n${err}")
endif()
separate_arguments(args UNIX_COMMAND "${ARGS}")
set(lines "")
foreach(file IN ITEMS ${WORK}/${MODEL}.onnx ${CHECKED_IN})
  execute_process(COMMAND ${PROGRAM} --dry-run --model ${file} ${args} RESULT_VARIABLE code OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "--model ${file}: exit ${code}\n${out}\n${err}")
  endif()
  string(REGEX MATCH "\\): [^\n]*" model_line "${out}")
  string(REGEX MATCH "modelled epoch: [^\n]*" epoch_line "${out}")
  list(APPEND lines "${model_line} | ${epoch_line}")
endforeach()
list(GET lines 0 fresh)
list(GET lines 1 checked)
message(STATUS "exported now: ${fresh}\nchecked in:   ${checked}")
if(NOT fresh STREQUAL checked)
  message(FATAL_ERROR "the fresh export prices differently from ${CHECKED_IN}")
endif()
