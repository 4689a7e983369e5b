// Device windows (Memory::cuda, docs/gpu.md): the checks that need no GPU, run on every
// machine (CI has none): option combinations refused on every rank, memory that differs across
// ranks, and the refusal of a device window where this process sees no device (or the build
// has no CUDA). The GPU's own tests are tests/cuda/device_window_mpi_test.cpp.
#include <mpi.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

pw::Layout small_layout() {
  pw::Layout layout;
  layout.add("w", std::size_t{1000});
  return layout;
}

/// Creates a window with @p options and returns the exception's message ("" if none), after
/// checking its type is @p E.
template <class E>
std::string creation_error(const pw::WindowOptions& options) {
  try {
    pw::ParameterWindow<> win(MPI_COMM_WORLD, small_layout(), options);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another exception type: " << e.what();
    return e.what();
  }
  return {};
}

TEST(DeviceWindowOptions, LiveExposureIsRefusedOnEveryRank) {
  const std::string e = creation_error<pw::InvalidArgument>(
      {.exposure = pw::Exposure::live, .memory = pw::Memory::cuda});
  EXPECT_NE(e.find("device window (Memory::cuda) publishes snapshots only"), std::string::npos)
      << e;
}

TEST(DeviceWindowOptions, StageThroughHostIsRefusedOnEveryRank) {
  const std::string e =
      creation_error<pw::InvalidArgument>({.stage_through_host = true, .memory = pw::Memory::cuda});
  EXPECT_NE(e.find("stage_through_host"), std::string::npos) << e;
}

TEST(DeviceWindowOptions, NegativeDeviceOrdinalIsRefusedOnEveryRank) {
  const std::string e =
      creation_error<pw::InvalidArgument>({.memory = pw::Memory::cuda, .cuda_device = -2});
  EXPECT_NE(e.find("cuda_device -2 is not a device ordinal"), std::string::npos) << e;
}

TEST(DeviceWindowOptions, OutOfRangeMemoryIsRefusedOnEveryRank) {
  const std::string e = creation_error<pw::InvalidArgument>({.memory = static_cast<pw::Memory>(7)});
  EXPECT_NE(e.find("out-of-range enumerator"), std::string::npos) << e;
}

TEST(DeviceWindowOptions, MemoryThatDiffersAcrossRanksIsRefusedOnEveryRank) {
  PARAMWIN_REQUIRE_RANKS(2);
  // Refused before any device is touched, so it runs without a GPU too.
  pw::WindowOptions o;
  o.memory = pw::test::world_rank() == 0 ? pw::Memory::cuda : pw::Memory::host;
  const std::string e = creation_error<pw::InvalidArgument>(o);
  EXPECT_NE(e.find("WindowOptions::memory differs across ranks"), std::string::npos) << e;
}

TEST(DeviceWindowOptions, DeviceWindowWithoutADeviceFailsOnEveryRankAndHostWindowsStillWork) {
  int devices = 0;
  {
    // A probe that needs no CUDA header: a device window creation that succeeds means a GPU.
    try {
      pw::ParameterWindow<> probe(MPI_COMM_WORLD, small_layout(), {.memory = pw::Memory::cuda});
      devices = 1;
    } catch (const pw::Error& e) {
      const std::string what = e.what();
      // Every rank fails: its own reason, or the lowest failing rank's.
      EXPECT_TRUE(what.find("needs a CUDA device") != std::string::npos ||
                  what.find("built without CUDA") != std::string::npos ||
                  what.find("rank 0 failed") != std::string::npos)
          << what;
    }
  }
  if (devices != 0) {
    GTEST_SKIP() << "this machine has a CUDA device: tests/cuda covers device windows here";
  }
  // Nothing was left behind: a host window of the same communicator works.
  pw::ParameterWindow<> win(MPI_COMM_WORLD, small_layout());
  std::vector<float> w(1000, 1.0F);
  EXPECT_TRUE(win.publish({w}).published);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DeviceWindowOptions, UnknownDeviceSharingIsRefusedOnEveryRankBeforeAnyDeviceWork) {
  // PARAMWIN_DEVICE_SHARING (auto|ipc|vmm) is read before the GPU is touched, so a bad value
  // is the error with or without a GPU; unset, the creation goes on as before.
  ASSERT_EQ(setenv("PARAMWIN_DEVICE_SHARING", "nvlink", 1), 0);
  const std::string e = creation_error<pw::InvalidArgument>({.memory = pw::Memory::cuda});
  ASSERT_EQ(unsetenv("PARAMWIN_DEVICE_SHARING"), 0);
  EXPECT_NE(e.find("PARAMWIN_DEVICE_SHARING=nvlink is not one of auto, ipc, vmm"),
            std::string::npos)
      << e;
  pw::ParameterWindow<> win(MPI_COMM_WORLD, small_layout());  // nothing left behind
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DeviceWindowOptions, MemoryHasNames) {
  EXPECT_EQ(pw::enum_name(pw::Memory::cuda), "cuda");
  EXPECT_EQ(pw::parse_enum<pw::Memory>("host"), pw::Memory::host);
}

}  // namespace
