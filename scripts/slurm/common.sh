# Shared by the Slurm check scripts (tests/slurm, scripts/slurm/kill_soak.sh): they run inside
# `scripts/slurm.sh run` (SLURM_CONF set), submit jobs and wait for them.

slurm_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PARAMWIN_SLURM_LIB=$slurm_lib  # where age_replacement.sbatch finds requeue.sh

fail() { echo "${check_name:-slurm-check}: FAILED: $*" >&2; exit 1; }

# job_field JOBID FIELD: one field of `scontrol show job` (JobState, Restarts, ExitCode...).
job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# wait_job JOBID SECONDS: waits until the job has ended for good (a requeued job goes back to
# PENDING and runs again); prints its final state. Fails after SECONDS, showing the job.
wait_job() {
  local jid=$1 limit=$2 state t0=$SECONDS
  while :; do
    state=$(job_field "$jid" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$state"
        return 0
        ;;
    esac
    if ((SECONDS - t0 >= limit)); then
      echo "${check_name:-slurm-check}: job $jid still $state after $limit s" >&2
      scontrol show job "$jid" >&2 || true
      return 1
    fi
    sleep 0.5
  done
}

# show_job_output FILE: the job's output, indented, for the test log.
show_job_output() {
  echo "---- $1"
  sed 's/^/  | /' "$1" 2>/dev/null || echo "  (no output file)"
}

# expect_finished FILE RANKS: the demo's last word ("age_replacement: all N ranks finished";
# hydra and srun may exit 0 for a rank that left without MPI_Finalize, so the status alone
# proves nothing).
expect_finished() {
  grep -q "^age_replacement: all $2 ranks finished$" "$1" ||
    fail "the job's output lacks 'age_replacement: all $2 ranks finished'"
}
