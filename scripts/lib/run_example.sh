# Sourced by scripts/demo.sh and scripts/torch_demo.sh: runs an example on N MPICH ranks, checks
# that every rank reached its end, and lists the outputs it wrote.
#   run_example TAG EXE RANKS OUT FILE... -- [example arguments]
# TAG names the caller in messages; FILE... are the outputs to list (those present). The
# example must end with the line "<basename of EXE>: all RANKS ranks finished".
run_example() {
  local tag=$1 exe=$2 ranks=$3 out=$4
  shift 4
  local files=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift  # the --
  [ -x "$exe" ] || { echo "$tag: $exe was not built" >&2; return 1; }
  echo
  echo "$tag: running $exe on $ranks ranks (MPICH: /usr/bin/mpiexec.mpich)"
  # MPICH busy-polls and this machine may have fewer cores than ranks: the examples never
  # block in MPI (they poll with sleeps), so oversubscribing is fine.
  local log
  log=$(mktemp)
  /usr/bin/mpiexec.mpich -n "$ranks" "$exe" --out "$out" "$@" | tee "$log"
  # hydra exits 0 when a rank exits 0 without MPI_Finalize (docs/reliability.md): the example's
  # last line, printed once every rank reached the end, is the proof that the run finished.
  local name
  name=$(basename "$exe")
  if ! grep -q "^$name: all $ranks ranks finished$" "$log"; then
    rm -f "$log"
    echo "$tag: the run ended without every rank finishing (see the output above)" >&2
    return 1
  fi
  rm -f "$log"
  local out_abs f
  out_abs=$(cd "$out" && pwd)
  echo
  echo "$tag: outputs in $out_abs/"
  for f in "${files[@]}"; do
    if [ -e "$out/$f" ]; then echo "  $out_abs/$f"; fi
  done
}
