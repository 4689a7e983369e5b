#!/usr/bin/env bash
# tests/slurm: slurm.requeue. Runs inside `scripts/slurm.sh run`. Two jobs of
# scripts/slurm/age_replacement.sbatch with checkpoints, same seed, --sequential (agents step
# one at a time, so a rerun gives the same bits):
#   twin    runs uninterrupted;
#   killed  is hit twice with SIGKILL of one rank: once mid-run after its first checkpoint,
#           once (in the requeued run) while a checkpoint is being written. Each time srun
#           --kill-on-bad-exit ends the other ranks, the job script requeues the job
#           (scripts/slurm/requeue.sh) and the next run resumes from the newest checkpoint.
# Then: the killed job COMPLETED after 2 requeues, resumed twice, every rank finished; the
# interrupted write left no checkpoint under its final name and the resume used the one
# before it (nothing lost: the newest checkpoint before each kill is still there after it);
# and every checkpoint the killed job wrote, before and after its kills, holds the same
# population as the twin's at the same step (scripts/slurm/compare_checkpoints.py, h5py),
# the final one included.
#   check_requeue.sh EXE OUT
set -euo pipefail
check_name=check_requeue
source "$(dirname "$0")/common.sh"
exe=$1 out=$2
steps=${PARAMWIN_REQUEUE_STEPS:-60}
every=${PARAMWIN_REQUEUE_EVERY:-10}
# --hidden 64: about 4k parameters per agent; --sequential makes a step slow (~0.3 s here).
demo=(--steps "$steps" --checkpoint-every "$every" --sequential --no-control --age 20..40
      --report-every 20 --hidden 64 --seed 5)
rm -rf "$out"
mkdir -p "$out/twin" "$out/killed"
export PARAMWIN_MAX_REQUEUES=4

submit() {  # NAME
  sbatch --parsable --ntasks=4 -o "$out/$1/job.out" "$slurm_lib/age_replacement.sbatch" "$exe" \
         "$out/$1" --checkpoint-dir "$out/$1/ckpt" "${demo[@]}"
}
twin=$(submit twin)
killed=$(submit killed)
echo "check_requeue: twin job $twin, killed job $killed: ${demo[*]}"
archive_checkpoints "$out/twin/ckpt" "$out/twin/all" &
archivers=($!)
archive_checkpoints "$out/killed/ckpt" "$out/killed/all" &
archivers+=($!)
trap 'kill "${archivers[@]}" 2>/dev/null || true' EXIT

# Kill 1: rank 1, mid-run, once the first checkpoint exists.
pid=$(wait_rank_pid "$killed" 1 0 120)
first=$(wait_checkpoint "$out/killed/ckpt" 120)
sleep 0.3
before=$(checkpoints "$out/killed/ckpt" | tail -n 1)
kill -KILL "$pid"
echo "check_requeue: kill 1: SIGKILL rank 1 (pid $pid) mid-run; newest checkpoint ${before##*/}"

# Kill 2 (and more if a kill lands just after a write completed): rank 2 of the requeued run,
# while a checkpoint is being written.
restart=1
in_write=0
while ((restart <= 3)); do
  pid=$(wait_rank_pid "$killed" 2 "$restart" 120)
  prior=$(checkpoints "$out/killed/ckpt" | tail -n 1)
  [[ -n $prior && ! $prior < $before ]] ||
    fail "the checkpoint ${before##*/} that was newest before kill $restart is gone"
  tmp=$(kill_in_write "$out/killed/ckpt" "$pid" 120)
  before=$(checkpoints "$out/killed/ckpt" | tail -n 1)
  echo "check_requeue: kill $((restart + 1)): SIGKILL rank 2 (pid $pid) while ${tmp##*/} was" \
       "being written; newest complete checkpoint ${before##*/}"
  # The other ranks end (srun --kill-on-bad-exit) before anyone could rename the file.
  for _ in $(seq 100); do
    [[ -z $(rank_pid "$killed" 0 "$restart") ]] && break
    sleep 0.1
  done
  if [[ ! -e ${tmp%.tmp} ]]; then
    in_write=1
    break
  fi
  echo "check_requeue: that kill landed after the write completed (${tmp%.tmp} exists): again"
  restart=$((restart + 1))
done
((in_write)) || fail "no kill landed during a checkpoint write"
interrupted=${tmp%.tmp}

state=$(wait_job "$killed" 300)
twin_state=$(wait_job "$twin" 300)
kill "${archivers[@]}" 2>/dev/null || true
wait 2>/dev/null || true
# Catch checkpoints written after the archivers' last look.
for d in twin killed; do
  for f in "$out/$d/ckpt"/*.h5; do [[ -e $out/$d/all/${f##*/} ]] || ln "$f" "$out/$d/all/"; done
done
grep -E "^job |resumed from|^requeue:|all 4 ranks finished" "$out/killed/job.out" | sed 's/^/  | /'
[[ $twin_state == COMPLETED ]] || { show_job_output "$out/twin/job.out"; fail "twin job ended $twin_state"; }
[[ $state == COMPLETED ]] || { show_job_output "$out/killed/job.out"; fail "killed job ended $state"; }
restarts=$(job_field "$killed" Restarts)
((restarts == restart + 1)) || fail "the killed job was requeued $restarts times, expected $((restart + 1))"
resumes=$(grep -c "resumed from" "$out/killed/job.out" || true)
((resumes == restarts)) || fail "the killed job resumed $resumes times in $restarts requeues"
tail -n 5 "$out/killed/job.out" | grep -q "^age_replacement: all 4 ranks finished$" ||
  fail "the killed job's last run did not report that all 4 ranks finished"
expect_finished "$out/twin/job.out" 4
# The run after the interrupted write resumed from the checkpoint before it.
last_resume=$(grep "resumed from" "$out/killed/job.out" | tail -n 1)
[[ $last_resume == *"${before##*/}"* ]] ||
  fail "after the interrupted write the job resumed with '$last_resume', not from ${before##*/}"
[[ -e $out/killed/all/${interrupted##*/} ]] ||
  fail "the interrupted checkpoint ${interrupted##*/} was not written again after the resume"

# Same population as the twin at every step the killed job saved.
final=$(printf 'age_replacement-%012d.h5' "$steps")
[[ -e $out/twin/all/$final && -e $out/killed/all/$final ]] || fail "no final checkpoint $final"
compared=0
for f in "$out/killed/all"/*.h5; do
  name=${f##*/}
  [[ -e $out/twin/all/$name ]] || fail "the twin has no $name"
  "$python" "$slurm_lib/compare_checkpoints.py" "$out/twin/all/$name" "$f" >"$out/compare.log" ||
    { cat "$out/compare.log"; fail "$name differs from the twin's"; }
  compared=$((compared + 1))
done
((compared == steps / every)) || fail "$compared checkpoints compared, expected $((steps / every))"
"$python" "$slurm_lib/compare_checkpoints.py" --digest "$out/twin/all/$final" "$out/killed/all/$final"
echo "check_requeue: killed $((restarts)) times (rank 1 mid-run; rank 2 during the write of" \
     "${interrupted##*/}), requeued and resumed $resumes times: all $compared checkpoints" \
     "equal the uninterrupted twin's, the final one included"
