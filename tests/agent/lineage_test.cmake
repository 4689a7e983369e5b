# scripts/lineage.py on the event log of a real run (examples/pbt's explore variant):
# the printed table agrees with the log, the PNGs are written, and malformed logs fail with
# exit status 2 and a message naming the file and line.
#   cmake -DSCRIPT=lineage.py -DLOG=events.jsonl -DOUT=dir -P lineage_test.cmake
set(python /usr/bin/python3)
file(REMOVE_RECURSE "${OUT}")
execute_process(COMMAND ${python} "${SCRIPT}" "${LOG}" --population 4 --out "${OUT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
message("${stdout}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lineage.py exited with ${rc}:\n${stderr}")
endif()
# The number of rebirths printed is the number of deaths in the log.
file(STRINGS "${LOG}" died REGEX "\"died\":true")
list(LENGTH died deaths)
if(deaths LESS 1)
  message(FATAL_ERROR "the log holds no death: nothing to test")
endif()
if(NOT stdout MATCHES "lineage: 4 agents, ${deaths} rebirths")
  message(FATAL_ERROR "lineage.py did not count the ${deaths} deaths of the log")
endif()
# One row per initial agent; the survivors (by first donor) and the weight shares each add up
# to the population: every final agent descends from someone, its shares sum to 1.
set(survivors 0)
set(share 0)
foreach(a 0 1 2 3)
  if(NOT stdout MATCHES "\n +${a} +([0-9]+) +[-0-9;]+ +([0-9]+)\\.([0-9]+)\n")
    message(FATAL_ERROR "no table row for ancestor ${a}")
  endif()
  math(EXPR survivors "${survivors} + ${CMAKE_MATCH_1}")
  math(EXPR share "${share} + ${CMAKE_MATCH_2} * 10000 + ${CMAKE_MATCH_3}")
endforeach()
if(NOT survivors EQUAL 4)
  message(FATAL_ERROR "survivors by first donor add up to ${survivors}, not 4")
endif()
if(share LESS 39990 OR share GREATER 40010)
  message(FATAL_ERROR "weight shares add up to ${share}/10000, not 4")
endif()
foreach(f lineage.png hyper.png survivors.csv)
  if(NOT EXISTS "${OUT}/${f}")
    message(FATAL_ERROR "lineage.py did not write ${f}")
  endif()
endforeach()

# Malformed logs: exit 2, the file and line named, no traceback.
file(WRITE "${OUT}/bad_json.jsonl" "{\"rank\":0,\"step\":1,\"died\":false}\n{not json\n")
file(WRITE "${OUT}/bad_field.jsonl" "{\"rank\":0,\"died\":true}\n")
file(WRITE "${OUT}/bad_donor.jsonl"
     "{\"rank\":0,\"step\":5,\"died\":true,\"generation\":1,\"version\":7,\"donors\":[{\"rank\":1,\"weight\":1}]}\n")
foreach(case "bad_json.jsonl:2: not a JSON object" "bad_field.jsonl:1: missing field 'step'"
             "bad_donor.jsonl:1: donors\\[0\\]: missing field 'version'")
  string(REGEX REPLACE ":.*" "" file "${case}")
  execute_process(COMMAND ${python} "${SCRIPT}" "${OUT}/${file}" --out "${OUT}/bad"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${file}: exit ${rc}, expected 2\n${stderr}")
  endif()
  if(NOT stderr MATCHES "^lineage.py: .*${case}")
    message(FATAL_ERROR "${file}: unexpected message: ${stderr}")
  endif()
  if(stderr MATCHES "Traceback")
    message(FATAL_ERROR "${file}: a traceback instead of a message: ${stderr}")
  endif()
endforeach()

# Mixing of two donors, by hand: agent 0 is reborn from agents 1 and 2 (weights 0.75, 0.25),
# then agent 2 from agent 0's new life (version 9 >= its first version 8): by first donor all
# three descend from agent 1; by weight agent 1 holds 1 + 0.75 + 0.75, agent 2 0.25 + 0.25.
file(WRITE "${OUT}/mix.jsonl"
     "{\"rank\":0,\"step\":10,\"died\":true,\"generation\":1,\"version\":8,\"published\":true,\"donors\":[{\"rank\":1,\"version\":5,\"weight\":0.75},{\"rank\":2,\"version\":6,\"weight\":0.25}],\"hyper\":{\"lr\":0.1},\"hyper_before\":{\"lr\":0.01}}\n"
     "{\"rank\":2,\"step\":20,\"died\":true,\"generation\":1,\"version\":21,\"donors\":[{\"rank\":0,\"version\":9,\"weight\":1}]}\n")
execute_process(COMMAND ${python} "${SCRIPT}" "${OUT}/mix.jsonl" --population 3 --out "${OUT}/mix"
                RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
message("${stdout}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mix.jsonl: exit ${rc}\n${stderr}")
endif()
foreach(row "\n +0 +0 +- +0\\.0000\n" "\n +1 +3 +0;1;2 +2\\.5000\n" "\n +2 +0 +- +0\\.5000\n")
  if(NOT stdout MATCHES "${row}")
    message(FATAL_ERROR "mix.jsonl: no row matching '${row}'")
  endif()
endforeach()
