#!/usr/bin/env bash
# The Fashion-MNIST population benchmark (issue 26, docs/pbt-fashion.md): every method of
# benchmarks/pbt_fashion/ on 4 agents unless --agents (one MPI rank each, one thread each), 5
# seeds, the same step and wall-clock budget; then the table and the plot.
#   scripts/pbt_fashion.sh [--build-dir DIR] [--seeds N] [--first-seed N] [--steps N] [--interval N]
#                          [--methods a,b,...] [--condition C] [--task T] [--out DIR]
#                          [--agents N] [--quick] [--no-report]
# --first-seed: the first seed of the --seeds seeds (1 unless told): --first-seed 6 --seeds 5
# runs seeds 6-10, to add seeds to an earlier run (into another --out: the script empties it).
# --agents: the population (MPI ranks, one agent each; 4 unless told).
# --task: default, schedule (benchmarks/pbt_fashion/tasks.py: learning rates 1e-4..1,
# 4,000 steps in 20 intervals of 200) or drift (the same on a stream that shifts 3 times:
# drift.py); the last two run random_search, random_cosine, optuna_tpe, checkpoint_pbt and
# paramwin_pbt unless --methods, into out/pbt_fashion_TASK and docs/img/pbt_fashion_TASK.png.
# --steps and --interval default to the task's.
# --condition: stragglers (benchmarks/pbt_fashion/straggler.py): none (default), slow_rank (the
# last agent 2x slower: it sleeps its step time before every step) or random (stalls of ten
# step times at random, 1.5x slower on average).
# --quick: the suite's short version (6,000 training and 2,000 test images, 200 steps, one
# seed, every method, random_cosine, paramwin_pbt_sync_twin and the PBTs' _cosine forms too,
# in one launch, no plot;
# the report fails when the twin's evaluations differ from checkpoint_pbt's). Needs the Open MPI build
# with the Python package (scripts/setup.sh --mpi openmpi, build-openmpi) and Debian's
# dataset-fashion-mnist and python3-optuna (setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build-openmpi
seeds=5
first_seed=1
steps=""
interval=""
ranks=4
methods=""
out=""
task=default
extra=()
report=1
quick=0
condition=none
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --first-seed) first_seed=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
    --condition) condition=$2; shift 2 ;;
    --task) task=$2; shift 2 ;;
    --agents) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-report) report=0; shift ;;
    *) echo "pbt_fashion.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# The task's budget (one place: tasks.TASKS), unless --steps / --interval say otherwise.
read -r task_steps task_interval < <(cd benchmarks/pbt_fashion && /usr/bin/python3 -c "
import sys, tasks
t = tasks.TASKS.get(sys.argv[1])
print(*(t['steps'], t['interval']) if t else ('', ''))" "$task") || true
[ -n "${task_steps:-}" ] || { echo "pbt_fashion.sh: unknown --task $task" >&2; exit 2; }
[[ "$ranks" =~ ^[0-9]+$ ]] && [ "$ranks" -ge 2 ] || {
  echo "pbt_fashion.sh: --agents $ranks: a population of at least 2" >&2; exit 2; }
[[ "$seeds" =~ ^[0-9]+$ ]] && [ "$seeds" -ge 1 ] && [[ "$first_seed" =~ ^[0-9]+$ ]] \
  && [ "$first_seed" -ge 1 ] || {
  echo "pbt_fashion.sh: --seeds $seeds --first-seed $first_seed: positive integers" >&2; exit 2; }
steps=${steps:-$task_steps}
interval=${interval:-$task_interval}
if [ "$task" != default ]; then
  methods=${methods:-random_search,random_cosine,optuna_tpe,checkpoint_pbt,paramwin_pbt}
  out=${out:-out/pbt_fashion_$task}
fi
defaults=random_search,optuna_tpe,checkpoint_pbt,paramwin_pbt,paramwin_pbt_sync,paramwin_pb2
every=$defaults,random_cosine,paramwin_pbt_sync_twin,checkpoint_pbt_cosine,paramwin_pbt_cosine
every+=,paramwin_pbt_same
[ "$quick" = 1 ] && methods=${methods:-$every}  # every method
methods=${methods:-$defaults}
out=${out:-out/pbt_fashion}
if [ "$quick" = 1 ]; then
  seeds=1; first_seed=1; steps=200; interval=25
  extra=(--train-subset 6000 --test-subset 2000 --val-limit 1000)
fi
[ -d "$build_dir/python/paramwin" ] || {
  echo "pbt_fashion.sh: no Python package in $build_dir/python (scripts/setup.sh --mpi openmpi)" >&2
  exit 1
}
package_dir=$(cd "$build_dir/python" && pwd)
launcher=(/usr/bin/mpiexec.openmpi -n "$ranks")
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
[ "$ranks" -gt "$(nproc)" ] && launcher+=(--oversubscribe)
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.journal "$out"/calibration-*.json
rm -rf "$out"/ckpt-*
{ date -Is; git rev-parse --short HEAD; cat /proc/loadavg; echo "condition $condition"
  echo "task $task, $steps steps, interval $interval, $ranks agents"
  echo "seeds $first_seed..$((first_seed + seeds - 1))"; } > "$out/run.txt"
IFS=, read -r -a method_list <<< "$methods"
[ "$quick" = 1 ] && method_list=("$methods")  # one launch runs them all
for seed in $(seq "$first_seed" $((first_seed + seeds - 1))); do
  for m in "${method_list[@]}"; do
    t0=$(date +%s)
    PYTHONPATH="$package_dir" "${launcher[@]}" /usr/bin/python3 \
      benchmarks/pbt_fashion/run.py --method "$m" --seed "$seed" --steps "$steps" \
      --interval "$interval" --out "$out" "${extra[@]}" --condition "$condition" --task "$task"
    echo "pbt_fashion: $m seed $seed: $(($(date +%s) - t0)) s"
  done
done
cat /proc/loadavg >> "$out/run.txt"
if [ "$report" = 1 ]; then
  args=(--runs "$out" --check --methods "$methods" --seeds "$seeds")
  name=pbt_fashion
  [ "$task" = default ] || name+=_$task
  [ "$condition" = none ] || name+=_$condition
  png=docs/img/$name.png
  [ "$quick" = 0 ] && args+=(--png "$png" --markdown "$out/table.md")
  /usr/bin/python3 benchmarks/pbt_fashion/report.py "${args[@]}"
fi
