#!/usr/bin/env bash
# Installs what paramwin needs from Debian's archive (idempotent), then configures and
# builds it with the chosen MPI pinned explicitly (its wrapper and launcher named by path).
#   scripts/setup.sh [--mpi mpich|openmpi] [--build-dir DIR] [--minimal] [--target T]...
#                    [--no-torch] [--sanitize] [--no-werror] [--no-build] [--ccache]
#                    [-DNAME=VALUE]...
# --mpi picks the MPI (default mpich, the primary; openmpi: Debian's Open MPI 4.1, see
# docs/rma-semantics.md). A build directory belongs to one MPI: use another --build-dir for the
# other one (scripts/test.sh uses build and build-openmpi).
# --minimal installs only what the library and the C++ examples need (the MPI, Kokkos, HDF5,
# Eigen, xxHash, GoogleTest and Google Benchmark for the configure, gnuplot for the plots): no
# LibTorch, Python, Slurm, linters or the other MPI. scripts/demo.sh uses it; a later run
# without it installs the rest and configures the same build directory again (same flags,
# nothing built twice).
# --target T builds only target T (repeatable; default: everything).
# --ccache installs ccache and compiles through it (CMAKE_CXX_COMPILER_LAUNCHER): the Open MPI
# pass of scripts/test.sh uses it, so that its python.venv_pip test (pip's own build of the
# library, same flags) reuses the pass's objects instead of compiling them again.
# -DNAME=VALUE is passed to CMake's configure (e.g. -DPARAMWIN_BUILD_BENCHMARKS=OFF); CMake
# keeps it in the build directory's cache for later runs.
# Every caller configures a build directory with the same flags (warnings are errors: the
# code builds clean with Debian 12's GCC 12), so that the demo, scripts/test.sh,
# scripts/torch_demo.sh and scripts/bench.sh reuse each other's objects; --no-werror turns
# that off (then use a build directory of its own). --werror is accepted as before.
# LibTorch (libtorch-dev, ~150 packages, for the paramwin::torch adapter) is installed unless
# --minimal or --no-torch (the adapter is then not built). --torch is accepted as before.
# The configure step is skipped when the build directory was last configured by this script
# with the same options and the same installed packages (a re-run takes seconds); the build
# step still re-runs CMake by itself when a CMakeLists.txt changed.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
mpi=mpich
torch=1
sanitize=0
werror=1
do_build=1
minimal=0
targets=()
cmake_defs=()
ccache=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --mpi)
      mpi=${2:-}
      case "$mpi" in
        mpich|openmpi) ;;
        *) echo "setup.sh: --mpi takes mpich or openmpi, not '$mpi'" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --torch) torch=1; shift ;;
    --no-torch) torch=0; shift ;;
    --sanitize) sanitize=1; shift ;;
    --werror) werror=1; shift ;;
    --no-werror) werror=0; shift ;;
    --minimal) minimal=1; shift ;;
    --target) targets+=("${2:?--target takes a target name}"); shift 2 ;;
    --no-build) do_build=0; shift ;;
    --ccache) ccache=1; shift ;;
    -D*) cmake_defs+=("$1"); shift ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# What the library and the C++ examples need (--minimal stops here). The configure needs
# GoogleTest and Google Benchmark (small, header and static libraries) for the test and
# benchmark directories; gnuplot-nox draws the examples' plots. libxxhash-dev: checkpoint
# checksums. libeigen3-dev: PB2's Gaussian process (src/decision/gp.cpp; header-only, private to
# the library). nlohmann-json3-dev: the event log's JSON, written and read back
# (src/agent/event.cpp and the tests; header-only, private to the library). libhdf5-*-dev: the
# parallel HDF5 of this MPI (population checkpoints, docs/checkpoints.md).
packages=(build-essential cmake libtrilinos-kokkos-dev libgtest-dev libbenchmark-dev gnuplot-nox
          libxxhash-dev libeigen3-dev nlohmann-json3-dev)
if [ "$mpi" = mpich ]; then
  packages+=(mpich libmpich-dev libhdf5-mpich-dev)
  mpi_bin_pkg=mpich
  cmake_mpi=MPICH
else
  packages+=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev)
  mpi_bin_pkg=openmpi-bin
  cmake_mpi=OpenMPI
