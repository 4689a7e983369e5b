#!/usr/bin/env bash
# tests/slurm: slurm.cluster. Runs inside `scripts/slurm.sh run`: the node is idle, srun runs
# a 2-task step, and a batch job runs to COMPLETED with its output where asked.
set -euo pipefail
check_name=check_cluster
source "$(dirname "$0")/common.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sinfo -h -N -o '%N %T' | grep -q ' idle$' || fail "no idle node: $(sinfo -N)"
[[ $(srun -n 2 hostname | wc -l) -eq 2 ]] || fail "srun -n 2 hostname did not print 2 lines"
jid=$(sbatch --parsable -n 2 -o "$work/job-%j.out" \
             --wrap 'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"; srun hostname')
state=$(wait_job "$jid" 60)
show_job_output "$work/job-$jid.out"
[[ $state == COMPLETED ]] || fail "batch job $jid ended $state"
grep -q "^job $jid on " "$work/job-$jid.out" || fail "the batch job's output is missing"
[[ $(grep -vc '^job ' "$work/job-$jid.out") -eq 2 ]] || fail "the job's srun did not run 2 tasks"
echo "check_cluster: cluster up, srun and sbatch work (job $jid $state)"
