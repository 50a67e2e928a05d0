# Compiles SOURCE (tests/kernels/extern_kernels_probe.cpp) at -O2 with TESSERA_EXTERN_KERNELS and
# reads its symbols with NM: every kernel it calls must be left undefined (U), called in the one copy
# that tessera/kernels/instances.hpp's explicit instantiation compiles, and none defined in the object.
# Inputs: CXX, NM, SOURCE, INCLUDE, WORK (a scratch folder).
set(object ${WORK}/extern_kernels_probe.o)
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${CXX} -std=c++20 -O2 -DTESSERA_EXTERN_KERNELS -I${INCLUDE} -c ${SOURCE} -o ${object}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} does not compile with TESSERA_EXTERN_KERNELS:\n${out}")
endif()
execute_process(COMMAND ${NM} -C ${object} RESULT_VARIABLE rc OUTPUT_VARIABLE symbols ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${object} failed: ${err}")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
foreach(kernel IN ITEMS "conv2d_forward<float, float, float, float>"
                        "conv2d_backward<float, tessera::tensor::half, tessera::tensor::half, tessera::tensor::half, tessera::tensor::half>"
                        "batch_norm_forward_eval<float, tessera::tensor::half, float, tessera::tensor::half>"
                        "linear_forward<double, double, double, double>")
  set(undefined OFF)
  foreach(line IN LISTS lines)
    string(FIND "${line}" "tessera::kernels::${kernel}(" at)
    if(at EQUAL -1)
      continue()
    endif()
    if(line MATCHES "^ +U ")
      set(undefined ON)
    else()
      message(FATAL_ERROR "the object defines tessera::kernels::${kernel} although TESSERA_EXTERN_KERNELS declares it extern:\n${line}")
    endif()
  endforeach()
  if(NOT undefined)
    message(FATAL_ERROR "the object neither calls nor defines tessera::kernels::${kernel} (inlined?)")
  endif()
endforeach()
message(STATUS "TESSERA_EXTERN_KERNELS leaves the four probed kernels to their explicit instantiation")
