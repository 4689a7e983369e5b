#!/usr/bin/env bash
# Builds the LibTorch adapter's tests against a given LibTorch (by default the one of
# `python3`'s torch, e.g. a CUDA pip wheel) and runs them on 1, 2 and 4 ranks, the CUDA
# tests (TorchDevice.*) included; optionally builds paramwin_bench and runs the Intel/AMD
# kernel rows of issue 18. Made for a GPU machine that has CUDA and PyTorch but not
# MPICH, Kokkos or GoogleTest: those come as Debian packages unpacked into a prefix
# (dpkg -x, never into /), see docs/torch.md "CUDA".
#   scripts/gpu_check.sh [--debs DIR] [--prefix DIR] [--torch-dir DIR] [--build-dir DIR]
#                        [--out DIR] [--jobs N] [--bench] [--bench-filter REGEX]
#                        [--ctest SECONDS] [--launcher-fork] [--bench-stores MODES]
#                        [--bench-rounds N] [--bench-only] [--no-device]
#                        [--device-sizes LIST] [--device-only] [--adapter-only]
#                        [--torch-bench-sizes LIST] [--device-no-host] [--python]
#                        [--no-torch-bench] [--python-only] [--python-files LIST]
# --debs DIR: unpack every DIR/*.deb into --prefix (default /opt/deb) and use MPICH,
#             Kokkos, GoogleTest (and Google Benchmark) from there; without it, /usr's.
# --torch-dir: a directory holding TorchConfig.cmake or a CMake prefix path above it
#             (default: python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').
# --bench: also paramwin_bench on 2 ranks, by default issue 18's rows (shm wire at 50M,
#          publish vs memcpy at 10M and 50M); --bench-filter replaces the filter.
# --bench-stores MODES: run the bench once per store mode (comma-separated: automatic,
#          regular, streaming; PARAMWIN_BENCH_STORES), alternating, --bench-rounds times
#          (default 1): bench_MODE_rROUND.json, for side-by-side medians of the kernels' two
#          store paths in one binary (docs/benchmarks-intel.md).
# --bench-only: skip the LibTorch adapter's build and tests (implies --bench).
# --ctest SECONDS: also build everything and run the CTest suite (without the multihost,
#          install and lint labels) for at most SECONDS.
# Device windows (issue 25, docs/gpu.md), on by default where nvcc is found (--no-device: off):
#          device_options_mpi_test on 2 ranks, device_window_mpi_test on 1, 2 and 4 ranks sharing
#          the GPU with VMM slots (PARAMWIN_DEVICE_SHARING=vmm) and on 2 with CUDA IPC slots
#          (fails when a GPU is present but its tests skip), elastic_spare --cuda on 6 ranks (a
#          population on a device window: an exit, and a resignation with the standing window;
#          elastic_cuda_*.log), then paramwin_device_bench on 4
#          ranks for --device-sizes (default 100M,250M float32 parameters), VMM then IPC.
#          Without --device-only or --adapter-only, one call does both: the device targets are
#          built first, LibTorch's in the background while the device tests run; then the
#          TorchAgent benchmark, the device benchmark, and the adapter's tests.
# --device-no-host: paramwin_device_bench without its host-staged rows (--no-host; the
#          TorchAgent benchmark measures host staging against device windows too).
# --python: also builds the Python package against the machine's mpi4py (pip's wheel, made to
#          load the unpacked MPICH as libmpi.so.12) and runs tests/python/test_checkpoint.py
#          (host windows) on 2 ranks, then its CUDA tests (tests/python/test_cuda_windows.py)
#          on 2 and 4 ranks, then test_averaging.py's CUDA and optimizer-state cases on 2
#          (python_averaging_np2.log), each in processes of their own, with scripts/crash_backtrace.c
#          preloaded: a crash's native frames land in crash_python_*.<pid>.resolved;
#          python_link.txt how the extension was linked (the C++ runtime the linker took);
#          python_env.txt says what was found, configure.log why the package was not built if
#          it was not.
# --no-torch-bench: the adapter's tests without paramwin_torch_device_bench.
# --python-only: the Python package alone (built with CUDA and the machine's torch): its steps
#          of --python, no C++ test or benchmark.
# --python-files LIST: instead of --python's steps, these test files (comma-separated) on 2
#          ranks each (python_<file>_np2.log).
# --device-only: the device windows alone (no LibTorch adapter tests, no paramwin_bench).
# --adapter-only: the LibTorch adapter's tests and paramwin_torch_device_bench (a CUDA model's
#          rebirth through TorchAgent, device windows against host staging, on 4 ranks, for
#          --torch-bench-sizes, default 100M,250M), without the device windows' own tests and
#          benchmark (a second call after --device-only).
# Logs go to --out (default out/gpu_check): env.txt, configure.log, build.log,
# build_torch.log, build_python.log, python_env.txt, python_test_checkpoint_np2.log,
# python_np{2,4}.log, crash_python_*.<pid>[.resolved] (after a crash), device_options.log,
# device_np{1,2,4}.log, device_ipc_np2.log, device_bench.txt, device_bench_ipc.txt,
# torch_device_bench.txt, torch_np{1,2,4}.log, torch_pbt_np{2,4}.log, bench.json / bench.txt,
# ctest.log. Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

