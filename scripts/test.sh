#!/usr/bin/env bash
# Sets up, builds (warnings are errors) and runs the whole test suite.
#   scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --werror --build-dir build
cd build
# MPICH busy-polls; 4-rank tests oversubscribe the 2 cores, so run tests one at a time.
ctest --output-on-failure --timeout 600 "$@"
