#!/usr/bin/env bash
# The kill/requeue/resume soak (docs/reliability.md records its result): SIGKILLs ranks of
# checkpointing age_replacement jobs under a real Slurm at random points, one kill during a
# checkpoint write, lets each job requeue itself and resume, and checks that
#   - no checkpoint is lost: the newest complete checkpoint before a kill is there after it;
#   - no checkpoint is corrupted: every checkpoint written, by any run, reads back (h5py) and
#     the resumed runs load them (the library checks each dataset's xxh64);
#   - every resumed run is identical to its uninterrupted twin: each checkpoint the killed
#     jobs wrote holds the same population as the twin's at the same step, the final included.
#
#   scripts/slurm/kill_soak.sh [--kills N] [--seed S] [--steps N] [--every N] [--exe PATH]
#                              [--out DIR]
# --kills: kills in all (default 20), spread over as many jobs as needed, at most 5 per job;
# --seed: seeds the random kill times and ranks (default 1); --steps/--every: the demo's
# length and checkpoint interval (default 60/10); --exe: the demo (default
# build/examples/age_replacement); --out: where jobs write (default a temporary directory,
# removed unless the soak fails). Starts its own cluster (scripts/slurm.sh run; root); exits
# 77 where none can start. Prints one line per kill and a summary.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
args=("$@")
kills=20 seed=1 steps=60 every=10 exe=$root/build/examples/age_replacement out=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --kills) kills=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --exe) exe=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "kill_soak: unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ -z ${SLURM_CONF:-} ]]; then
  exec bash "$root/scripts/slurm.sh" run -- bash "${BASH_SOURCE[0]}" "${args[@]}"
fi
check_name=kill_soak
source "$here/common.sh"

[[ -x $exe ]] || fail "$exe is not built (cmake --build build --target age_replacement)"
keep_out=1
if [[ -z $out ]]; then out=$(mktemp -d /tmp/paramwin-soak.XXXXXX); keep_out=0; fi
rm -rf "$out"
mkdir -p "$out"
RANDOM=$seed
readonly per_job=5
export PARAMWIN_MAX_REQUEUES=$((per_job + 1))
demo=(--steps "$steps" --checkpoint-every "$every" --sequential --no-control --age 20..40
      --report-every 20 --hidden 64 --seed 11)
final=$(printf 'age_replacement-%012d.h5' "$steps")
archivers=()
trap 'kill "${archivers[@]}" 2>/dev/null || true' EXIT

submit() {  # NAME
  mkdir -p "$out/$1"
  sbatch --parsable --ntasks=4 -o "$out/$1/job.out" "$slurm_lib/age_replacement.sbatch" "$exe" \
         "$out/$1" --checkpoint-dir "$out/$1/ckpt" "${demo[@]}"
}
start_archive() {  # NAME
  archive_checkpoints "$out/$1/ckpt" "$out/$1/all" &
  archivers+=($!)
}
# same_as_twin NAME: every checkpoint NAME wrote equals the twin's at the same step.
same_as_twin() {
  local f n=0
  for f in "$out/$1/ckpt"/*.h5; do [[ -e $out/$1/all/${f##*/} ]] || ln "$f" "$out/$1/all/"; done
  for f in "$out/$1/all"/*.h5; do
    "$python" "$slurm_lib/compare_checkpoints.py" "$out/twin/all/${f##*/}" "$f" \
      >"$out/$1/compare.log" 2>&1 || { cat "$out/$1/compare.log"; return 1; }
    n=$((n + 1))
  done
  ((n == steps / every)) || { echo "kill_soak: $1 wrote $n checkpoints, not $((steps / every))"; return 1; }
}

t0=$SECONDS
echo "kill_soak: $kills kills, seed $seed, demo ${demo[*]}; out $out"
twin=$(submit twin)
start_archive twin
[[ $(wait_job "$twin" 900) == COMPLETED ]] || { show_job_output "$out/twin/job.out"; fail "twin failed"; }
expect_finished "$out/twin/job.out" 4
for f in "$out/twin/ckpt"/*.h5; do [[ -e $out/twin/all/${f##*/} ]] || ln "$f" "$out/twin/all/"; done
twin_s=$(grep -o 'replacement run: [0-9]* steps in [0-9.]* s' "$out/twin/job.out" | awk '{print $6}')
echo "kill_soak: twin job $twin: $steps steps in $twin_s s"
# Kills land uniformly in the first 80 % of a run's expected length (a resumed run is
# shorter: a kill planned after its end does not happen and is not counted).
max_ms=$(awk -v t="$twin_s" 'BEGIN { printf "%d", t * 800 }')
# One job's first kill waits for a checkpoint write instead (the first run of a job has all
# its writes ahead of it).
write_job=$((RANDOM % ((kills + per_job - 1) / per_job) + 1))

