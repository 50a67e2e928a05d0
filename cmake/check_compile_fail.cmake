# Compiles SOURCE twice (see tessera_add_compile_fail_tests). Inputs: CXX, SOURCE, INCLUDE.
file(STRINGS ${SOURCE} expect_lines REGEX "^// expect: ")
list(LENGTH expect_lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "${SOURCE}: needs exactly one '// expect: <text>' line, found ${n}")
endif()
string(REGEX REPLACE "^// expect: " "" expected "${expect_lines}")

set(flags -std=c++20 -fsyntax-only -I${INCLUDE})
execute_process(COMMAND ${CXX} ${flags} -DTESSERA_FAIL=0 ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: the valid variant (TESSERA_FAIL=0) does not compile:\n${out}")
endif()
execute_process(COMMAND ${CXX} ${flags} -DTESSERA_FAIL=1 ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE}: compiled with TESSERA_FAIL=1, expected the error: ${expected}")
endif()
string(FIND "${out}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${SOURCE}: failed, but without the expected text\n  ${expected}\ncompiler output:\n${out}")
endif()
message(STATUS "${SOURCE}: fails as intended: ${expected}")
