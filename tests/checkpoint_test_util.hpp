#pragma once
// Helpers shared by the in-process checkpoint tests (checkpoint_mpi_test,
// group_checkpoint_mpi_test): a fresh directory per test, the ageing options whose deaths the
// restored state must replay, a rank-0-only section and a bit flipped in a stored dataset.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::test {

/// "<binary>.np<ranks>/<name>", shared by the ranks: rank 0 makes it exist and empty.
inline std::string fresh_checkpoint_dir(const std::string& binary, const std::string& name) {
  const std::string dir = binary + ".np" + std::to_string(world_size()) + "/" + name;
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

/// Agents that die of age every 2..4 steps, reborn from one donor (seed 3).
inline AgentOptions ageing_options() {
  AgentOptions o;
  o.seed = 3;
  o.triggers.age = {.enabled = true, .lo = 2, .hi = 4};
  o.selection.k = 1;
  o.selection.shortfall = Shortfall::clamp;
  return o;
}

/// Runs @p fn on rank 0 only; the others wait for it.
template <class F>
void on_rank0(F fn) {
  if (world_rank() == 0) fn();
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Flips one bit of dataset @p dataset's stored bytes in the file @p path (on rank 0; the
/// others wait), behind HDF5's back: only the dataset's checksum can tell.
inline void flip_a_bit(const std::string& path, const std::string& dataset) {
  on_rank0([&] {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    const haddr_t offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(offset, HADDR_UNDEF);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(offset + 5));
    char c = 0;
    file.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    file.seekp(static_cast<std::streamoff>(offset + 5));
    file.write(&c, 1);
  });
}

}  // namespace paramwin::test
