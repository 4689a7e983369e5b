#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds the consumer project against it
# with find_package(paramwin), and runs it under mpiexec with 2 ranks.
#   run.sh <build-dir> <consumer-source-dir> <mpiexec> <mpicxx>
set -euo pipefail
build=$1 src=$2 mpiexec=$3 mpicxx=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DMPI_CXX_COMPILER="$mpicxx" -DMPIEXEC_EXECUTABLE="$mpiexec" >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
"$mpiexec" -n 2 "$work/build/consumer"
