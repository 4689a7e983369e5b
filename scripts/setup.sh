#!/usr/bin/env bash
# Installs what paramwin needs from Debian's archive (idempotent), then configures and
# builds it with MPICH pinned explicitly.
#   scripts/setup.sh [--build-dir DIR] [--no-torch] [--sanitize] [--werror] [--no-build]
# LibTorch (libtorch-dev, ~150 packages, for the paramwin::torch adapter) is installed by
# default; --no-torch skips it (the adapter is then not built). --torch is accepted as before.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
torch=1
sanitize=0
werror=0
do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --torch) torch=1; shift ;;
    --no-torch) torch=0; shift ;;
    --sanitize) sanitize=1; shift ;;
    --werror) werror=1; shift ;;
    --no-build) do_build=0; shift ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# doxygen: the `docs` target; clang-format: scripts/format.sh and the format_check test;
# python3-matplotlib: scripts/lineage.py (the pbt example and the lineage_script test).
packages=(build-essential cmake mpich libmpich-dev libtrilinos-kokkos-dev libgtest-dev
          libbenchmark-dev gnuplot-nox doxygen clang-format python3-matplotlib)
[ "$torch" = 1 ] && packages+=(libtorch-dev)

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
# name the MPICH wrapper and launcher explicitly.
for tool in /usr/bin/mpicxx.mpich /usr/bin/mpiexec.mpich; do
  [ -x "$tool" ] || { echo "setup: $tool missing (package mpich)" >&2; exit 1; }
done

[ "$do_build" = 1 ] || exit 0
cmake_args=(-S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
            -DMPI_CXX_COMPILER=/usr/bin/mpicxx.mpich
            -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich)
[ "$torch" = 0 ] && cmake_args+=(-DPARAMWIN_WITH_TORCH=OFF)
[ "$sanitize" = 1 ] && cmake_args+=(-DPARAMWIN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ "$werror" = 1 ] && cmake_args+=(-DPARAMWIN_WERROR=ON)
cmake "${cmake_args[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
