#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the whole test suite
# (docs/reliability.md). Builds in build-asan (PARAMWIN_SANITIZE=ON, RelWithDebInfo, warnings
# are errors) and runs every CTest test that scripts/test.sh runs, under the sanitizers.
#   scripts/sanitize.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
# Benchmarks are not tests and are meaningless under the sanitizers: seed the cache without
# them (setup.sh keeps cached options), which saves a third of the sanitized build. Without
# CUDA too: the CUDA runtime is not instrumented (AddressSanitizer needs protect_shadow_gap=0
# beside it), and the device windows' code runs only on a GPU anyway (docs/gpu.md); the
# sanitized library refuses device windows as a build without the toolkit does.
# The public headers' stand-alone compile (PARAMWIN_HEADER_CHECK) is left out as well: it
# compiles, never runs, and the normal passes make it.
# Without LibTorch too (--no-torch): the C++ adapter (paramwin::torch), its tests and examples
# cost about 7 of the sanitized build's minutes on 2 cores (420 s of 600 s for the library and
# the adapter, measured 2026-12-03 at 80eb677), and LibTorch itself is not instrumented; the
# adapter reaches MPI and the windows only through the library, whose sanitized tests run here,
# and the normal MPICH pass builds and runs every adapter test.
# -O1 -g1 (line tables, enough for the sanitizers' stack traces) instead of RelWithDebInfo's
# -O2 -g: the sanitized build compiles in about half the time (20 s -> 9 s for
# src/decision/gp.cpp here); AddressSanitizer's documentation recommends -O1 anyway.
cmake -S . -B build-asan -DPARAMWIN_BUILD_BENCHMARKS=OFF -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich \
      -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich -DPARAMWIN_WITH_CUDA=OFF \
      -DPARAMWIN_HEADER_CHECK=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
bash scripts/setup.sh --sanitize --no-torch --werror --build-dir build-asan
cd build-asan
# UBSan: any finding aborts the test (-fno-sanitize-recover=undefined at compile time too).
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Sanitized tests run several times slower: give the per-test watchdog (tests/common/main_mpi.cpp)
# more room; CTest's timeout stays the outer bound.
export PARAMWIN_TEST_WATCHDOG_SECONDS="${PARAMWIN_TEST_WATCHDOG_SECONDS:-600}"
# install_consumer (label install) is left out: it builds a separate consumer project without
# sanitizer flags against the instrumented static library, which cannot link (__asan_* and
# __ubsan_* undefined); the normal pass (scripts/test.sh) runs it.
# lint (format_check, api_docs_check) checks sources, not code paths: the normal pass runs it.
# slurm is left out like multihost: each of its tests starts a Slurm cluster as root, and what
# its jobs run (the age-replacement demo) the sanitized example test runs already; the normal
# pass (scripts/test.sh) runs it.
# np8 (the 8-rank runs) is left out too, and so is the 4-rank run of every test that also runs
# on 1 or 2 ranks here: 4 or 8 instrumented ranks that busy-poll on 2 cores. The sanitizers look
# for memory errors in code paths, which the 1- and 2-rank runs take as well; the tests that run
# only on 4 ranks (the examples, pb2_mpi_test, pbt_fidelity_mpi_test, ...) and the two soaks (4
# ranks publishing and pulling at once on both transports; agents that die and are reborn)
# stay in, and both normal passes run every 4- and 8-rank run. The project's CI stopped at its
# 90-minute limit in this pass twice (2026-12-01, 2026-12-02); the 4-rank runs took 270 of its
# 409 s on the development VM.
mpi_labels_out="serial|multihost|slurm|install|lint|np8"
[ "${PARAMWIN_MULTIHOST:-0}" = 1 ] && mpi_labels_out="serial|slurm|install|lint|np8"
tests_of() { ctest -N -L "$1" | sed -n "s/^ *Test *#[0-9]*: \(.*\)\.$2\$/\1/p" | sort -u; }
np4_also_smaller=$(comm -12 <(tests_of np4 np4) <(tests_of 'np1|np2' 'np[12]') |
                   grep -v -E '^(soak_mpi_test|agent_soak_mpi_test)$' | paste -sd'|')
np4_out=()
[ -n "$np4_also_smaller" ] && np4_out=(-E "^($np4_also_smaller)\.np4\$")
# Serial tests never start MPI: full leak checking.
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
  ctest --output-on-failure --timeout 900 -L serial "$@"
# Everything that runs under MPI: leak checking off. MPICH/UCX allocate in transport modules
# they dlopen and unload again at MPI_Finalize; LeakSanitizer then reports ~1 KB per process
# from "<unknown module>" frames, which no suppression can name (a suppression matches a
# function, file or module name). Memory errors (overflows, use-after-free) are still fatal.
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}" \
  ctest --output-on-failure --timeout 900 -LE "$mpi_labels_out" "${np4_out[@]}" "$@"
