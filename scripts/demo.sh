#!/usr/bin/env bash
# The README's demo: installs what is missing for it (scripts/setup.sh --minimal: no LibTorch,
# Python, Slurm or linters), builds the library and the age-replacement example into build/
# (nothing else: the tests, benchmarks and adapter are built by scripts/test.sh, which reuses
# this build), then runs the example (4 agents, one per MPI rank) with and without
# replacement and says where its CSVs and plot are. A second run reuses everything.
#   scripts/demo.sh [--ranks N] [example options, e.g. --steps 1000 --seed 3 --no-plot]
# Environment: BUILD_DIR (default build), OUT (default out/age_replacement).
set -euo pipefail
cd "$(dirname "$0")/.."

ranks=4
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
build_dir=${BUILD_DIR:-build}
out=${OUT:-out/age_replacement}

# The packages the demo needs (apt) and a build of what it runs, with MPICH pinned explicitly.
bash scripts/setup.sh --minimal --build-dir "$build_dir" --target age_replacement

source scripts/lib/run_example.sh
run_example demo "$build_dir/examples/age_replacement" "$ranks" "$out" \
  losses.csv deaths.csv summary.csv events.jsonl losses.png -- "${args[@]+"${args[@]}"}"
[ -e "$out/losses.png" ] || echo "  (no plot: gnuplot missing or --no-plot; redraw with: cd $out && gnuplot plot.gp)"
