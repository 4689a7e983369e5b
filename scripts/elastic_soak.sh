#!/usr/bin/env bash
# The elastic soak (docs/elastic.md, "Soak"): an ElasticAgent population trains for a fixed
# time while faults hit random slots, then the same run without faults; prints the figures.
#   scripts/elastic_soak.sh [--mpi mpich|openmpi] [--members M] [--spares S] [--seconds T]
#                           [--faults N] [--kind resign|kill]
#                           [--replacement new_window|standing] [--spawn POOL] [--out DIR]
# Defaults: MPICH, 8 members + 2 spares, 150 s, 120 faults, resign (the trainer throws and
# its process waits as a spare again; kill needs Open MPI and at most S faults, unless --spawn).
# --spawn POOL (Open MPI, new_window): the spares refilled by MPI_Comm_spawn to POOL
# (SpawnOptions); kill and mixed then take any number of faults. Builds
# elastic_soak in build (MPICH) or build-openmpi first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=mpich members=8 spares=2 seconds=150 faults=120 kind=resign replacement=new_window spawn=0
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
    --spawn) spawn=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "elastic_soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$mpi" = openmpi ]; then
  build=build-openmpi
  launch=(mpirun.openmpi --enable-recovery --oversubscribe)
  [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
  bash scripts/setup.sh --mpi openmpi --build-dir "$build" --no-torch --ccache \
    -DPARAMWIN_BUILD_BENCHMARKS=OFF -DPARAMWIN_HEADER_CHECK=OFF -DPARAMWIN_WITH_CUDA=OFF \
    --target elastic_soak
else
  build=build
  launch=(mpiexec.mpich -disable-auto-cleanup)
  bash scripts/setup.sh --target elastic_soak
fi
if [ "$mpi" = openmpi ]; then
  # What this machine's Open MPI needs (cmake/ParamwinMpiTest.cmake: osc/ucx for the RMA
  # windows, whose osc/rdma fails to create windows over disjoint communicators), and with
  # --spawn the UCX PML between the MPI jobs (the shared-memory BTL that the tests' environment
  # allows connects one job's processes only).
  # shellcheck source=/dev/null
  source "$build/paramwin_mpi_env.sh"
  [ "$spawn" -gt 0 ] && export OMPI_MCA_pml=ucx
fi
mkdir -p "$out"
np=$((members + spares))
limit=$((seconds * 2 + 60))
echo "elastic_soak.sh: $mpi, $members members + $spares spares, $seconds s, $faults $kind faults," \
  "$replacement, spawn pool $spawn"

timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" \
  "$faults" "$kind" "$replacement" "spawn=$spawn" > "$out/faults.log" 2>&1 || echo "elastic_soak.sh: the run with faults ended with $?"
timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" 0 \
  "$kind" "$replacement" "spawn=$spawn" > "$out/baseline.log" 2>&1 || echo "elastic_soak.sh: the baseline ended with $?"
/usr/bin/python3 scripts/elastic_soak.py "$out/faults.log" "$out/baseline.log" "$members" |
  tee "$out/report.md"
