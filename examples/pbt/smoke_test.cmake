# Runs pbt on 4 ranks (the full default run: 3 variants x 800 steps) and checks that it exits
# 0, says that every rank finished, prints the comparison and writes its outputs.
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DEXE=... -DOUT=dir -P smoke_test.cmake
file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} 4 "${EXE}" --out "${OUT}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE stdout
  ERROR_VARIABLE stderr)
message("${stdout}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pbt exited with ${rc}:\n${stderr}")
endif()
# hydra exits 0 when a rank exits 0 without MPI_Finalize: the exit status alone proves nothing.
if(NOT stdout MATCHES "pbt: all 4 ranks finished")
  message(FATAL_ERROR "pbt exited ${rc} but did not report that all 4 ranks finished:\n${stderr}")
endif()
foreach(v control weights explore)
  if(NOT stdout MATCHES "\n  ${v} +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x")
    message(FATAL_ERROR "no table row for ${v}")
  endif()
endforeach()
if(NOT stdout MATCHES "\n  control +0 ")
  message(FATAL_ERROR "the control run had deaths")
endif()
foreach(f losses.csv events.weights.jsonl events.explore.jsonl losses.png lineage/lineage.png
          lineage/hyper.png lineage/survivors.csv)
  if(NOT EXISTS "${OUT}/${f}")
    message(FATAL_ERROR "pbt did not write ${OUT}/${f}")
  endif()
endforeach()
file(STRINGS "${OUT}/losses.csv" rows)
list(LENGTH rows n)
if(NOT n EQUAL 9601)  # header + 3 variants x 4 agents x 800 steps
  message(FATAL_ERROR "losses.csv has ${n} lines, expected 9601")
endif()
