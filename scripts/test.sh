#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs the whole test suite.
#   scripts/test.sh [extra ctest arguments]
# This includes the emulated multi-host tests (label multihost: two hosts built from network,
# IPC, UTS and mount namespaces on this machine, scripts/multihost.sh; about 25 s in all here).
# They need root; without it (or where namespaces cannot be created) they exit 77 and CTest
# reports them as skipped, so a non-root run still passes. Their former intermittent hang in
# MPI_Finalize (an MPICH 4.0.2 ch4:ucx bug over UCX's TCP transport) is avoided by a shim the
# harness preloads into the ranks; see docs/cluster.md. PARAMWIN_MULTIHOST=0 scripts/test.sh
# leaves them out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --werror --build-dir build
cd build
exclude=()
[ "${PARAMWIN_MULTIHOST:-1}" = 0 ] && exclude=(-LE multihost)
# MPICH busy-polls; 4-rank tests oversubscribe the 2 cores, so run tests one at a time (the
# multihost tests are RUN_SERIAL as well).
ctest --output-on-failure --timeout 600 "${exclude[@]}" "$@"
