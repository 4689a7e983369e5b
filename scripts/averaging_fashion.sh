#!/usr/bin/env bash
# The data-parallel averaging benchmark on Fashion-MNIST (issue 34, docs/averaging-fashion.md):
# every method of benchmarks/averaging_fashion/methods/ under every straggler condition, N ranks
# (one MPI rank each, one thread each) training one model on disjoint shards, equal total
# samples; then the table and the plot.
#   scripts/averaging_fashion.sh [--ranks N] [--seeds N] [--steps N] [--period H] [--warmup W]
#                                [--points N] (most points of a run's accuracy curve)
#                                [--tick S] (seconds between a rank's parameter copies)
#                                [--methods a,b,...] [--conditions a,b,...] [--out DIR]
#                                [--build-dir DIR] [--png FILE] [--quick] [--no-report]
# --quick: the suite's short version (6,000 training and 1,000 test images, 60 steps per rank,
# conditions none and slow_rank, one seed, unless --conditions or --seeds say; no plot; the
# report fails when a method is missing or a final accuracy is below 60 %). Needs Debian's
# python3-torch, python3-mpi4py (Open MPI), openmpi-bin, dataset-fashion-mnist and
# python3-matplotlib (scripts/setup.sh --mpi openmpi installs them). The baselines need no
# paramwin build; paramwin's methods import the Python package from --build-dir (default
# build-openmpi) when it is there.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build-openmpi
ranks=4
seeds=3
steps=300
period=8
warmup=50
tick=1.0
points=10
methods=ddp,periodic,average_all,paramwin_inline,paramwin_background,paramwin_symmetric,paramwin_hierarchical,no_comm
conditions=none,slow_rank,random
out=out/averaging_fashion
png=""
floor=0.6
extra=()
report=1
quick=0
conditions_given=0
seeds_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seeds) seeds=$2; seeds_given=1; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --period) period=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --points) points=$2; shift 2 ;;
    --tick) tick=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
    --conditions) conditions=$2; conditions_given=1; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --png) png=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-report) report=0; shift ;;
    *) echo "averaging_fashion.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ "$quick" = 1 ]; then
  steps=60; warmup=10; tick=0.25; points=6
  [ "$seeds_given" = 1 ] || seeds=1
  [ "$conditions_given" = 1 ] || conditions=none,slow_rank
  extra=(--train-subset 6000 --test-subset 1000)
fi
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || {
  echo "averaging_fashion.sh: no Fashion-MNIST (Debian's dataset-fashion-mnist:" \
       "scripts/setup.sh --mpi openmpi)" >&2
  exit 1
}
pythonpath=${PYTHONPATH:-}
if [ -d "$build_dir/python/paramwin" ]; then
  pythonpath=$(cd "$build_dir/python" && pwd)${pythonpath:+:$pythonpath}
fi
launcher=(/usr/bin/mpiexec.openmpi -n "$ranks")
[ "$(id -u)" = 0 ] && launcher+=(--allow-run-as-root)
[ "$ranks" -gt "$(nproc)" ] && launcher+=(--oversubscribe)
mkdir -p "$out"
rm -f "$out/runs.jsonl"
{ echo "date: $(date -Is)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
  echo "machine: $(nproc) cores, $cpu"
  echo "ranks: $ranks, seeds: $seeds, steps: $steps, period: $period, warmup: $warmup"
  echo "load before: $(cat /proc/loadavg)"; } > "$out/run.txt"
for seed in $(seq 1 "$seeds"); do
  t0=$(date +%s)
  PYTHONPATH="$pythonpath" "${launcher[@]}" /usr/bin/python3 benchmarks/averaging_fashion/run.py \
    --seed "$seed" --methods "$methods" --conditions "$conditions" --steps "$steps" \
    --period "$period" --warmup "$warmup" --tick "$tick" --points "$points" --out "$out" \
    "${extra[@]}"
  echo "averaging_fashion: seed $seed: $(($(date +%s) - t0)) s"
done
echo "load after: $(cat /proc/loadavg)" >> "$out/run.txt"
cat "$out/run.txt"
if [ "$report" = 1 ]; then
  args=(--runs "$out" --check --methods "$methods" --conditions "$conditions" --seeds "$seeds"
        --floor "$floor" --markdown "$out/table.md")
  [ -n "$png" ] && args+=(--png "$png")
  /usr/bin/python3 benchmarks/averaging_fashion/report.py "${args[@]}"
fi
