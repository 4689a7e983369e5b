#!/usr/bin/env bash
# The README's demo: installs what is missing, builds paramwin into build/, then runs the
# age-replacement example (4 agents, one per MPI rank) with and without replacement and
# says where its CSVs and plot are.
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

# Packages (apt) and a full build with MPICH pinned explicitly.
bash scripts/setup.sh --build-dir "$build_dir"

exe="$build_dir/examples/age_replacement"
[ -x "$exe" ] || { echo "demo: $exe was not built" >&2; exit 1; }

echo
echo "demo: running $exe on $ranks ranks (MPICH: /usr/bin/mpiexec.mpich)"
# MPICH busy-polls and this machine may have fewer cores than ranks: the example never
# blocks in MPI (it polls with sleeps), so oversubscribing is fine.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
/usr/bin/mpiexec.mpich -n "$ranks" "$exe" --out "$out" "${args[@]+"${args[@]}"}" | tee "$log"
# hydra exits 0 when a rank exits 0 without MPI_Finalize (docs/reliability.md): the example's
# last line, printed once every rank reached the end, is the proof that the run finished.
if ! grep -q "^age_replacement: all $ranks ranks finished$" "$log"; then
  echo "demo: the run ended without every rank finishing (see the output above)" >&2
  exit 1
fi

out_abs=$(cd "$out" && pwd)
echo
echo "demo: outputs in $out_abs/"
for f in losses.csv deaths.csv summary.csv events.jsonl losses.png; do
  if [ -e "$out/$f" ]; then echo "  $out_abs/$f"; fi
done
[ -e "$out/losses.png" ] || echo "  (no plot: gnuplot missing or --no-plot; redraw with: cd $out && gnuplot plot.gp)"
