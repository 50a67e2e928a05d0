# A run stopped after STOP host calls and resumed from its checkpoint ends with the same weights as
# the run that was never interrupted: the same test loss and accuracy, digit for digit.
# Inputs: PROGRAM, ARGS (the common flags), STOP, DIR (scratch), RESUME_ARGS (optional: flags of the
# resumed run alone, which must change no bit of the weights).
separate_arguments(args UNIX_COMMAND "${ARGS}")
separate_arguments(resume_args UNIX_COMMAND "${RESUME_ARGS}")
file(MAKE_DIRECTORY ${DIR})
file(REMOVE ${DIR}/whole.json ${DIR}/resumed.json ${DIR}/run.ckpt)
foreach(run IN ITEMS "--metrics-json;${DIR}/whole.json"
                     "--stop-after;${STOP};--checkpoint;${DIR}/run.ckpt"
                     "--resume;${DIR}/run.ckpt;--metrics-json;${DIR}/resumed.json;${resume_args}")
  execute_process(COMMAND ${PROGRAM} ${args} ${run} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out
                  TIMEOUT 600)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} ${ARGS} ${run}: exit code ${code}\n${out}")
  endif()
endforeach()
file(READ ${DIR}/whole.json whole)
file(READ ${DIR}/resumed.json resumed)
string(JSON whole_loss GET "${whole}" test_loss)
string(JSON resumed_loss GET "${resumed}" test_loss)
string(JSON whole_accuracy GET "${whole}" test_accuracy)
string(JSON resumed_accuracy GET "${resumed}" test_accuracy)
if(NOT whole_loss STREQUAL resumed_loss OR NOT whole_accuracy STREQUAL resumed_accuracy)
  message(FATAL_ERROR "resumed: test loss ${resumed_loss}, accuracy ${resumed_accuracy}; "
                      "uninterrupted: ${whole_loss}, ${whole_accuracy}")
endif()
message(STATUS "resumed and uninterrupted runs: test loss ${whole_loss}, accuracy ${whole_accuracy}")
