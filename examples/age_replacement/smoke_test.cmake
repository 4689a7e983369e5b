# Runs age_replacement briefly on 4 ranks and checks that it exits 0 and writes its CSVs.
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DEXE=... -DOUT=dir -P smoke_test.cmake
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 4 "${EXE}"
          --steps 120 --age 20..40 --report-every 40 --last 20 --no-plot --out "${OUT}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE stdout
  ERROR_VARIABLE stderr)
message("${stdout}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "age_replacement exited with ${rc}:\n${stderr}")
endif()
# hydra exits 0 when a rank exits 0 without MPI_Finalize: the exit status alone proves nothing.
if(NOT stdout MATCHES "age_replacement: all 4 ranks finished")
  message(FATAL_ERROR "age_replacement exited ${rc} but did not report that all 4 ranks finished:\n${stderr}")
endif()
foreach(f losses.csv deaths.csv summary.csv events.jsonl)
  if(NOT EXISTS "${OUT}/${f}")
    message(FATAL_ERROR "age_replacement did not write ${OUT}/${f}")
  endif()
endforeach()
file(STRINGS "${OUT}/losses.csv" loss_rows)
list(LENGTH loss_rows n)
# header + 2 runs x 4 agents x 120 steps
if(NOT n EQUAL 961)
  message(FATAL_ERROR "losses.csv has ${n} lines, expected 961")
endif()
file(STRINGS "${OUT}/deaths.csv" death_rows)
list(LENGTH death_rows d)
if(d LESS 2)
  message(FATAL_ERROR "deaths.csv records no death in 120 steps with ages 20..40")
endif()
if(NOT stdout MATCHES "replacement vs control")
  message(FATAL_ERROR "no comparison printed")
endif()