fi
if [ "$minimal" = 0 ]; then
  # doxygen: the `docs` target; clang-format: scripts/format.sh and the format_check test;
  # python3-matplotlib: scripts/lineage.py (the pbt example and the lineage_script test);
  # clang-tidy: scripts/tidy.sh and the clang_tidy test (Debian 12's is clang-tidy 14; it pulls
  # clang-14, whose preprocessor keys scripts/tidy/clean.txt: scripts/tidy/cache.py).
  packages+=(doxygen clang-format python3-matplotlib clang-tidy)
  if [ "$mpi" = mpich ]; then
    # python3-numpy: PB2's reference numbers (tests/agent/pb2_reference.py).
    # python3-torch: checkpoint_h5py loads a checkpoint into a torch model (runs in this pass).
    packages+=(python3-numpy python3-torch)
  else
    # The Python package (docs/python.md) is built against mpi4py's MPI, which in Debian is
    # Open MPI: its build and its tests (label python) belong to the Open MPI pass.
    packages+=(python3-dev pybind11-dev python3-torch python3-mpi4py python3-pytest python3-numpy
              python3-h5py)
    # The Fashion-MNIST population benchmark (benchmarks/pbt_fashion, its short version is a
    # test of this pass): the dataset (never downloaded) and Optuna, one of its baselines. The
    # data-parallel averaging benchmark (benchmarks/averaging_fashion, also a test of this pass)
    # needs the dataset, python3-torch (gloo), python3-mpi4py and python3-matplotlib above.
    packages+=(dataset-fashion-mnist python3-optuna)
    # python3-venv, python3-pip, python3-build: `pip install .` and `python -m build --wheel` of
    # the package into a virtual environment, offline (docs/python.md; tests python.venv_*).
    packages+=(python3-venv python3-pip python3-build)
  fi
  # Both MPIs' wrappers in either pass: the build's own, and the other one for the test
  # install_consumer.mixed_mpi, which configures a consumer with it (refused, naming both);
  # without it on a fresh machine the test would not exist (the MPICH build is configured
  # before the Open MPI pass runs).
  packages+=(mpich libmpich-dev openmpi-bin libopenmpi-dev)
  [ "$torch" = 1 ] && packages+=(libtorch-dev)
  # slurm-wlm, munge: scripts/slurm.sh (the Slurm tests, label slurm); python3-h5py:
  # scripts/slurm/compare_checkpoints.py (the requeue test compares checkpoints with it).
  packages+=(slurm-wlm munge python3-h5py)
  # git: scripts/tidy.sh and scripts/check_docs.py (tests clang_tidy, docs_check*) list the
  # tracked sources and check cited commits; iproute2: the emulated hosts of the multihost
  # tests (scripts/multihost.sh needs `ip`). A fresh Debian 12 (minbase) has neither.
  packages+=(git iproute2)
fi

[ "$ccache" = 1 ] && packages+=(ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Installing libtorch-dev pulls Open MPI and flips the mpicxx/mpiexec alternatives: always
# name the chosen MPI's wrapper and launcher explicitly.
for tool in /usr/bin/mpicxx.$mpi /usr/bin/mpiexec.$mpi; do
  [ -x "$tool" ] || { echo "setup: $tool missing (package $mpi_bin_pkg)" >&2; exit 1; }
done

[ "$do_build" = 1 ] || exit 0
cmake_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DPARAMWIN_MPI="$cmake_mpi"
            -DMPI_CXX_COMPILER="/usr/bin/mpicxx.$mpi"
            -DMPIEXEC_EXECUTABLE="/usr/bin/mpiexec.$mpi")
if [ "$torch" = 0 ]; then cmake_args+=(-DPARAMWIN_WITH_TORCH=OFF); else cmake_args+=(-DPARAMWIN_WITH_TORCH=ON); fi
# Debian's interpreter, the one with python3-mpi4py and python3-torch (a python3 earlier on
# PATH, e.g. pyenv's, has neither).
[ "$mpi" = openmpi ] && cmake_args+=(-DPython3_EXECUTABLE=/usr/bin/python3)
[ "$sanitize" = 1 ] && cmake_args+=(-DPARAMWIN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ "$werror" = 1 ] && cmake_args+=(-DPARAMWIN_WERROR=ON)
[ "$ccache" = 1 ] && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake_args+=("${cmake_defs[@]}")
# The stamp: these options and the machine's installed packages. Equal to the last
# configure's: skip it (CMake re-runs by itself when a CMakeLists.txt changes); anything
# installed or removed since (e.g. LibTorch after --minimal): configure again, same flags.
stamp=$(printf '%s\n' "${cmake_args[@]}" "launcher=${CMAKE_CXX_COMPILER_LAUNCHER:-}"
        command -v nvcc || true; ls -d /usr/local/cuda* 2>/dev/null || true
        dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' | md5sum)
stamp_file=$build_dir/.paramwin_setup_stamp
if [ -f "$build_dir/CMakeCache.txt" ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ]; then
  echo "setup: $build_dir is configured with these options and packages already"
else
  rm -f "$stamp_file"
  cmake "${cmake_args[@]}" >/dev/null
  printf '%s\n' "$stamp" >"$stamp_file"
fi
build_args=(--build "$build_dir" -j "$(nproc)")
[ ${#targets[@]} -gt 0 ] && build_args+=(--target "${targets[@]}")
cmake "${build_args[@]}"
