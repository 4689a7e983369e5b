#pragma once
/// @file device_windows.hpp
/// How a TorchAgent chooses between a device window and host staging for a CUDA module
/// (docs/gpu.md). Without LibTorch types: the C++ TorchAgent (agent.hpp) and the Python
/// package's TorchAgent (python/paramwin/torch.py, through the binding's name tables) share
/// these names.

#include <cstdint>

#include "paramwin/enum_names.hpp"

namespace paramwin::torch {

/// Whether a TorchAgent keeps a CUDA module's snapshots on the GPU (a device window,
/// WindowOptions::memory = Memory::cuda, docs/gpu.md) or stages them through host memory.
enum class DeviceWindows : std::uint8_t {
  /// A device window when it can be one on every rank (every exchanged tensor on one CUDA
  /// device, a build with CUDA, snapshot exposure, no ModuleOptions::stage_through_host;
  /// solo and grouped agents, optimizer state and checkpoints alike); else host staging, and
  /// a rank with CUDA tensors says why on stderr once.
  automatic = 0,
  always = 1,  ///< a device window, or InvalidArgument on every rank saying why not
  never = 2,   ///< host staging (page-locked buffers), as before device windows
};

namespace detail {
/// The names of DeviceWindows, in declaration order.
inline constexpr EnumName<DeviceWindows> kDeviceWindowsNames[] = {{DeviceWindows::automatic,
                                                                   "auto"},
                                                                  {DeviceWindows::always, "always"},
                                                                  {DeviceWindows::never, "never"}};
/// More spellings the parsers accept (as Transport's).
inline constexpr EnumName<DeviceWindows> kDeviceWindowsAliases[] = {
    {DeviceWindows::automatic, "automatic"}};
}  // namespace detail

}  // namespace paramwin::torch

namespace paramwin {
/// Names of torch::DeviceWindows.
template <>
inline constexpr EnumTable<torch::DeviceWindows>
    enum_table<torch::DeviceWindows>{"device windows", torch::detail::kDeviceWindowsNames,
                                     torch::detail::kDeviceWindowsAliases};
}  // namespace paramwin
