# paramwin_add_mpi_test(<name> SOURCES <src...> [RANKS 1 2 4] [TIMEOUT s] [LIBS ...] [LABELS ...])
# Builds one GoogleTest executable with paramwin's MPI-aware main and registers it in CTest
# once per rank count as <name>.np<N>, each with a timeout.
include_guard(GLOBAL)

# PARAMWIN_MPI_TEST_ENVIRONMENT: what the chosen MPI's launcher needs on this kind of machine,
# given to every test as its ENVIRONMENT (never exported globally) by
# paramwin_mpi_test_environment(). Empty for MPICH. For Open MPI (docs/rma-semantics.md):
# - OMPI_MCA_rmaps_base_oversubscribe=1 is what `mpiexec --oversubscribe` sets: more ranks than
#   cores (4 ranks on 2 cores) are refused without it. As an environment variable it reaches
#   every mpiexec a test starts, including those inside scripts (install_consumer/run.sh, the
#   examples' smoke tests), without editing each command line.
# - OMPI_MCA_hwloc_base_binding_policy=none: Open MPI binds each rank to a core by default
#   (when not oversubscribed), so two 1-rank tests run by `ctest -j 2` would both be pinned to
#   core 0 while core 1 idles; MPICH's Hydra does not bind by default either.
# - OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1: mpiexec refuses to start as root
#   without both (CI and containers run as root); they change nothing for other users.
# - OMPI_MCA_pml_ucx_tls=any, OMPI_MCA_pml_ucx_devices=any, OMPI_MCA_osc=ucx,sm: RMA through
#   UCX (osc/ucx; osc/sm for the shared-memory windows). Open MPI 4.1 enables its UCX PML only
#   on InfiniBand-class devices by default, and then puts MPI_Win_create on osc/rdma, which
#   names its node-local backing file after the communicator id: two disjoint communicators
#   with the same id (the halves of an MPI_Comm_split) then share one file on a node, and window
#   creation fails (MPI_ERR_WIN), reads other ranks' memory or hangs (Open MPI issue #9492,
#   fixed in 5.0). osc/rdma also cannot serve a one-process communicator, and osc/pt2pt refuses
#   MPI_THREAD_MULTIPLE. docs/rma-semantics.md ("Open MPI") says the same to users.
# - OMPI_MCA_btl=self,vader: the ranks of a test are all on this node, so only the loopback and
#   shared-memory transports are wanted; it keeps the openib and ofi modules from probing for
#   network hardware at every start (slow, and warnings on machines without it).
set(PARAMWIN_MPI_TEST_ENVIRONMENT "")
if(PARAMWIN_MPI STREQUAL "OpenMPI")
  set(PARAMWIN_MPI_TEST_ENVIRONMENT
      OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml_ucx_tls=any
      OMPI_MCA_pml_ucx_devices=any OMPI_MCA_osc=ucx,sm OMPI_MCA_btl=self,vader)
endif()

# paramwin_mpi_test_environment(): appends PARAMWIN_MPI_TEST_ENVIRONMENT to the ENVIRONMENT of
# every test registered so far in the calling directory. Call it at the end of each
# CMakeLists.txt that registers tests.
function(paramwin_mpi_test_environment)
  if(NOT PARAMWIN_MPI_TEST_ENVIRONMENT)
    return()
  endif()
  get_property(tests DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY TESTS)
  foreach(test IN LISTS tests)
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${PARAMWIN_MPI_TEST_ENVIRONMENT})
  endforeach()
endfunction()

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
