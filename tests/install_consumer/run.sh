#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds the consumer project against it
# with find_package(paramwin), and runs it under mpiexec with 2 ranks.
#   run.sh <build-dir> <consumer-source-dir> <mpiexec> <mpicxx>
# With --mixed-mpi, <mpicxx> is the wrapper of the *other* MPI (no run, <mpiexec> unused): the
# consumer's configuration must fail with paramwinConfig.cmake's message naming both MPIs.
set -euo pipefail
mixed=0
if [ "${1:-}" = --mixed-mpi ]; then
  mixed=1
  shift
fi
build=$1 src=$2 mpiexec=$3 mpicxx=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
if [ "$mixed" = 1 ]; then
  if cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
           -DMPI_CXX_COMPILER="$mpicxx" >"$work/configure.log" 2>&1; then
    echo "FAILED: a consumer using $mpicxx configured against paramwin built with another MPI"
    exit 1
  fi
  # CMake wraps the message over lines: join them, and print it for the pass expression.
  message=$(tr -s ' \n' ' ' <"$work/configure.log" |
            grep -o 'paramwin at .* was built with MPI .*(scripts/setup.sh --mpi)\.' || true)
  if [ -z "$message" ]; then
    echo "FAILED: configuration failed, but not with paramwin's MPI message:"
    cat "$work/configure.log"
    exit 1
  fi
  echo "$message"
  echo "mixed MPI refused"
  exit 0
fi
cmake -S "$src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DMPI_CXX_COMPILER="$mpicxx" -DMPIEXEC_EXECUTABLE="$mpiexec" >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
"$mpiexec" -n 2 "$work/build/consumer"
