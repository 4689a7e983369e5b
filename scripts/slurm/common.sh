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

# rank_pid JOBID RANK RESTART: the pid of rank RANK of the job's run number RESTART (0: the
# first; Slurm counts requeues in SLURM_RESTART_COUNT), or nothing while it is not running.
rank_pid() {
  local p env comm
  for p in /proc/[0-9]*; do
    { read -r comm <"$p/comm"; } 2>/dev/null || continue
    [[ $comm == age_replacement ]] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    grep -qx "SLURM_JOB_ID=$1" <<<"$env" || continue
    grep -qx "SLURM_PROCID=$2" <<<"$env" || continue
    if (($3 == 0)); then
      grep -q "^SLURM_RESTART_COUNT=" <<<"$env" && continue
    else
      grep -qx "SLURM_RESTART_COUNT=$3" <<<"$env" || continue
    fi
    echo "${p#/proc/}"
    return 0
  done
}

# wait_rank_pid JOBID RANK RESTART SECONDS: rank_pid once that rank runs; fails after SECONDS.
wait_rank_pid() {
  local pid t0=$SECONDS
  while :; do
    pid=$(rank_pid "$1" "$2" "$3")
    [[ -n $pid ]] && { echo "$pid"; return 0; }
    ((SECONDS - t0 < $4)) || fail "rank $2 of job $1 (run $3) did not start within $4 s"
    sleep 0.2
  done
}

# checkpoints DIR: the complete checkpoints in DIR, oldest first (names sort by step).
checkpoints() {
  compgen -G "$1/*.h5" | sort || true
}

# wait_checkpoint DIR SECONDS [AFTER]: waits until DIR holds a checkpoint newer than AFTER (a
# file name; default: any); prints it.
wait_checkpoint() {
  local dir=$1 limit=$2 after=${3:-} newest t0=$SECONDS
  while :; do
    newest=$(checkpoints "$dir" | tail -n 1)
    if [[ -n $newest && ( -z $after || $newest > $after ) ]]; then
      echo "$newest"
      return 0
    fi
    ((SECONDS - t0 < limit)) || fail "no new checkpoint in $dir within $limit s"
    sleep 0.1
  done
}

# archive_checkpoints SRC DST: until killed, hard-links every complete checkpoint of SRC into
# DST, so that the ones the demo deletes later (it keeps its newest 3) can still be compared.
archive_checkpoints() {
  mkdir -p "$2"
  while :; do
    for f in "$1"/*.h5; do
      [[ -e $f && ! -e $2/${f##*/} ]] && ln "$f" "$2/" 2>/dev/null
    done
    sleep 0.1
  done
}

# kill_in_write DIR PID SECONDS: busy-waits for a checkpoint write to begin in DIR (a new
# *.h5.tmp file: the library writes under that name and renames when every rank closed the
# file) and SIGKILLs PID at once; prints the temporary file's name.
kill_in_write() {
  local dir=$1 pid=$2 limit=$3 f t0=$SECONDS
  local -A stale=()
  for f in "$dir"/*.h5.tmp; do [[ -e $f ]] && stale[$f]=1; done
  while :; do
    for f in "$dir"/*.h5.tmp; do
      if [[ -e $f && -z ${stale[$f]:-} ]]; then
        kill -KILL "$pid"
        echo "$f"
        return 0
      fi
    done
    ((SECONDS - t0 < limit)) || fail "no checkpoint write began in $dir within $limit s"
  done
}

# python: Debian's interpreter (python3-h5py).
python=${PARAMWIN_PYTHON:-/usr/bin/python3}
