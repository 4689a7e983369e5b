#!/usr/bin/env bash
# tests/slurm: slurm.elastic_soak. Runs inside `scripts/slurm.sh run`: submits
# scripts/slurm/elastic_soak.sbatch for the elastic soak's short form (4 members + 2 spares,
# its faults only, no baseline run) and checks what the suite's elastic_soak tests check under
# mpiexec: every slot finished in the last epoch, and every fault was answered (a spare took
# the slot, or a stopped process stepped on in it); prints the soak's report.
#   check_elastic_soak.sh EXE OUT SECONDS FAULTS KIND [standing]
# The job script picks the tasks' launcher from the MPI (PARAMWIN_SRUN_MPI, set by CTest) and
# KIND: srun -K0, or Open MPI's mpirun --enable-recovery when its tasks are SIGKILLed.
set -euo pipefail
check_name=check_elastic_soak
source "$(dirname "$0")/common.sh"
exe=$1 out=$2 seconds=$3 faults=$4 kind=$5
shift 5
rm -rf "$out"
mkdir -p "$out"
jid=$(PARAMWIN_SOAK_BASELINE=0 sbatch --parsable --ntasks=6 -o "$out/job-%j.out" "$slurm_lib/elastic_soak.sbatch" \
        "$exe" "$out" 4 "$seconds" "$faults" "$kind" "$@")
state=$(wait_job "$jid" $((2 * seconds + 90)))
show_job_output "$out/job-$jid.out"
[[ $state == COMPLETED ]] || fail "job $jid ended $state"
grep -Eq "^soak: epoch [0-9]+, 4 slots finished" "$out/faults.log" ||
  { show_job_output "$out/faults.log"; fail "not every slot finished (faults.log above)"; }
report=$("$python" "$slurm_lib/../elastic_soak.py" "$out/faults.log" "$out/faults.log" 4)
echo "$report"
grep -q "^| faults never answered by a join (slot empty at the end) | 0 |$" <<<"$report" ||
  fail "a fault was never answered"
# Faults scheduled while the process to inject them was stopped are skipped (SIGSTOPs): at
# least one injected, and as many as scheduled when none stops.
injected=$(sed -n 's/^| faults injected | \([0-9]*\) .*/\1/p' <<<"$report")
((injected >= 1)) || fail "no fault injected"
[[ $kind == sigstop || $kind == mixed || $injected == "$faults" ]] ||
  fail "$injected faults injected, $faults scheduled"
echo "check_elastic_soak: the soak under sbatch: $injected $kind faults answered," \
     "4 slots finished"
