# Runs abort_on_unwind (tests/abort_on_unwind.cpp) and expects the job to end by itself,
# quickly, with a non-zero exit status and rank 0's diagnostic naming the window.
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=... -DNP=... -DEXE=... [-DARGS=...] -P abort_on_unwind_test.cmake
string(TIMESTAMP start "%s")
execute_process(COMMAND ${MPIEXEC} ${NUMPROC_FLAG} ${NP} ${EXE} ${ARGS} TIMEOUT 60
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}\n${err}")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job did not end within 60 s (it should abort):\n${all}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; it should have been aborted:\n${all}")
endif()
if(all MATCHES "was not aborted")
  message(FATAL_ERROR "a rank went on past the window:\n${all}")
endif()
string(CONCAT expected "paramwin: rank 0 of ${NP} \\(world rank 0\\) leaves window 'doomed' "
       "created at [^ ]*abort_on_unwind.cpp:[0-9]+:[0-9]+ with an exception in flight \\(its "
       "destructor runs during stack unwinding\\); abort_on_unwind is set")
if(NOT all MATCHES "${expected}")
  message(FATAL_ERROR "rank 0's diagnostic is missing (exit status ${rc}; expected /${expected}/):\n${all}")
endif()
message(STATUS "aborted with exit status ${rc} after ${seconds} s, as expected:\n${all}")
