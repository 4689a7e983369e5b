#!/usr/bin/env bash
# tests/slurm: slurm.demo and slurm.demo_two_hosts. Runs inside `scripts/slurm.sh run`:
# submits scripts/slurm/age_replacement.sbatch on 4 ranks, waits for it and checks that every
# rank finished and the demo wrote its CSVs (deaths included).
#   check_demo.sh [--two-hosts] EXE OUT
# --two-hosts: the job asks for 2 nodes x 2 ranks and must get hostA and hostB.
set -euo pipefail
check_name=check_demo
source "$(dirname "$0")/common.sh"
two_hosts=0
if [[ ${1:-} == --two-hosts ]]; then two_hosts=1; shift; fi
exe=$1 out=$2
rm -rf "$out"
mkdir -p "$out"
place=(--ntasks=4)
((two_hosts)) && place=(--nodes=2 --ntasks-per-node=2)
jid=$(sbatch --parsable "${place[@]}" -o "$out/job-%j.out" "$slurm_lib/age_replacement.sbatch" \
             "$exe" "$out" --steps 200 --age 20..40 --report-every 50)
state=$(wait_job "$jid" 150)
log=$out/job-$jid.out
show_job_output "$log"
[[ $state == COMPLETED ]] || fail "job $jid ended $state"
expect_finished "$log" 4
for f in losses.csv deaths.csv summary.csv events.jsonl; do
  [[ -s $out/$f ]] || fail "$out/$f missing or empty"
done
deaths=$(($(wc -l <"$out/deaths.csv") - 1))
((deaths >= 1)) || fail "no death recorded in 200 steps with ages 20..40"
if ((two_hosts)); then
  grep -q "on hostA,hostB (2 nodes, tasks per node 2(x2))" "$log" ||
    fail "the job did not get 2 ranks on each of hostA and hostB"
  echo "check_demo: age_replacement under sbatch across hostA and hostB: $deaths deaths"
else
  echo "check_demo: age_replacement under sbatch on 4 ranks: $deaths deaths"
fi
