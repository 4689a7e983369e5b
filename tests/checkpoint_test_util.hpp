#pragma once
// Helpers shared by the in-process checkpoint tests (checkpoint_mpi_test,
// group_checkpoint_mpi_test): a fresh directory per test, the ageing options whose deaths the
// restored state must replay, and a rank-0-only section.
#include <mpi.h>

#include <filesystem>
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

}  // namespace paramwin::test
