#!/usr/bin/env bash
# Installs what paramwin needs from Debian's archive (idempotent), then configures and
# builds it with the chosen MPI pinned explicitly (its wrapper and launcher named by path).
#   scripts/setup.sh [--mpi mpich|openmpi] [--build-dir DIR] [--no-torch] [--sanitize] [--werror]
#                    [--no-build]
# --mpi picks the MPI (default mpich, the primary; openmpi: Debian's Open MPI 4.1, see
# docs/rma-semantics.md). A build directory belongs to one MPI: use another --build-dir for the
# other one (scripts/test.sh uses build and build-openmpi).
# LibTorch (libtorch-dev, ~150 packages, for the paramwin::torch adapter) is installed by
# default; --no-torch skips it (the adapter is then not built). --torch is accepted as before.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
mpi=mpich
torch=1
sanitize=0
werror=0
do_build=1
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
    --no-build) do_build=0; shift ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# doxygen: the `docs` target; clang-format: scripts/format.sh and the format_check test;
# python3-matplotlib: scripts/lineage.py (the pbt example and the lineage_script test);
# clang-tidy: scripts/tidy.sh and the clang_tidy test (Debian 12's is clang-tidy 14).
packages=(build-essential cmake libtrilinos-kokkos-dev libgtest-dev
          libbenchmark-dev gnuplot-nox doxygen clang-format python3-matplotlib clang-tidy)
if [ "$mpi" = mpich ]; then
  # libhdf5-*-dev: the parallel HDF5 of this MPI (population checkpoints, docs/checkpoints.md).
  packages+=(libhdf5-mpich-dev)
  # python3-numpy: PB2's reference numbers (tests/agent/pb2_reference.py).
  packages+=(python3-numpy)
  # python3-torch: checkpoint_h5py loads a checkpoint into a torch model (runs in this pass).
  packages+=(python3-torch)
  mpi_bin_pkg=mpich
  cmake_mpi=MPICH
else
  packages+=(libhdf5-openmpi-dev)
  # The Python package (docs/python.md) is built against mpi4py's MPI, which in Debian is
  # Open MPI: its build and its tests (label python) belong to the Open MPI pass.
  packages+=(python3-dev pybind11-dev python3-torch python3-mpi4py python3-pytest python3-numpy
            python3-h5py)
  # The Fashion-MNIST population benchmark (benchmarks/pbt_fashion, its short version is a
  # test of this pass): the dataset (never downloaded) and Optuna, one of its baselines.
  packages+=(dataset-fashion-mnist python3-optuna)
  # python3-venv, python3-pip, python3-build: `pip install .` and `python -m build --wheel` of
  # the package into a virtual environment, offline (docs/python.md; tests python.venv_*).
  packages+=(python3-venv python3-pip python3-build)
  mpi_bin_pkg=openmpi-bin
  cmake_mpi=OpenMPI
fi
# Both MPIs' wrappers in either pass: the build's own, and the other one for the test
# install_consumer.mixed_mpi, which configures a consumer with it (refused, naming both);
# without it on a fresh machine the test would not exist (the MPICH build is configured before
# the Open MPI pass runs). libxxhash-dev: checkpoint checksums. libeigen3-dev: PB2's Gaussian
# process (src/decision/gp.cpp; header-only, private to the library).
packages+=(mpich libmpich-dev openmpi-bin libopenmpi-dev libxxhash-dev libeigen3-dev)
[ "$torch" = 1 ] && packages+=(libtorch-dev)
# slurm-wlm, munge: scripts/slurm.sh (the Slurm tests, label slurm); python3-h5py:
# scripts/slurm/compare_checkpoints.py (the requeue test compares checkpoints with it).
packages+=(slurm-wlm munge python3-h5py)

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
[ "$torch" = 0 ] && cmake_args+=(-DPARAMWIN_WITH_TORCH=OFF)
# Debian's interpreter, the one with python3-mpi4py and python3-torch (a python3 earlier on
# PATH, e.g. pyenv's, has neither).
[ "$mpi" = openmpi ] && cmake_args+=(-DPython3_EXECUTABLE=/usr/bin/python3)
[ "$sanitize" = 1 ] && cmake_args+=(-DPARAMWIN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ "$werror" = 1 ] && cmake_args+=(-DPARAMWIN_WERROR=ON)
cmake "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
