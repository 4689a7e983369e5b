// The choice between a device window and host staging (paramwin/device_choice.hpp): the
// obstacles in their order, the agreement over the agent's ranks and the messages.
#include "paramwin/device_choice.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "detail/cuda.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

int cuda_device_count(std::string* why) noexcept { return detail::cuda::device_count(why); }

DeviceObstacle device_obstacle(std::span<const TensorPlace> tensors, std::string_view other) {
  DeviceObstacle o;
  for (const TensorPlace& t : tensors) {
    o.any_cuda = o.any_cuda || t.cuda;
    if (!o.why.empty()) continue;
    if (!t.cuda) {
      o.why = "'" + t.name + "' is on " + t.where;
    } else if (o.device < 0) {
      o.device = t.device;
    } else if (t.device != o.device) {
      o.why = "the tensors are on two devices (cuda:" + std::to_string(o.device) + " and " +
              t.where + ")";
    }
  }
  if (o.why.empty() && tensors.empty()) o.why = "the module exchanges no tensors";
  if (o.why.empty()) o.why = std::string(other);
  if (o.why.empty()) {
    std::string none;
    if (cuda_device_count(&none) == 0) o.why = "no CUDA device (" + none + ")";
  }
  return o;
}

DeviceChoice choose_device_window(MPI_Comm comm, bool required, bool never,
                                  const std::function<DeviceObstacle()>& obstacle,
                                  const DeviceChoiceWords& words) {
  if (!required && never) return {};
  DeviceObstacle o;
  try {
    o = obstacle();
  } catch (const std::exception& e) {
    o = DeviceObstacle{.why = e.what()};
  }
  const int failing = detail::first_failing_rank(comm, o.why.empty());
  if (failing < 0) return DeviceChoice{.device = true, .cuda_device = o.device};
  const std::string text = detail::failure_text(comm, failing, o.why);
  const std::string& reason = o.why.empty() ? text : o.why;
  if (required) {
    throw InvalidArgument(std::string(words.prefix) + ": TorchAgent cannot use a device window (" +
                          std::string(words.required_by) + "): " + reason);
  }
  if (o.any_cuda) {
    std::fprintf(stderr,
                 "%s: TorchAgent stages its CUDA tensors through host memory, no device "
                 "window: %s\n",
                 std::string(words.prefix).c_str(), reason.c_str());
  }
  return {};
}

}  // namespace paramwin
