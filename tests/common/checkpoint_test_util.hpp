#pragma once
// Helpers shared by the in-process checkpoint tests (checkpoint_mpi_test,
// group_checkpoint_mpi_test): a fresh directory per test, the ageing options whose deaths the
// restored state must replay, a rank-0-only section, a bit flipped in a stored dataset, and the
// step()-driven save test both agent kinds run.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "formula_params.hpp"
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

/// Saves from step() (every 3 steps into @p dir/pop-{step}.h5, the newest 2 kept,
/// CheckpointOptions::async = @p async), then resume_newest() in a new agent and in one whose
/// pattern names no file. @p make(options) builds an agent of the kind under test over
/// formula_layout(12, 3) (Agent<> or GroupAgent); @p who is this rank's agent id. A save inside
/// step() is collective, so every agent steps together here.
template <class Make>
void check_step_saves(const std::string& dir, bool async, int who, Make make) {
  AgentOptions o = quiet_options();  // no deaths: the parameters are the trainer's
  o.checkpoint.every = 3;
  o.checkpoint.keep = 2;
  o.checkpoint.async = async;
  o.checkpoint.path = dir + "/pop-{step}.h5";
  FormulaParams<12, 3> p;
  p.fill(who, 1);
  auto a = make(o);
  (void)a.publish(p.crefs());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < 10; ++i) {
    for (float& x : p.w) x += 1.0F;
    (void)a.step(i, static_cast<double>(p.w[0]), p.refs());
  }
  a.wait_checkpoint();
  MPI_Barrier(MPI_COMM_WORLD);
  // Saved at 3, 6, 9; the newest 2 are kept.
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(o.checkpoint.path, 3)));
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(o.checkpoint.path, 6)));
  EXPECT_TRUE(std::filesystem::exists(checkpoint_path(o.checkpoint.path, 9)));
  EXPECT_EQ(newest_checkpoint(o.checkpoint.path), checkpoint_path(o.checkpoint.path, 9));

  FormulaParams<12, 3> q;
  auto b = make(o);
  const std::optional<CheckpointLoad> l = b.resume_newest(q.refs());
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->steps, 9);
  EXPECT_EQ(b.steps(), 9);
  // The file holds the parameters as step 9 left them (the 10th step changed them after).
  for (std::size_t i = 0; i < q.w.size(); ++i) EXPECT_EQ(q.w[i] + 1.0F, p.w[i]) << i;

  AgentOptions none = o;
  none.checkpoint.path = dir + "/absent-{step}.h5";
  auto c = make(none);
  FormulaParams<12, 3> r;
  r.fill(who, 5);
  EXPECT_FALSE(c.resume_newest(r.refs()).has_value());
  EXPECT_TRUE(r.is(who, 5));
}

}  // namespace paramwin::test
