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

bash scripts/setup.sh --build-dir "$build_dir" --no-build
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
      -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >/dev/null
cmake --build "$build_dir" -j 2 --target torch_population

exe="$build_dir/examples/torch_population"
[ -x "$exe" ] || { echo "torch_demo: $exe was not built (Torch not found?)" >&2; exit 1; }
echo
echo "torch_demo: running $exe on $ranks ranks (MPICH: /usr/bin/mpiexec.mpich)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
/usr/bin/mpiexec.mpich -n "$ranks" "$exe" --out "$out" "${args[@]+"${args[@]}"}" | tee "$log"
# hydra exits 0 when a rank exits 0 without MPI_Finalize (docs/reliability.md): the example's
# last line, printed once every rank reached the end, is the proof that the run finished.
if ! grep -q "^torch_population: all $ranks ranks finished$" "$log"; then
  echo "torch_demo: the run ended without every rank finishing (see the output above)" >&2
  exit 1
fi

out_abs=$(cd "$out" && pwd)
echo
echo "torch_demo: outputs in $out_abs/"
for f in losses.csv deaths.csv summary.csv losses.png; do
  if [ -e "$out/$f" ]; then echo "  $out_abs/$f"; fi
done