# wait_run JOBID RESTART: until run RESTART of the job has its ranks (0) or the job ended (1).
wait_run() {
  local t0=$SECONDS
  while :; do
    [[ -n $(rank_pid "$1" 0 "$2") ]] && return 0
    case $(job_field "$1" JobState) in COMPLETED | FAILED | CANCELLED | TIMEOUT) return 1 ;; esac
    ((SECONDS - t0 < 300)) || fail "run $2 of job $1 did not start within 300 s"
    sleep 0.2
  done
}
done_kills=0 in_write=0 lost=0 corrupted=0 jobs=0 identical=0
while ((done_kills < kills)); do
  jobs=$((jobs + 1))
  name=job$jobs
  jid=$(submit "$name")
  start_archive "$name"
  restart=0
  while ((done_kills < kills && restart < per_job)); do
    wait_run "$jid" "$restart" || break
    rank=$((RANDOM % 4))
    pid=$(wait_rank_pid "$jid" "$rank" "$restart" 60)
    before=$(checkpoints "$out/$name/ckpt" | tail -n 1)
    what=""
    if ((jobs == write_job && restart == 0)); then
      tmp=$(kill_in_write "$out/$name/ckpt" "$pid" 300)
      what="during the write of ${tmp##*/}"
    else
      delay_ms=$((RANDOM * 32768 + RANDOM))
      delay_ms=$((max_ms > 0 ? delay_ms % max_ms : 0))
      sleep "$(awk -v ms="$delay_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
      before=$(checkpoints "$out/$name/ckpt" | tail -n 1)
      kill -KILL "$pid" 2>/dev/null || { echo "kill_soak: $name run $restart ended before its kill"; break; }
      what="after ${delay_ms} ms"
    fi
    done_kills=$((done_kills + 1))
    # The run is over once its other ranks are gone (srun --kill-on-bad-exit).
    for _ in $(seq 200); do
      [[ -z $(rank_pid "$jid" $(((rank + 1) % 4)) "$restart") ]] && break
      sleep 0.05
    done
    after=$(checkpoints "$out/$name/ckpt" | tail -n 1)
    note=""
    if [[ -n ${tmp:-} && $what == during* ]]; then
      if [[ -e ${tmp%.tmp} ]]; then
        note=" (the write completed before the kill landed)"
      else
        in_write=$((in_write + 1))
        note=" (interrupted: ${tmp##*/} never got its final name)"
      fi
      tmp=""
    fi
    if [[ -n $before && ( -z $after || $after < $before ) ]]; then
      lost=$((lost + 1))
      note+=" LOST: ${before##*/} is gone"
    fi
    for f in "$out/$name/ckpt"/*.h5; do
      [[ -e $f ]] || continue
      "$python" "$slurm_lib/compare_checkpoints.py" --digest "$f" >/dev/null 2>&1 || {
        corrupted=$((corrupted + 1))
        note+=" CORRUPTED: ${f##*/}"
      }
    done
    echo "kill_soak: kill $done_kills/$kills: $name (job $jid) run $restart, rank $rank (pid $pid)" \
         "$what; newest checkpoint ${after##*/}$note"
    restart=$((restart + 1))
  done
  state=$(wait_job "$jid" 900)
  if [[ $state != COMPLETED ]]; then
    show_job_output "$out/$name/job.out"
    fail "$name (job $jid) ended $state"
  fi
  tail -n 5 "$out/$name/job.out" | grep -q "^age_replacement: all 4 ranks finished$" ||
    fail "$name's last run did not finish on every rank"
  resumes=$(grep -c "resumed from" "$out/$name/job.out" || true)
  if same_as_twin "$name"; then
    identical=$((identical + 1))
    echo "kill_soak: $name (job $jid): $(job_field "$jid" Restarts) requeues, $resumes resumes," \
         "every checkpoint equal to the twin's"
  else
    echo "kill_soak: $name (job $jid): NOT identical to the twin"
  fi
done
kill "${archivers[@]}" 2>/dev/null || true
digests=$("$python" "$slurm_lib/compare_checkpoints.py" --digest "$out/twin/all/$final" \
            "$out"/job*/all/"$final" | awk '{print substr($1, 1, 16)}' | sort -u)
echo "kill_soak: $done_kills kills ($in_write during a checkpoint write) over $jobs jobs in" \
     "$((SECONDS - t0)) s: lost $lost, corrupted $corrupted, $identical of $jobs jobs identical" \
     "to the uninterrupted twin; final digests: $(tr '\n' ' ' <<<"$digests")"
if ((lost || corrupted || identical != jobs || in_write < 1)) || [[ $(wc -l <<<"$digests") -ne 1 ]]; then
  echo "kill_soak: FAILED (outputs kept in $out)" >&2
  exit 1
fi
((keep_out)) || rm -rf "$out"
echo "kill_soak: passed"
