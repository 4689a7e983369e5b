// The CUDA side of device windows in a build without CUDA (PARAMWIN_WITH_CUDA=OFF): no
// device, and every device window is refused with an Error that says why (see cuda.hpp).
#include <string>

#include "detail/cuda.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail::cuda {
namespace {

[[noreturn]] void unavailable() {
  throw Error("paramwin: this paramwin was built without CUDA (PARAMWIN_WITH_CUDA=OFF, or no CUDA "
              "toolkit found), so it has no device windows (Memory::cuda)");
}

}  // namespace

bool built() noexcept { return false; }

int device_count(std::string* why) noexcept {
  if (why != nullptr) {
    try {
      *why = "paramwin was built without CUDA";
    } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: no reason then
    }
  }
  return 0;
}

int current_device() { unavailable(); }

PointerInfo classify(const void* /*p*/) { return {}; }

void* allocate(std::size_t /*bytes*/, int /*ordinal*/) { unavailable(); }
void release(void* /*p*/) noexcept {}
void copy_blocking(void* /*dst*/, const void* /*src*/, std::size_t /*bytes*/) { unavailable(); }

bool vmm_supported(int ordinal, std::string* why) noexcept {
  (void)ordinal;
  return device_count(why) > 0;  // false, with the reason
}

struct Device::State {};

Device::Device(int /*ordinal*/, void* /*stream*/, std::size_t /*slot_bytes*/, bool /*vmm*/) {
  unavailable();
}
Device::~Device() = default;
int Device::ordinal() const noexcept { return -1; }
std::byte* Device::slots() const noexcept { return nullptr; }
bool Device::vmm() const noexcept { return false; }
std::size_t Device::slots_size() const noexcept { return 0; }
IpcHandle Device::export_slots() const { unavailable(); }
int Device::export_slots_fd() const { unavailable(); }
std::byte* Device::map_peer(const IpcHandle& /*handle*/) { unavailable(); }
std::byte* Device::map_peer(int /*fd*/, std::size_t /*size*/) { unavailable(); }
void Device::unmap_peers() noexcept {}
std::uint64_t Device::publish(std::span<const CopyItem> /*items*/) { unavailable(); }
void Device::mix(void* /*out*/, DType /*out_dtype*/, std::span<const DeviceSource> /*sources*/,
                 DType /*wire*/, std::size_t /*count*/, double /*momentum*/, bool /*acc_out*/) {
  unavailable();
}
void Device::commit(void* /*out*/, DType /*out_dtype*/, const void* /*acc*/, std::size_t /*count*/,
                    double /*momentum*/) {
  unavailable();
}
void Device::copy(void* /*dst*/, const void* /*src*/, std::size_t /*bytes*/) { unavailable(); }
std::byte* Device::scratch(std::size_t /*bytes*/) { unavailable(); }
void Device::synchronize() { unavailable(); }

}  // namespace paramwin::detail::cuda
