#pragma once
/// @file device_choice.hpp
/// The choice between a device window (WindowOptions::memory = Memory::cuda, docs/gpu.md) and
/// host staging for tensors that may live in GPU memory: the one implementation behind the
/// C++ TorchAgent (torch::DeviceWindows) and the Python package's TorchAgent.

#include <mpi.h>

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace paramwin {

/// Where one of the caller's tensors lives.
struct TensorPlace {
  std::string name;   ///< the tensor's name, for messages
  bool cuda = false;  ///< a CUDA tensor
  int device = -1;    ///< its CUDA device ordinal (CUDA tensors)
  std::string where;  ///< its device as the framework writes it ("cpu", "cuda:1")
};

/// Why one rank's tensors cannot live in a device window.
struct DeviceObstacle {
  std::string why;        ///< "" when they can
  int device = -1;        ///< the tensors' CUDA device (the first one read)
  bool any_cuda = false;  ///< some tensor is a CUDA tensor
};

/// Number of CUDA devices this process sees: 0 when there is none, no driver, or no CUDA in
/// this build, with CUDA's reason in @p why (when given).
[[nodiscard]] int cuda_device_count(std::string* why = nullptr) noexcept;

/// The obstacle of @p tensors to a device window, the first of: a tensor that is not a CUDA
/// tensor ("'w' is on cpu"), tensors on two devices, no tensors at all, @p other (the
/// caller's own obstacle; "" for none), no CUDA device. The devices are read up to the first
/// obstacle; any_cuda over every tensor.
[[nodiscard]] DeviceObstacle device_obstacle(std::span<const TensorPlace> tensors,
                                             std::string_view other = {});

/// How the caller names itself and its options in the choice's messages.
struct DeviceChoiceWords {
  std::string_view prefix;       ///< the messages' prefix ("paramwin::torch", "paramwin")
  std::string_view required_by;  ///< the options that demand a device window, as spelled
};

/// The window chosen, the same on every rank.
struct DeviceChoice {
  bool device = false;   ///< a device window on cuda_device; else host staging
  int cuda_device = -1;  ///< this rank's tensors' device (device windows)
};

/// Chooses, alike on every rank of @p comm, between a device window and host staging: a
/// device window when @p obstacle() is "" on every rank (an exception it throws is this rank's
/// obstacle); else InvalidArgument on every rank when @p required, or host staging, and a rank
/// with CUDA tensors says why on stderr once. @p never (and not @p required): host staging,
/// with no collective and @p obstacle not asked.
/// @note Collective over @p comm (but for @p never).
[[nodiscard]] DeviceChoice choose_device_window(MPI_Comm comm, bool required, bool never,
                                                const std::function<DeviceObstacle()>& obstacle,
                                                const DeviceChoiceWords& words);

}  // namespace paramwin
