# Compiles every header under INCLUDE/tessera/LAYER on its own, so each includes what it uses.
# Inputs: CXX, INCLUDE, LAYER, FLAGS (a ;-list).
file(GLOB_RECURSE headers ${INCLUDE}/tessera/${LAYER}/*.hpp)
# tessera::dist's headers need MPI's (MPI_INCLUDES: its include directories, |-separated); without
# MPI they are not part of the library and are skipped.
set(mpi_flags "")
if(MPI_INCLUDES)
  string(REPLACE "|" ";" mpi_dirs "${MPI_INCLUDES}")
  foreach(dir IN LISTS mpi_dirs)
    list(APPEND mpi_flags -I${dir})
  endforeach()
else()
  list(FILTER headers EXCLUDE REGEX "/tessera/dist(/|\\.hpp$)")
endif()
set(failed "")
foreach(header IN LISTS headers)
  execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only ${FLAGS} ${mpi_flags} -I${INCLUDE} -include ${header} -x c++ /dev/null
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(APPEND failed "\n${header}:\n${out}")
  endif()
endforeach()
list(LENGTH headers n)
if(failed)
  message(FATAL_ERROR "headers that do not compile on their own:${failed}")
endif()
message(STATUS "${n} headers of ${LAYER} compile on their own")
