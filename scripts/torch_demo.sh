#!/usr/bin/env bash
# The LibTorch demo: installs what is missing (libtorch-dev included), builds paramwin and
# its LibTorch adapter into build/, then runs examples/torch_population (4 LibTorch agents,
# one per MPI rank) with and without age-based replacement and says where its outputs are.
#   scripts/torch_demo.sh [--ranks N] [example options, e.g. --steps 1000 --no-plot]
# Environment: BUILD_DIR (default build), OUT (default out/torch_population).
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
out=${OUT:-out/torch_population}

bash scripts/setup.sh --build-dir "$build_dir" --target torch_population

source scripts/lib/run_example.sh
run_example torch_demo "$build_dir/examples/torch_population" "$ranks" "$out" \
  losses.csv deaths.csv summary.csv losses.png -- "${args[@]+"${args[@]}"}"
