#!/usr/bin/env bash
# Builds paramwin (scripts/setup.sh) and runs the whole benchmark suite, each case with the
# rank count it needs, writing Google Benchmark JSON into out/bench/; then regenerates
# docs/benchmarks.md and docs/img/*.png with scripts/bench_report.py.
#   scripts/bench.sh [--mpi mpich|openmpi] [--build-dir DIR] [--no-build] [--report-only]
#                    [--quick] [--reps N]
#                    [--groups]   (only the agent-group rebirth cases, issue 8)
#                    [--mpi-compare]  (one-donor and k-donor cases under MPICH and then Open
#                                      MPI, builds `build` and `build-openmpi`, into
#                                      out/bench-mpi/; rewrites section 11 of docs/benchmarks.md)
#                    [--serve]    (only the serving cases, issue 14)
#                    [--hyper]    (only the hyperparameter cases, issue 15)
#                    [--direct]   (only the direct-landing cases, issue 18)
#                    [--checkpoint]  (only the checkpoint save cases, 4 ranks, issue 17)
# --mpi picks the MPI (default mpich; build directory build-openmpi for openmpi). The launcher
# and its environment come from the build's paramwin_mpi_env.sh (the tests' ENVIRONMENT).
# Timings are only meaningful on a quiet machine: the script records the load average
# before each run and the report prints it.
set -euo pipefail
cd "$(dirname "$0")/.."
command_line="scripts/bench.sh $*"

build_dir=
mpi=mpich
mpi_compare=0
do_build=1
run=1
groups_only=0
serve_only=0
direct_only=0
hyper_only=0
checkpoint_only=0
reps=3
min_time=0.05
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --mpi) mpi=$2; shift 2 ;;
    --mpi-compare) mpi_compare=1; shift ;;
    --no-build) do_build=0; shift ;;
    --report-only) run=0; do_build=0; shift ;;
    --quick) reps=2; min_time=0.02; shift ;;
    --reps) reps=$2; shift 2 ;;
    --groups) groups_only=1; shift ;;
    --serve) serve_only=1; shift ;;
    --hyper) hyper_only=1; shift ;;
    --direct) direct_only=1; shift ;;
    --checkpoint) checkpoint_only=1; shift ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

case "$mpi" in
  mpich) default_dir=build ;;
  openmpi) default_dir=build-openmpi ;;
  *) echo "bench.sh: --mpi takes mpich or openmpi, not '$mpi'" >&2; exit 2 ;;
esac
build_dir=${build_dir:-$default_dir}

