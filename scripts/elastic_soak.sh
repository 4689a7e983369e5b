#!/usr/bin/env bash
# The elastic soak (docs/elastic.md, "Soak"): an ElasticAgent population trains for a fixed
# time while faults hit random slots, then the same run without faults; prints the figures.
#   scripts/elastic_soak.sh [--mpi mpich|openmpi] [--members M] [--spares S] [--seconds T]
#                           [--faults N] [--kind resign|kill]
#                           [--replacement new_window|standing] [--out DIR]
# Defaults: MPICH, 8 members + 2 spares, 150 s, 120 faults, resign (the trainer throws and
# its process waits as a spare again; kill needs Open MPI and at most S faults). Builds
# elastic_soak in build (MPICH) or build-openmpi first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=mpich members=8 spares=2 seconds=150 faults=120 kind=resign replacement=new_window
out=out/elastic_soak
while [ $# -gt 0 ]; do
  case "$1" in
    --mpi) mpi=$2; shift 2 ;;
    --members) members=$2; shift 2 ;;
    --spares) spares=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --faults) faults=$2; shift 2 ;;
    --kind) kind=$2; shift 2 ;;
    --replacement) replacement=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "elastic_soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$mpi" = openmpi ]; then
  build=build-openmpi
  launch=(mpirun.openmpi --enable-recovery --oversubscribe)
  bash scripts/setup.sh --mpi openmpi --build-dir "$build" --no-torch --ccache \
    -DPARAMWIN_BUILD_BENCHMARKS=OFF -DPARAMWIN_HEADER_CHECK=OFF -DPARAMWIN_WITH_CUDA=OFF \
    --target elastic_soak
else
  build=build
  launch=(mpiexec.mpich -disable-auto-cleanup)
  bash scripts/setup.sh --target elastic_soak
fi
mkdir -p "$out"
np=$((members + spares))
limit=$((seconds * 2 + 60))
echo "elastic_soak.sh: $mpi, $members members + $spares spares, $seconds s, $faults $kind faults," \
  "$replacement"

timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" \
  "$faults" "$kind" "$replacement" > "$out/faults.log" 2>&1 || echo "elastic_soak.sh: the run with faults ended with $?"
timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" 0 \
  "$kind" "$replacement" > "$out/baseline.log" 2>&1 || echo "elastic_soak.sh: the baseline ended with $?"
/usr/bin/python3 scripts/elastic_soak.py "$out/faults.log" "$out/baseline.log" "$members" |
  tee "$out/report.md"
