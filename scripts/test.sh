#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs the whole test suite.
#   scripts/test.sh [extra ctest arguments]
# The emulated multi-host tests (label multihost, needing root and network namespaces) are
# not part of this run yet: they still hang intermittently at MPI_Finalize across the
# emulated hosts (see docs/cluster.md). Run them with PARAMWIN_MULTIHOST=1 scripts/test.sh
# or `ctest -L multihost` in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --werror --build-dir build
cd build
exclude=(-LE multihost)
[ "${PARAMWIN_MULTIHOST:-0}" = 1 ] && exclude=()
# MPICH busy-polls; 4-rank tests oversubscribe the 2 cores, so run tests one at a time.
ctest --output-on-failure --timeout 600 "${exclude[@]}" "$@"