if [ "$mpi_compare" = 1 ]; then
  # One-donor (2 ranks) and k-donor (4 ranks) cases under each MPI, one after the other in
  # this session, so that docs/benchmarks.md section 11 compares them side by side.
  for m in mpich openmpi; do
    dir=build
    [ "$m" = openmpi ] && dir=build-openmpi
    [ "$do_build" = 1 ] && bash scripts/setup.sh --mpi "$m" --build-dir "$dir"
    # shellcheck source=/dev/null
    ( source "$dir/paramwin_mpi_env.sh"
      o=out/bench-mpi/$m
      mkdir -p "$o"
      rm -f "$o"/*.json "$o"/*.txt
      git rev-parse --short HEAD > "$o/commit.txt" 2>/dev/null || echo unknown > "$o/commit.txt"
      echo "$command_line (reps $reps, min_time $min_time)" > "$o/command.txt"
      "$PARAMWIN_MPIEXEC" --version 2>&1 | grep -m1 -E "Version|OpenRTE|Open MPI" > "$o/mpi.txt" || true
      for np in 2 4; do
        filter='^one_donor/'
        [ "$np" = 4 ] && filter='^(k_donors|stream)/'
        echo "bench: $m, $np ranks, filter $filter"
        { date -Is; cat /proc/loadavg; } > "$o/load_np$np.txt"
        "$PARAMWIN_MPIEXEC" -n "$np" "$dir/benchmarks/paramwin_bench" --benchmark_filter="$filter" \
          --benchmark_repetitions="$reps" --benchmark_min_time="$min_time" \
          --benchmark_display_aggregates_only=true \
          --benchmark_out="$o/np$np.json" --benchmark_out_format=json
        cat /proc/loadavg >> "$o/load_np$np.txt"
      done )
  done
  python3 scripts/bench_report.py --json-dir out/bench-mpi --out docs/benchmarks.md --section mpi
  echo "bench: updated section 11 of docs/benchmarks.md"
  exit 0
fi

if [ "$do_build" = 1 ]; then
  bash scripts/setup.sh --mpi "$mpi" --build-dir "$build_dir"
fi
bench="$build_dir/benchmarks/paramwin_bench"
out=out/bench
[ "$mpi" = openmpi ] && out=out/bench-openmpi
mkdir -p "$out"
# The launcher and what it needs (Open MPI: oversubscription, root, osc/ucx), as the tests.
# shellcheck source=/dev/null
[ -f "$build_dir/paramwin_mpi_env.sh" ] && source "$build_dir/paramwin_mpi_env.sh"
mpiexec=${PARAMWIN_MPIEXEC:-/usr/bin/mpiexec.mpich}
# docs/benchmarks.md holds the MPICH run (and section 11, --mpi-compare); a whole run under Open
# MPI is reported beside its JSON instead.
report=docs/benchmarks.md
report_args=(--img-dir docs/img)
if [ "$mpi" = openmpi ]; then
  report=$out/benchmarks.md
  report_args=(--no-plots)
fi

# record_commit FILE: the short commit, marked when src/, include/ or benchmarks/ differ from it
# (a section's figures then belong to uncommitted code).
record_commit() {
  { git rev-parse --short HEAD 2>/dev/null || echo unknown; } > "$1"
  if ! git diff --quiet HEAD -- src include benchmarks 2>/dev/null; then
    sed -i 's/$/ (with uncommitted changes in src\/, include\/ or benchmarks\/)/' "$1"
  fi
}

run_suite() {  # run_suite <ranks> <filter>
  local np=$1 filter=$2
  echo "bench: $np ranks, filter $filter"
  { date -Is; cat /proc/loadavg; } > "$out/load_np$np.txt"
  "$mpiexec" -n "$np" "$bench" \
    --benchmark_filter="$filter" \
    --benchmark_repetitions="$reps" --benchmark_min_time="$min_time" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/np$np.json" --benchmark_out_format=json
  cat /proc/loadavg >> "$out/load_np$np.txt"
}

# Agent groups (issue 8): rebirth time of one agent, g = 1 vs g = 2 ranks per agent, same
# model size. Waiting ranks sleep 1 ms between polls so that they leave the 2 cores to the
# reborn agent's ranks (as on a machine with a core per rank); the RMA donors then serve
# gets only when they poll, which the report states. Written to out/bench/groups_*.json.
run_groups() {
  record_commit "$out/groups_commit.txt"
  { date -Is; cat /proc/loadavg; } > "$out/groups_load.txt"
  PARAMWIN_BENCH_POLL_NS=1000000 "$mpiexec" -n 6 "$bench" \
    --benchmark_filter='^group_rebirth/shm/' --benchmark_repetitions="$reps" \
    --benchmark_min_time=0.2 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/groups_shm_np6.json" --benchmark_out_format=json
  PARAMWIN_BENCH_POLL_NS=1000000 "$mpiexec" -n 4 "$bench" \
    --benchmark_filter='^group_rebirth/rma/k:1/' --benchmark_repetitions="$reps" \
    --benchmark_min_time=0.2 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/groups_rma_np4.json" --benchmark_out_format=json
  cat /proc/loadavg >> "$out/groups_load.txt"
}

run_serve() {  # issue 14: an Agent loop serving its RMA readers, step()'s progress cost
  record_commit "$out/serve_commit.txt"
  { date -Is; cat /proc/loadavg; } > "$out/serve_load.txt"
  "$mpiexec" -n 2 "$bench" \
    --benchmark_filter='^serve/|^busy/pull_rma/' --benchmark_repetitions="$((reps > 5 ? reps : 5))" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/serve_np2.json" --benchmark_out_format=json
  # The progress thread's cost needs MPI_THREAD_MULTIPLE: a run of its own.
  PARAMWIN_BENCH_THREAD_MULTIPLE=1 "$mpiexec" -n 2 "$bench" \
    --benchmark_filter='^serve/thread_cost/' --benchmark_repetitions="$((reps > 5 ? reps : 5))" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/serve_thread_np2.json" --benchmark_out_format=json
  cat /proc/loadavg >> "$out/serve_load.txt"
}

run_hyper() {  # issue 15: hyperparameters in the snapshot, pull and publish with and without
  record_commit "$out/hyper_commit.txt"
  { date -Is; cat /proc/loadavg; } > "$out/hyper_load.txt"
  "$mpiexec" -n 2 "$bench" \
    --benchmark_filter='^hyper/(pull_ab_|publish/)' --benchmark_repetitions="$((reps > 5 ? reps : 5))" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/hyper_np2.json" --benchmark_out_format=json
  cat /proc/loadavg >> "$out/hyper_load.txt"
}

run_direct() {  # issue 18: direct landing vs transactional vs raw get, side by side
  record_commit "$out/direct_commit.txt"
  { date -Is; cat /proc/loadavg; } > "$out/direct_load.txt"
  "$mpiexec" -n 2 "$bench" \
    --benchmark_filter='^direct/(one_donor|wire)/' --benchmark_repetitions="$((reps > 5 ? reps : 5))" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/direct_np2.json" --benchmark_out_format=json
  "$mpiexec" -n 4 "$bench" \
    --benchmark_filter='^direct/(k_donors|stream)/' --benchmark_repetitions="$((reps > 5 ? reps : 5))" \
    --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/direct_np4.json" --benchmark_out_format=json
  cat /proc/loadavg >> "$out/direct_load.txt"
}

run_checkpoint() {  # issue 17: population checkpoint saves vs plain POSIX writes, 4 agents
  record_commit "$out/checkpoint_commit.txt"
  { date -Is; cat /proc/loadavg; } > "$out/checkpoint_load.txt"
  "$mpiexec" -n 4 "$build_dir/benchmarks/paramwin_checkpoint_bench" --params 50000000 --layers 8 \
    --reps "$((reps > 5 ? reps : 5))" --dir "$out/checkpoint_files" \
    --json "$out/checkpoint_np4.json"
  rm -rf "$out/checkpoint_files"
  cat /proc/loadavg >> "$out/checkpoint_load.txt"
}

if [ "$run" = 1 ] && [ "$checkpoint_only" = 1 ]; then
  [ -x "$build_dir/benchmarks/paramwin_checkpoint_bench" ] || {
    echo "bench.sh: paramwin_checkpoint_bench not built" >&2; exit 1; }
  run_checkpoint
  python3 scripts/bench_report.py --json-dir "$out" --out "$report" --section checkpoint
  echo "bench: updated the checkpoint section of $report"
  exit 0
elif [ "$run" = 1 ] && [ "$direct_only" = 1 ]; then
  [ -x "$bench" ] || { echo "bench.sh: $bench not built" >&2; exit 1; }
  run_direct
  python3 scripts/bench_report.py --json-dir "$out" --out "$report" --section direct
  echo "bench: updated the direct-landing section of $report"
  exit 0
elif [ "$run" = 1 ] && [ "$hyper_only" = 1 ]; then
  [ -x "$bench" ] || { echo "bench.sh: $bench not built" >&2; exit 1; }
  run_hyper
  python3 scripts/bench_report.py --json-dir "$out" --out docs/benchmarks.md --section hyper
  echo "bench: updated the hyper section of docs/benchmarks.md"
  exit 0
elif [ "$run" = 1 ] && [ "$groups_only" = 1 ]; then
  [ -x "$bench" ] || { echo "bench.sh: $bench not built" >&2; exit 1; }
  run_groups
elif [ "$run" = 1 ] && [ "$serve_only" = 1 ]; then
  [ -x "$bench" ] || { echo "bench.sh: $bench not built" >&2; exit 1; }
  run_serve
  python3 scripts/bench_report.py --json-dir "$out" --out "$report" --section serve
  echo "bench: updated the serve section of $report"
  exit 0
elif [ "$run" = 1 ]; then
  [ -x "$bench" ] || { echo "bench.sh: $bench not built" >&2; exit 1; }
  rm -f "$out"/np*.json "$out"/load_np*.txt
  git rev-parse --short HEAD > "$out/commit.txt" 2>/dev/null || echo unknown > "$out/commit.txt"
  if ! git diff --quiet HEAD -- src include 2>/dev/null; then
    sed -i 's/$/ (with uncommitted changes in src\/ or include\/)/' "$out/commit.txt"
  fi
  sed -i "s/\$/; binary built $(date -r "$bench" -Is)/" "$out/commit.txt"
  # 2 ranks (fits the 2 cores): issue 2's one-donor sweep, chunk sizes, wire formats,
  # publish, busy donor, roster, and k = 1 for the scale comparison.
  run_suite 2 '^(one_donor|chunk|wire|publish|busy|roster|stream)/|^k_donors/pull_(shm|rma)/k:1/n:10M/'
  # 4 ranks (k = 1..3 donors + the reader; oversubscribed, waiting ranks sleep-poll).
  run_suite 4 '^(k_donors|stream|roster)/'
  # 8 ranks: roster reads and the k = 1 rebirth at scale.
  run_suite 8 '^roster/|^k_donors/pull_(shm|rma)/k:1/n:10M/'
  run_groups
  run_serve
  run_hyper
  run_direct
  run_checkpoint
fi

python3 scripts/bench_report.py --json-dir "$out" --out "$report" "${report_args[@]}"
echo "bench: wrote $report"
