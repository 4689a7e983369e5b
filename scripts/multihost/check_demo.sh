#!/usr/bin/env bash
# Rank-side wrapper for the age-replacement demo across hosts (tests/multihost):
#   check_demo.sh AGE_REPLACEMENT_EXE OUTDIR
# Every rank runs the demo; rank 0 (hostA; PMI_RANK under MPICH, OMPI_COMM_WORLD_RANK under
# Open MPI) then checks that it wrote its CSVs and that deaths
# and rebirths happened.
set -euo pipefail
exe=$1 out=$2
if [[ ${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}} == 0 ]]; then rm -rf "$out"; fi
"$exe" --steps 200 --no-plot --out "$out"
if [[ ${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}} == 0 ]]; then
  for f in losses.csv deaths.csv summary.csv events.jsonl; do
    [[ -s $out/$f ]] || { echo "check_demo: $out/$f missing or empty" >&2; exit 1; }
  done
  deaths=$(($(wc -l <"$out/deaths.csv") - 1))
  [[ $deaths -ge 1 ]] || { echo "check_demo: no death recorded in 200 steps" >&2; exit 1; }
  echo "check_demo: age_replacement across hosts: $deaths deaths, CSVs in $out"
fi
