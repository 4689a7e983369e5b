# Requeue-and-resume for paramwin batch jobs (sourced by scripts/slurm/age_replacement.sbatch;
# docs/cluster.md, "Slurm"). A job submitted with --requeue runs its program through
# requeue_run; when the run fails (a rank killed, a node lost: srun --kill-on-bad-exit ends
# the others) or the job is told its time limit is near (sbatch --signal=B:USR1@SECONDS), the
# job puts itself back in the queue with `scontrol requeue` and, started again, resumes from
# its newest checkpoint. At most PARAMWIN_MAX_REQUEUES requeues (default 3; Slurm counts them
# in SLURM_RESTART_COUNT); after that a failure fails the job.
#
# Slurm holds a requeued job back for the step credential lifetime (AuthInfo cred_expire,
# default 120 s; scripts/slurm.sh sets 10 s) before it can start again.

# has_checkpoint DIR: DIR holds a complete checkpoint (*.h5; a write in progress has another
# name until it is complete, docs/checkpoints.md).
has_checkpoint() {
  compgen -G "$1/*.h5" >/dev/null
}

# requeue_self REASON: requeue this job (it is ended by Slurm) or, past the limit, fail.
requeue_self() {
  local restarts=${SLURM_RESTART_COUNT:-0} max=${PARAMWIN_MAX_REQUEUES:-3}
  if ((restarts >= max)); then
    echo "requeue: $1; not requeued: already restarted $restarts times (PARAMWIN_MAX_REQUEUES=$max)" >&2
    exit 1
  fi
  echo "requeue: $1; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of at most $max)" >&2
  scontrol requeue "$SLURM_JOB_ID" || { echo "requeue: scontrol requeue failed" >&2; exit 1; }
  # Slurm now ends this batch script and its steps; wait for it rather than exit with a status
  # that could be taken for the job's.
  sleep 600
  exit 1
}

# requeue_run CMD...: runs CMD (an srun line); requeues the job when it fails or when USR1
# (the time-limit warning) arrives; returns CMD's status 0 otherwise.
requeue_run() {
  local rc=0 pid
  "$@" &
  pid=$!
  # A trap runs only when a wait returns: run CMD in the background so USR1 is seen at once.
  trap 'trap - USR1; kill -TERM "$pid" 2>/dev/null; requeue_self "USR1 (time limit near)"' USR1
  wait "$pid" || rc=$?
  trap - USR1
  ((rc == 0)) || requeue_self "the run failed with status $rc"
  return 0
}
