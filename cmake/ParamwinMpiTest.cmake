# paramwin_add_mpi_test(<name> SOURCES <src...> [RANKS 1 2 4] [TIMEOUT s] [LIBS ...] [LABELS ...])
# Builds one GoogleTest executable with paramwin's MPI-aware main and registers it in CTest
# once per rank count as <name>.np<N>, each with a timeout.
include_guard(GLOBAL)
function(paramwin_add_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;RANKS;LIBS;LABELS" ${ARGN})
  if(NOT ARG_RANKS)
    set(ARG_RANKS 1 2 4)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE paramwin_test_mpi_main ${ARG_LIBS})
  paramwin_warnings(${name})
  foreach(np IN LISTS ARG_RANKS)
    add_test(NAME ${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}.np${np} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                         LABELS "mpi;np${np};${ARG_LABELS}" PROCESSORS ${np})
  endforeach()
endfunction()