debs=""
prefix=/opt/deb
torch_dir=""
build_dir=build-gpu
out=out/gpu_check
jobs=$(nproc)
bench=0
bench_filter='^(wire/pull_shm/wire:(native|bfloat16|float16)/n:50M|publish/(memcpy|paramwin/wire:(native|bfloat16))/n:(10M|50M))/'
ctest_seconds=0
bench_stores=""
bench_rounds=1
torch_tests=1
adapter=1
python_files=""
device=1
device_sizes=100M,250M
device_tests=1
torch_bench_sizes=100M,250M
device_bench_args=""
torch_bench=1
python_tests=0
# test_checkpoint.py (host windows) first: whether HDF5 from Python works on that machine at
# all (a device-window save_checkpoint crashed there at cd948f4).
python_host_files="tests/python/test_checkpoint.py"
python_cuda_file="tests/python/test_cuda_windows.py"
python_averaging_file="tests/python/test_averaging.py"
launcher=()
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --torch-dir) torch_dir=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --bench) bench=1; shift ;;
    --bench-filter) bench=1; bench_filter=$2; shift 2 ;;
    --ctest) ctest_seconds=$2; shift 2 ;;
    --bench-stores) bench=1; bench_stores=${2//,/ }; shift 2 ;;
    --bench-rounds) bench_rounds=$2; shift 2 ;;
    --bench-only) bench=1; torch_tests=0; shift ;;
    --no-device) device=0; shift ;;
    --device-sizes) device_sizes=$2; shift 2 ;;
    --device-only) device=1; torch_tests=0; bench=0; shift ;;
    --adapter-only) device=1; device_tests=0; torch_tests=1; bench=0; shift ;;
    --torch-bench-sizes) torch_bench_sizes=$2; shift 2 ;;
    --device-no-host) device_bench_args=--no-host; shift ;;
    --python) python_tests=1; shift ;;
    --no-torch-bench) torch_bench=0; shift ;;
    --python-only) python_tests=1; adapter=0; device_tests=0; bench=0; torch_bench=0; shift ;;
    --python-files) python_files=${2//,/ }; shift 2 ;;
    # Hydra starts local ranks by fork; HYDRA_LAUNCHER covers CTest's mpiexec calls too.
    --launcher-fork) launcher=(-launcher fork); export HYDRA_LAUNCHER=fork; shift ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
status=0
step() { echo "=== gpu_check: $* ($(date -Is))"; }

