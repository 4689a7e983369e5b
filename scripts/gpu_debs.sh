#!/usr/bin/env bash
# Downloads (here, on the Debian build machine) the Debian packages that scripts/gpu_check.sh
# unpacks into a prefix on a GPU machine that has CUDA, CMake and PyTorch but not MPICH, Kokkos,
# GoogleTest, HDF5 (MPICH's parallel build) or xxHash. Never the base system's own libraries
# (libc, libstdc++, ...), which the GPU machine has and which must not shadow its own.
#   scripts/gpu_debs.sh [DIR]     (default out/debs; prints the count and total size)
# Then carry DIR to the GPU machine (the device tool's `carry`, at most 64 MiB in all) and run
#   scripts/gpu_check.sh --debs DIR --prefix /opt/deb --launcher-fork ...
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-out/debs}
mkdir -p "$dir"
# Named one by one, without the dependencies' closure (which pulls in compilers and fonts):
# what the build and the tests load, and the libraries those need beyond an Ubuntu 24.04 base.
pkgs=(mpich libmpich12 libmpich-dev hwloc-nox libhwloc15 libhwloc-dev libucx0 libucx-dev
      libibverbs1 librdmacm1 ibverbs-providers libnuma1 libslurm38 libgfortran5
      libtrilinos-kokkos-13.2 libtrilinos-kokkos-dev trilinos-dev
      libgtest-dev googletest
      libhdf5-mpich-103-1 libhdf5-mpich-dev libhdf5-mpich-hl-100 libhdf5-mpich-cpp-103-1
      libhdf5-mpich-hl-cpp-100 libsz2 libaec0 libaec-dev libcurl4
      libssh2-1 libldap-2.5-0 libsasl2-2 libsasl2-modules-db libdb5.3
      libxxhash0 libxxhash-dev libbenchmark1debian libbenchmark-dev)
rm -f "$dir"/*.deb
(cd "$dir" && apt-get download "${pkgs[@]}" >/dev/null)
echo "gpu_debs: $(ls "$dir"/*.deb | wc -l) packages, $(du -sh "$dir" | cut -f1) in $dir"
