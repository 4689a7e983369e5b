#!/usr/bin/env bash
# The elastic soak (docs/elastic.md, "Soak"): an ElasticAgent population (--agent averaging:
# an ElasticAveragingAgent one) trains for a fixed time while faults hit random slots, then the
# same run without faults; prints the figures.
#   scripts/elastic_soak.sh [--mpi mpich|openmpi] [--members M] [--spares S] [--seconds T]
#                           [--faults N] [--kind resign|kill|sigstop|mixed]
#                           [--replacement new_window|standing] [--spawn POOL] [--spawn-low L]
#                           [--spawn-ahead]
#                           [--agent pbt|averaging] [--dead-after SECONDS]
#                           [--launcher mpiexec|slurm] [--out DIR]
# Defaults: MPICH, 8 members + 2 spares, 150 s, 120 faults, resign (the trainer throws and
# its process waits as a spare again; kill needs Open MPI or --launcher slurm, and at most S
# faults unless --spawn).
# --spawn POOL (Open MPI, new_window): the spares refilled by MPI_Comm_spawn to POOL
# (SpawnOptions); kill and mixed then take any number of faults. --spawn-low L: refill only
# when fewer than L spares live (SpawnOptions::low; default: POOL). --spawn-ahead: a spare
# spawns while the members train on (SpawnOptions::ahead). Builds
# elastic_soak in build (MPICH) or build-openmpi first (scripts/setup.sh).
# --launcher slurm: both runs as one Slurm batch job (scripts/slurm/elastic_soak.sbatch: srun
# -K0, --mpi=pmi2 for MPICH, pmix for Open MPI, whose SIGKILLed tasks need its mpirun) on a cluster of this machine that
# scripts/slurm.sh starts and stops (root; Debian's slurm-wlm and munge); exits 77 where none
# can start. Default mpiexec: MPICH's mpiexec -disable-auto-cleanup, Open MPI's mpirun
# --enable-recovery.
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=mpich members=8 spares=2 seconds=150 faults=120 kind=resign replacement=new_window spawn=0
spawn_low=0 agent_arg_extra=() launcher=mpiexec out=out/elastic_soak agent=pbt dead_after=1.5
args=("$@")
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
    --spawn-low) spawn_low=$2; shift 2 ;;
    --spawn-ahead) agent_arg_extra=(spawn_ahead); shift ;;
    --launcher) launcher=$2; shift 2 ;;
    --agent) agent=$2; shift 2 ;;
    --dead-after) dead_after=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "elastic_soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$agent" in
  pbt) agent_arg=() ;;
  averaging) agent_arg=(averaging) ;;
  *) echo "elastic_soak.sh: --agent takes pbt or averaging, not '$agent'" >&2; exit 2 ;;
esac
# With stops (sigstop, mixed): the silence after which a member is judged dead.
agent_arg+=("dead_after=$dead_after" "${agent_arg_extra[@]}")
case "$launcher" in
  mpiexec) ;;
  slurm)
    # Spawning needs Open MPI's mpirun as the job's launcher: the batch script uses it for kill
    # and mixed faults (Slurm's pmix plugin would cancel the step at a SIGKILL).
    if [ "$spawn" != 0 ] && { [ "$mpi" != openmpi ] || { [ "$kind" != kill ] && [ "$kind" != mixed ]; }; }; then
      echo "elastic_soak.sh: --spawn with --launcher slurm needs --mpi openmpi and --kind kill or mixed" >&2
      exit 2
    fi ;;
  *) echo "elastic_soak.sh: --launcher takes mpiexec or slurm, not '$launcher'" >&2; exit 2 ;;
esac
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
if [ "$launcher" = slurm ] && [ -z "${SLURM_CONF:-}" ]; then
  # Into a cluster of this machine with a CPU per task (the node oversubscribes the cores).
  exec bash scripts/slurm.sh run --cpus "$np" -- bash "$0" "${args[@]}"
fi
echo "elastic_soak.sh: $mpi, $members members + $spares spares, $seconds s, $faults $kind faults," \
  "$replacement, spawn pool $spawn (low $spawn_low${agent_arg_extra:+, ahead}), launcher $launcher, agent $agent, dead after $dead_after s"
if [ "$launcher" = slurm ]; then
  out=$(cd "$out" && pwd)
  srun_mpi=pmi2
  [ "$mpi" = openmpi ] && srun_mpi=pmix
  jid=$(PARAMWIN_SRUN_MPI=$srun_mpi \
        sbatch --parsable --ntasks="$np" -o "$out/job-%j.out" scripts/slurm/elastic_soak.sbatch \
        "$PWD/$build/tests/elastic_soak" "$out" "$members" "$seconds" "$faults" "$kind" \
        "$replacement" "spawn=$spawn" "spawn_low=$spawn_low" "${agent_arg[@]}")
  check_name=elastic_soak.sh
  # shellcheck source=slurm/common.sh
  source scripts/slurm/common.sh
  state=$(wait_job "$jid" $((2 * limit + 60)))
  show_job_output "$out/job-$jid.out"
  [ "$state" = COMPLETED ] || echo "elastic_soak.sh: job $jid ended $state"
else
  timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" \
    "$faults" "$kind" "$replacement" "spawn=$spawn" "spawn_low=$spawn_low" "${agent_arg[@]}" > "$out/faults.log" 2>&1 ||
    echo "elastic_soak.sh: the run with faults ended with $?"
  timeout "$limit" "${launch[@]}" -n "$np" "$build/tests/elastic_soak" "$members" "$seconds" 0 \
    "$kind" "$replacement" "spawn=$spawn" "spawn_low=$spawn_low" "${agent_arg[@]}" > "$out/baseline.log" 2>&1 ||
    echo "elastic_soak.sh: the baseline ended with $?"
fi
/usr/bin/python3 scripts/elastic_soak.py "$out/faults.log" "$out/baseline.log" "$members" |
  tee "$out/report.md"