# --- the machine ----------------------------------------------------------------------------
step "environment"
{
  echo "date: $(date -Is)"
  # A tree exported with `git archive` (inside another checkout) names its commit in .gpu_commit.
  echo "commit: $(cat .gpu_commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -a
  grep -m1 PRETTY_NAME /etc/os-release 2>/dev/null
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  lscpu | grep -E '^(Model name|Vendor ID|CPU\(s\)|Thread|Core|Socket|L1d|L2|L3)'
  echo "avx512 flags: $(grep -m1 -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "compiler: $(c++ --version 2>&1 | head -1)"
  echo "nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -1)"
  echo "cmake: $(cmake --version | head -1)"
  echo "build flags in the environment: $(env | grep -E '^(LDFLAGS|CXXFLAGS|CFLAGS|CPPFLAGS|LIBRARY_PATH)=' | tr '\n' ' ')"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    "available", torch.cuda.is_available(),
    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
} 2>&1 | tee "$out/env.txt"

# --- dependencies from Debian packages ------------------------------------------------------
mpicxx=/usr/bin/mpicxx.mpich
mpiexec=/usr/bin/mpiexec.mpich
prefix_path=""
if [ -n "$debs" ]; then
  step "unpacking $(ls "$debs"/*.deb | wc -l) packages into $prefix"
  mkdir -p "$prefix"
  for f in "$debs"/*.deb; do dpkg -x "$f" "$prefix" || { echo "dpkg -x $f failed" >&2; exit 1; }; done
  lib=$prefix/usr/lib/x86_64-linux-gnu
  # The MPICH wrapper names /usr paths; point them at the prefix (FindMPI reads `-show`).
  sed -i -e "s|^prefix=/usr|prefix=$prefix/usr|" -e "s|^exec_prefix=/usr|exec_prefix=$prefix/usr|" \
    -e "s|^includedir=/usr|includedir=$prefix/usr|" -e "s|^libdir=/usr|libdir=$prefix/usr|" \
    "$prefix/usr/bin/mpicxx.mpich"
  mpicxx=$prefix/usr/bin/mpicxx.mpich
  mpiexec=$prefix/usr/bin/mpiexec.mpich
  export PATH=$prefix/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # Kokkos' exported include directory is wrong on Debian; cmake/RepairKokkos.cmake finds
  # the headers under <prefix>/include/trilinos through CMAKE_PREFIX_PATH.
  prefix_path="$prefix/usr"
  "$mpicxx" -show | tee -a "$out/env.txt"
  # Libraries the unpacked ones need that neither the prefix nor the system has.
  missing=$(for f in "$lib"/*.so*; do ldd "$f" 2>/dev/null; done | grep "not found" | sort -u)
  [ -z "$missing" ] || echo "gpu_check: missing libraries: $missing" | tee -a "$out/env.txt"
fi
[ -n "$torch_dir" ] || torch_dir=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
prefix_path="${prefix_path:+$prefix_path;}$torch_dir"
echo "torch cmake prefix: $torch_dir" | tee -a "$out/env.txt"

# --- configure and build --------------------------------------------------------------------
cmake_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
            -DMPI_CXX_COMPILER="$mpicxx" -DMPIEXEC_EXECUTABLE="$mpiexec"
            -DCMAKE_PREFIX_PATH="$prefix_path"
            -DPARAMWIN_BUILD_TESTS=ON -DPARAMWIN_BUILD_EXAMPLES=OFF
            -DPARAMWIN_BUILD_BENCHMARKS=$({ [ "$bench" = 1 ] || { [ "$torch_tests" = 1 ] &&
                                              [ "$device" = 1 ]; }; } && echo ON || echo OFF)
            -DPARAMWIN_HEADER_CHECK=OFF -DPARAMWIN_FORMAT_CHECK=OFF)
# MPICH's parallel HDF5 (checkpoints) from the unpacked packages.
[ -n "$debs" ] && cmake_args+=(-DPARAMWIN_HDF5_ROOT="$prefix/usr/lib/x86_64-linux-gnu/hdf5/mpich")
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
# A CUDA LibTorch's config looks for the CUDA toolkit (nvcc); device windows need it too.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}
fi
if [ "$device" = 1 ] && command -v nvcc >/dev/null; then
  cmake_args+=(-DPARAMWIN_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
else
  [ "$device" = 1 ] && echo "gpu_check: no nvcc, device windows are not built" | tee -a "$out/env.txt"
  device=0
  cmake_args+=(-DPARAMWIN_WITH_CUDA=OFF)
fi
# Device windows only: no LibTorch needed.
[ "$torch_tests" = 0 ] && cmake_args+=(-DPARAMWIN_WITH_TORCH=OFF -DPARAMWIN_WITH_PYTHON=OFF)
torch_cuda=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
# The Python package: pip's mpi4py loads an MPICH-ABI libmpi.so.12, which Debian's MPICH
# names libmpich.so.12; pybind11 from pip's module.
if [ "$python_tests" = 1 ] && [ "$torch_tests" = 1 ]; then
  [ -n "$debs" ] && ln -sf libmpich.so.12 "$lib/libmpi.so.12"
  export MPI4PY_MPIABI=mpich
  {
    python3 -c 'import mpi4py; print("mpi4py", mpi4py.__version__, mpi4py.__file__)' 2>&1
    python3 -c 'from mpi4py import MPI; print(MPI.get_vendor(), "|", MPI.Get_library_version().splitlines()[0])' 2>&1
    python3 -m pybind11 --version 2>&1
  } | tee "$out/python_env.txt"
  pybind_dir=$(python3 -m pybind11 --cmakedir 2>/dev/null) && cmake_args+=(-Dpybind11_DIR="$pybind_dir")
  cmake_args+=(-DPARAMWIN_WITH_PYTHON=ON)
else
  python_tests=0
fi
step "configure"
if ! cmake "${cmake_args[@]}" >"$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"
  echo "gpu_check: configure FAILED (log: configure.log)"
  exit 1
fi
grep -E "paramwin:|Torch|CUDA|Kokkos|MPI" "$out/configure.log" | head -20
if [ "$python_tests" = 1 ] && ! grep -q "building the Python package" "$out/configure.log"; then
  echo "gpu_check: the Python package is not built here (configure.log says why)"
  status=1
  python_tests=0
fi
device_targets=()
[ "$device" = 1 ] && [ "$device_tests" = 1 ] &&
  device_targets=(device_options_mpi_test device_window_mpi_test paramwin_device_bench
                  elastic_spare)
torch_targets=()
[ "$torch_tests" = 1 ] && [ "$adapter" = 1 ] &&
  torch_targets=(torch_adapter_mpi_test torch_pbt_mpi_test torch_averaging_mpi_test)
[ "$torch_tests" = 1 ] && [ "$adapter" = 1 ] && [ "$device" = 1 ] &&
  torch_targets+=(paramwin_torch_device_bench)
[ "$bench" = 1 ] && device_targets+=(paramwin_bench)
# build_targets LOG TARGET...: builds, prints the errors on failure.
build_targets() {
  local log=$1
  shift
  [ $# -gt 0 ] || return 0
  if ! cmake --build "$build_dir" -j "$jobs" --target "$@" >>"$out/$log" 2>&1; then
    grep -E "error|Error" "$out/$log" | head -40
    echo "gpu_check: build of $* FAILED (log: $log)"
    return 1
  fi
  echo "$log warnings: $(grep -c "warning:" "$out/$log")"
}
# The device windows' targets first; LibTorch's (the longest compile) then build in the
# background while the device tests run, so that one call does both.
step "build ${device_targets[*]} (-j $jobs)"
build_targets build.log "${device_targets[@]}" || { device_tests=0; bench=0; status=1; }
torch_build_pid=""
if [ "${#torch_targets[@]}" -gt 0 ]; then
  step "build ${torch_targets[*]} (-j $jobs)$([ "$device_tests" = 1 ] && echo ", in the background")"
  if [ "$device_tests" = 1 ]; then
    # Four cores fewer than the build's share, for the ranks of the tests.
    jobs=$((jobs > 8 ? jobs - 4 : jobs)) build_targets build_torch.log "${torch_targets[@]}" \
      >"$out/build_torch.summary" 2>&1 &
    torch_build_pid=$!
  else
    build_targets build_torch.log "${torch_targets[@]}" || { torch_tests=0; status=1; }
  fi
fi
[ "$device_tests" = 1 ] || [ "$torch_tests" = 1 ] || [ "$bench" = 1 ] || exit 1
# After the background build: the CUDA tests need libtorch_cuda loaded (its hooks answer
# torch::cuda::is_available()).
finish_torch_build() {
  if [ -n "$torch_build_pid" ]; then
    step "waiting for the background build of ${torch_targets[*]}"
    wait "$torch_build_pid" || { torch_tests=0; status=1; }
    cat "$out/build_torch.summary"
  fi
  [ "$torch_tests" = 1 ] || return 0
  local test_bin=$build_dir/tests/torch_adapter_mpi_test
  if [ "$adapter" = 1 ] && [ "$torch_cuda" = 1 ] && ! ldd "$test_bin" | grep -q libtorch_cuda; then
    echo "gpu_check: $test_bin does not load libtorch_cuda; relinking with it (--no-as-needed)"
    local torch_lib
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    cmake "${cmake_args[@]}" "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed -L$torch_lib -ltorch_cuda -Wl,--as-needed" \
      >>"$out/configure.log" 2>&1 && build_targets build_torch.log "${torch_targets[@]}" ||
      { echo "gpu_check: relink FAILED"; torch_tests=0; status=1; return 0; }
  fi
  [ "$adapter" = 1 ] && ldd "$test_bin" | grep -E "torch|c10|mpich|kokkos|cudart" | tee -a "$out/env.txt"
  # The Python package apart, so that its failure leaves the adapter's tests alone.
  if [ "$python_tests" = 1 ]; then
    step "build paramwin_python (-j $jobs)"
    build_targets build_python.log paramwin_python || { python_tests=0; status=1; }
    # How the extension was linked: the C++ runtime the linker took (a static libstdc++ in
    # _core.so crashed it at f212fbd) and what the extension exports of it.
    if [ "$python_tests" = 1 ]; then
      local link core
      link=$(cd "$build_dir" && ninja -t commands paramwin_python 2>/dev/null | tail -1)
      link=${link#: && }  # ninja's link line is ": && g++ ... && :"
      link=${link% && :}
      core=$(ls "$build_dir"/python/paramwin/_core*.so 2>/dev/null | head -1)
      {
        echo "c++ -print-file-name=libstdc++.so: $(c++ -print-file-name=libstdc++.so)" \
          "-> $(readlink -f "$(c++ -print-file-name=libstdc++.so)")"
        echo "link: $link"
        [ -n "$link" ] && (cd "$build_dir" && eval "$link -Wl,--trace" 2>&1 | grep -iE "stdc|gcc")
        echo "libstdc++ symbols _core.so exports: $(nm -D --defined-only "$core" | grep -c ' _ZNS[io]')"
        echo "libstdc++ objects in _core.so: $(nm "$core" | grep -c read_utf8_code_point)"
      } >"$out/python_link.txt" 2>&1
      tail -3 "$out/python_link.txt"
    fi
  fi
}

# --- device windows (issue 25) --------------------------------------------------------------
# device_bench BINARY SIZES LOG [ARG...]: a device benchmark on 4 ranks sharing the GPU, 7 runs a row,
# its log headed by the time, the load, the slots' sharing and the GPU.
device_bench() {
  step "$(basename "$1") on 4 ranks sharing the GPU, sizes $2, ${PARAMWIN_DEVICE_SHARING:-auto} slots"
  { date -Is; cat /proc/loadavg; echo "PARAMWIN_DEVICE_SHARING=${PARAMWIN_DEVICE_SHARING:-auto}"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1; } \
    >"$out/$3"
  timeout 200 "$mpiexec" -n 4 "${launcher[@]}" "$build_dir/$1" --sizes "$2" --reps 7 "${@:4}" \
    >>"$out/$3" 2>&1 || status=1
  grep -E "RESULT|_bench|rror" "$out/$3"
}
# mpi_run LOG SECONDS NP COMMAND...: COMMAND on NP ranks, its output in $out/LOG; prints the
# exit status, and the check fails when it is not 0.
mpi_run() {
  local log=$1 seconds=$2 np=$3
  shift 3
  timeout "$seconds" "$mpiexec" -n "$np" "${launcher[@]}" "$@" >"$out/$log" 2>&1
  local rc=$?
  echo "exit $rc"
  [ "$rc" = 0 ] || status=1
}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
if [ "$device" = 1 ] && [ "$device_tests" = 1 ]; then
  step "device_options_mpi_test on 2 ranks"
  mpi_run device_options.log 60 2 "$build_dir/tests/device_options_mpi_test"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +FAILED \]" "$out/device_options.log" | sort -u
  # VMM slots forced (a failure is an error, not a silent fallback to IPC) on 1, 2 and 4
  # ranks; CUDA IPC slots (the fallback) on 2.
  for run in vmm:1 vmm:2 vmm:4 ipc:2; do
    sharing=${run%:*} np=${run#*:}
    log="device_np$np.log"
    [ "$sharing" = ipc ] && log="device_ipc_np$np.log"
    step "device_window_mpi_test on $np rank(s) sharing the GPU, $sharing slots"
    mpi_run "$log" 150 "$np" env PARAMWIN_DEVICE_SHARING="$sharing" \
      "$build_dir/tests/device_window_mpi_test"
    if [ "$gpus" -gt 0 ] && grep -q "no CUDA device on some rank" "$out/$log"; then
      echo "gpu_check: a GPU is present but device window tests skipped"
      status=1
    fi
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +(FAILED|SKIPPED) \]|torn-read stress|busy donor" \
      "$out/$log" | sort -u | head -30
  done
fi
# Elastic populations on a device window: 4 members + 2 spares, two members leave (an exit, a
# resignation), spares take their slots from live donors' device snapshots, exact mixes checked
# (tests/reliability/elastic_spare.cpp --cuda), with a new window per epoch and the standing one.
if [ "$device" = 1 ] && [ "$device_tests" = 1 ]; then
  for run in exit resign:standing; do
    mode=${run%%:*} extra=()
    [ "$run" != "$mode" ] && extra=(--standing)
    log="elastic_cuda_${mode}.log"
    step "elastic_spare --$mode ${extra[*]} --cuda on 6 ranks sharing the GPU"
    # The launcher's exit status reports the dead rank: the pass line is the verdict.
    timeout 90 "$mpiexec" -n 6 "${launcher[@]}" -disable-auto-cleanup \
      "$build_dir/tests/elastic_spare" --"$mode" "${extra[@]}" --cuda >"$out/$log" 2>&1
    echo "exit $?"
    grep -q "elastic: spares took every dead slot" "$out/$log" || { echo "no pass line"; status=1; }
    grep -E "elastic:|joined slot|FAILED|rror" "$out/$log" | head -8
  done
fi
finish_torch_build

# A CUDA model's rebirth through TorchAgent, device windows against host staging (issue 25's
# target as stated: docs/gpu.md), then the device windows' own benchmark.
if [ "$torch_tests" = 1 ] && [ "$adapter" = 1 ] && [ "$device" = 1 ] && [ "$torch_bench" = 1 ]; then
  PARAMWIN_DEVICE_SHARING=vmm device_bench benchmarks/paramwin_torch_device_bench \
    "$torch_bench_sizes" torch_device_bench.txt
fi
if [ "$device" = 1 ] && [ "$device_tests" = 1 ]; then
  # VMM slots (the default), then CUDA IPC slots, in the same run.
  PARAMWIN_DEVICE_SHARING=vmm device_bench tests/paramwin_device_bench "$device_sizes" \
    device_bench.txt $device_bench_args
  PARAMWIN_DEVICE_SHARING=ipc device_bench tests/paramwin_device_bench "$device_sizes" \
    device_bench_ipc.txt --no-host
fi

# --- the adapter's tests, CUDA ones included ------------------------------------------------
for np in $([ "$torch_tests" = 1 ] && [ "$adapter" = 1 ] && echo 1 2 4); do
  step "torch_adapter_mpi_test on $np rank(s)"
  mpi_run "torch_np$np.log" 180 "$np" "$build_dir/tests/torch_adapter_mpi_test"
  if [ "$torch_cuda" = 1 ] && grep -q "^no CUDA device" "$out/torch_np$np.log"; then
    echo "gpu_check: CUDA is available but TorchDevice tests were skipped"
    status=1
  fi
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +(OK|FAILED|SKIPPED) \] TorchDevice|staging|cuda" \
    "$out/torch_np$np.log" | sort -u | head -30
done
# Optimizer state and optimizer options as hyperparameters (issue 15) against this LibTorch.
for np in $([ "$torch_tests" = 1 ] && [ "$adapter" = 1 ] && echo 2 4); do
  step "torch_pbt_mpi_test on $np ranks"
  mpi_run "torch_pbt_np$np.log" 180 "$np" "$build_dir/tests/torch_pbt_mpi_test"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +FAILED \]" "$out/torch_pbt_np$np.log" | sort -u | head -20
done

# Averaging a CUDA module (staged through pinned host buffers, docs/averaging.md).
if [ "$torch_tests" = 1 ] && [ "$adapter" = 1 ]; then
  step "torch_averaging_mpi_test TorchAveragingDevice.* on 2 ranks"
  mpi_run torch_averaging_np2.log 120 2 "$build_dir/tests/torch_averaging_mpi_test" \
    --gtest_filter='TorchAveragingDevice.*'
  if [ "$torch_cuda" = 1 ] && grep -q "no CUDA device" "$out/torch_averaging_np2.log"; then
    echo "gpu_check: CUDA is available but TorchAveragingDevice tests were skipped"
    status=1
  fi
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ +(OK|FAILED|SKIPPED) \]" \
    "$out/torch_averaging_np2.log" | sort -u | head -10
fi

# --- the Python package's CUDA tests (--python) ---------------------------------------------
# A crash's native frames: scripts/crash_backtrace.c, preloaded into the Python processes,
# writes them to $out/crash_<log>.<pid>; resolve_frames adds each frame's function and line.
resolve_frames() {  # resolve_frames FILE: FILE's frames in order, with addr2line's names
  grep -aE '\[0x[0-9a-f]+\]$' "$1" | while IFS= read -r frame; do
    local object=${frame%%(*} offset=${frame#*(}
    offset=${offset%%)*}
    if [ -f "$object" ] && [[ "$offset" == +0x* ]]; then
      printf '%s %s: %s\n' "$object" "${offset#+}" \
        "$(addr2line -f -C -i -e "$object" "${offset#+}" 2>/dev/null | paste -sd ' ' -)"
    else
      printf '%s\n' "$frame"
    fi
  done
}
crash_lib=""
if [ "$python_tests" = 1 ] && [ "$torch_tests" = 1 ]; then
  cc -shared -fPIC -O1 -o "$PWD/$build_dir/crash_backtrace.so" scripts/crash_backtrace.c &&
    crash_lib="$PWD/$build_dir/crash_backtrace.so"
fi
python_run() {  # python_run LOG NP TEST-FILE...: pytest on NP ranks, a crash's frames resolved
  local log=$1 np=$2
  shift 2
  rm -f "$out/crash_${log%.log}".*
  mpi_run "$log" 180 "$np" env PYTHONPATH="$build_dir/python" LD_PRELOAD="$crash_lib" \
    CRASH_BACKTRACE_PREFIX="$out/crash_${log%.log}" \
    python3 -m pytest -q -rs -p no:cacheprovider "$@"
  grep -E "passed|failed|skipped|rror" "$out/$log" | tail -5
  for frames in "$out/crash_${log%.log}".*; do
    [ -f "$frames" ] || continue
    resolve_frames "$frames" >"$frames.resolved"
    echo "gpu_check: a crash, native frames in $(basename "$frames").resolved:"
    grep -avE 'crash_backtrace|libc\.so|python3' "$frames.resolved" | head -12
  done
}
# The Python steps: --python-files alone, or the default ones.
if [ "$python_tests" = 1 ] && [ "$torch_tests" = 1 ]; then
  if [ -n "$python_files" ]; then
    for file in $python_files; do
      step "$file on 2 ranks"
      python_run "python_$(basename "$file" .py)_np2.log" 2 "$file"
    done
  else
    # Host windows first, in a process of their own: whether HDF5 checkpoints work from Python
    # on this machine at all (a device window's save_checkpoint crashed at cd948f4).
    for file in $python_host_files; do
      step "$file on 2 ranks"
      python_run "python_$(basename "$file" .py)_np2.log" 2 "$file"
    done
    for np in 2 4; do
      step "$python_cuda_file on $np ranks"
      python_run "python_np$np.log" "$np" "$python_cuda_file"
      if [ "$torch_cuda" = 1 ] && grep -q "is_available() is False" "$out/python_np$np.log"; then
        echo "gpu_check: CUDA is available but Python CUDA tests were skipped"
        status=1
      fi
    done
    # The averaging agents' CUDA cases (CUDA modules and their optimizer state staged).
    step "$python_averaging_file -k 'cuda or optimizer_state' on 2 ranks"
    python_run python_averaging_np2.log 2 "$python_averaging_file" -k "cuda or optimizer_state"
  fi
fi

# --- issue 18's kernel rows (optional) ------------------------------------------------------
run_bench() {  # run_bench JSON-NAME TIMEOUT (env: PARAMWIN_BENCH_STORES)
  timeout "$2" "$mpiexec" -n 2 "${launcher[@]}" "$build_dir/benchmarks/paramwin_bench" \
    --benchmark_filter="$bench_filter" \
    --benchmark_repetitions=5 --benchmark_min_time=0.1 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out/$1" --benchmark_out_format=json >>"$out/bench.txt" 2>&1 || status=1
}
if [ "$bench" = 1 ]; then
  step "paramwin_bench on 2 ranks, filter $bench_filter"
  { date -Is; cat /proc/loadavg; } >"$out/bench.txt"
  if [ -z "$bench_stores" ]; then
    run_bench bench.json 200
  else
    for round in $(seq 1 "$bench_rounds"); do
      for mode in $bench_stores; do
        echo "=== stores $mode, round $round ($(date -Is))" >>"$out/bench.txt"
        PARAMWIN_BENCH_STORES=$mode run_bench "bench_${mode}_r$round.json" 120
      done
    done
  fi
  cat /proc/loadavg >>"$out/bench.txt"
  grep -E "median|CPU|Run on|Load|===|paramwin_kernels" "$out/bench.txt"
fi

# --- the whole suite (optional) -------------------------------------------------------------
if [ "$ctest_seconds" -gt 0 ]; then
  step "build all, then ctest -LE 'multihost|install|lint' for at most $ctest_seconds s"
  if cmake --build "$build_dir" -j "$jobs" >>"$out/build.log" 2>&1; then
    (cd "$build_dir" && timeout "$ctest_seconds" ctest -LE 'multihost|install|lint' -j "$jobs" \
      --timeout 300 --output-on-failure >"$out/ctest.log" 2>&1) || status=1
    grep -E "tests passed|tests failed|\*\*\*|Failed|Timeout|Total Test time" "$out/ctest.log" | tail -n 30
  else
    grep -E "error" "$out/build.log" | head -20
    echo "gpu_check: full build FAILED"
    status=1
  fi
fi
step "done, status $status"
exit $status
