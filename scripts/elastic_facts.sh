#!/usr/bin/env bash
# What each MPI and launcher on this machine does when one rank's process ends
# (docs/elastic.md, "What the MPIs allow"). Builds tests/reliability/mpi_death_facts.cpp with
# MPICH's and Open MPI's compiler wrappers and runs 4 ranks per case, each under a 20 s
# timeout; prints one line per case: what the launcher did, and what the survivors reported.
# --spawn [JOBS]: instead, whether Open MPI's MPI_Comm_spawn hangs once processes of an
# earlier spawn have ended (tests/reliability/mpi_spawn_facts.cpp): JOBS jobs (default
# 30) of 3 ranks that spawn 3 processes 5 times, for each of "stay", "one" and "all"; prints
# per case the spawns made and the jobs that hung in a spawn (no "done" within 20 s).
# --spawn-fail [JOBS]: whether an Open MPI job outlives a spawn that fails (on a host that
# does not exist) and a spawn after it, JOBS jobs (default 3) of 3 ranks, with and without
# --enable-recovery.
#   scripts/elastic_facts.sh [--spawn [JOBS] | --spawn-fail [JOBS]]
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [[ ${1:-} == --spawn || ${1:-} == --spawn-fail ]]; then
  mpicxx.openmpi -O1 -o "$work/spawn_facts" tests/reliability/mpi_spawn_facts.cpp || exit 1
fi

if [[ ${1:-} == --spawn-fail ]]; then
  jobs=${2:-3}
  for recovery in "" --enable-recovery; do
    failed=0 alive=0 again=0 ended=0
    for ((j = 0; j < jobs; ++j)); do
      out=$(timeout -k 2 30 mpirun.openmpi $recovery -n 3 "$work/spawn_facts" fail 3 2>&1)
      rc=$?
      grep -q '^failed' <<<"$out" && failed=$((failed + 1))
      grep -q '^alive' <<<"$out" && alive=$((alive + 1))
      grep -q '^spawned again' <<<"$out" && again=$((again + 1))
      [ "$rc" -ne 0 ] && ! grep -q '^spawned again\|^failed again' <<<"$out" && ended=$((ended + 1))
      pkill -9 -f "$work/spawn_facts" 2>/dev/null
    done
    printf 'Open MPI%s, a spawn on a missing host: failed in %d of %d jobs, the job alive 3 s later in %d; a second spawn made in %d, the job ended by it (mpirun status != 0) in %d\n' \
      "${recovery:+ $recovery}" "$failed" "$jobs" "$alive" "$again" "$ended"
  done
  exit 0
fi
if [[ ${1:-} == --spawn ]]; then
  jobs=${2:-30}
  # The UCX PML (as the spawn tests): over this VM's loopback only with every transport allowed.
  export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any
  for mode in stay one all; do
    made=0
    hung=0
    for ((j = 0; j < jobs; ++j)); do
      out=$(timeout -k 2 20 mpirun.openmpi --enable-recovery --mca pml ucx -n 3 \
        "$work/spawn_facts" "$mode" 5 2>&1)
      made=$((made + $(grep -c '^spawned' <<<"$out")))
      grep -q '^done' <<<"$out" || hung=$((hung + 1))
      pkill -9 -f "$work/spawn_facts" 2>/dev/null
    done
    printf 'Open MPI --enable-recovery, spawned processes end: %-4s spawns made %3d, jobs hung %2d of %d\n' \
      "$mode" "$made" "$hung" "$jobs"
  done
  exit 0
fi
src=tests/reliability/mpi_death_facts.cpp
mpicxx.mpich -O1 -o "$work/facts_mpich" "$src" || exit 1
mpicxx.openmpi -O1 -o "$work/facts_ompi" "$src" || exit 1
export OMPI_MCA_btl=self,vader OMPI_MCA_hwloc_base_binding_policy=none

run_case() {  # label, command...
  local label=$1
  shift
  local out rc
  out=$(timeout 20 "$@" 2>&1)
  rc=$?
  local alive p2p group seg fin
  alive=$(grep -c "alive 2 s after" <<<"$out")
  p2p=$(grep -c "point to point works" <<<"$out")
  group=$(grep "create_group over the survivors works" <<<"$out" | sed -E 's/.* in ([0-9.]+) ms.*/\1/' |
    sort -n | tail -1)
  seg=$(grep -c "segment is readable" <<<"$out")
  fin=$(grep -c "MPI_Finalize returned" <<<"$out")
  local launcher="exit $rc"
  [[ $rc == 124 ]] && launcher="hung (timeout 20 s)"
  printf '%-52s launcher: %-20s survivors alive: %s/3, p2p: %s/3, create_group: %s ms, dead segment readable: %s/3' \
    "$label" "$launcher" "$alive" "$p2p" "${group:-fails}" "$seg"
  [[ "$*" == *finalize* ]] && printf ', MPI_Finalize returned: %s/3' "$fin"
  printf '\n'
}

for how in kill exit exit0; do
  run_case "MPICH, $how" mpiexec.mpich -n 4 "$work/facts_mpich" "$how"
  run_case "MPICH -disable-auto-cleanup, $how" mpiexec.mpich -disable-auto-cleanup -n 4 "$work/facts_mpich" "$how"
  run_case "Open MPI, $how" mpirun.openmpi -n 4 "$work/facts_ompi" "$how"
  run_case "Open MPI --enable-recovery, $how" mpirun.openmpi --enable-recovery -n 4 "$work/facts_ompi" "$how"
done
run_case "MPICH -disable-auto-cleanup, exit, then finalize" mpiexec.mpich -disable-auto-cleanup -n 4 "$work/facts_mpich" exit finalize
run_case "Open MPI --enable-recovery, kill, then finalize" mpirun.openmpi --enable-recovery -n 4 "$work/facts_ompi" kill finalize
