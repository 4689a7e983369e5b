// The CUDA side of device windows (see cuda.hpp): allocation, IPC, pointer checks and the
// kernels. Compiled by nvcc with -fmad=false, so that the kernels round exactly as the host's
// kernels (src/detail/kernels.cpp, built with -ffp-contract=off): same products, same sums in
// the same order, same narrowing, hence the same bits as a host pull of the same snapshots.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/cuda.hpp"
#include "detail/cuda_vmm.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail::cuda {
namespace {

// DType's values (paramwin/dtype.hpp; device_placement.cpp checks that they agree).
constexpr DType kFloat32 = static_cast<DType>(1);
constexpr DType kFloat64 = static_cast<DType>(2);
constexpr DType kBfloat16 = static_cast<DType>(3);
constexpr DType kFloat16 = static_cast<DType>(4);

constexpr std::size_t dtype_size(DType d) { return d == kFloat64 ? 8 : d == kFloat32 ? 4 : 2; }

[[noreturn]] void fail(const char* what, cudaError_t e, const std::string& detail = {}) {
  throw Error(std::string("paramwin: CUDA ") + what + " failed: " + cudaGetErrorString(e) + " (" +
              cudaGetErrorName(e) + ")" + (detail.empty() ? "" : "; " + detail));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(what, e);
}

/// Makes @p ordinal current for the scope and restores the caller's device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != ordinal) check(cudaSetDevice(ordinal), "cudaSetDevice");
    ordinal_ = ordinal;
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (previous_ != ordinal_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  int ordinal_ = 0;
};

// --- element types -------------------------------------------------------------------------

struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }

template <class T>
struct Elem;
template <>
struct Elem<float> {
  __device__ static float widen(float v) { return v; }
  __device__ static float narrow(float v) { return v; }
  __device__ static bool non_finite(float v) {
    return (__float_as_uint(v) & 0x7f800000U) == 0x7f800000U;
  }
};
template <>
struct Elem<double> {
  __device__ static double widen(double v) { return v; }
  __device__ static double narrow(double v) { return v; }
  __device__ static bool non_finite(double v) {
    return (static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7ff0000000000000ULL) ==
           0x7ff0000000000000ULL;
  }
};
template <>
struct Elem<Bf16> {
  __device__ static float widen(Bf16 v) { return __uint_as_float(std::uint32_t{v.bits} << 16U); }
  // As the host's to_bfloat16: round to nearest even, NaN stays (quiet) NaN.
  __device__ static Bf16 narrow(float f) {
    const std::uint32_t u = __float_as_uint(f);
    const std::uint32_t rounded = (u + 0x7fffU + ((u >> 16U) & 1U)) >> 16U;
    const std::uint32_t quiet_nan = (u >> 16U) | 0x40U;
    return Bf16{static_cast<std::uint16_t>((u & 0x7fffffffU) > 0x7f800000U ? quiet_nan : rounded)};
  }
  __device__ static bool non_finite(Bf16 v) { return (v.bits & 0x7f80U) == 0x7f80U; }
};
template <>
struct Elem<F16> {
  // Exact, subnormals included (as the host's to_float(float16)).
  __device__ static float widen(F16 v) {
    const std::uint32_t h = v.bits;
    std::uint32_t o = (h & 0x7fffU) << 13U;
    const std::uint32_t exp = o & 0x0f800000U;
    o += 0x38000000U;
    if (exp == 0x0f800000U) o += 0x38000000U;
    if (exp == 0)
      o = __float_as_uint(
          __fsub_rn(__uint_as_float(o + 0x00800000U), __uint_as_float(0x38800000U)));
    return __uint_as_float(o | ((h & 0x8000U) << 16U));
  }
  // As the host's to_float16: round to nearest even, overflow to infinity.
  __device__ static F16 narrow(float f) {
    const std::uint32_t u = __float_as_uint(f);
    const std::uint32_t sign = (u >> 16U) & 0x8000U;
    const std::uint32_t abs = u & 0x7fffffffU;
    const std::uint32_t nan = 0x7e00U | ((abs >> 13U) & 0x3ffU);
    const std::uint32_t sub = __float_as_uint(__fadd_rn(__uint_as_float(abs), 0.5F)) - 0x3f000000U;
    const std::uint32_t normal = (abs + 0xc8000fffU + ((abs >> 13U) & 1U)) >> 13U;
    std::uint32_t r = abs < 0x38800000U ? sub : normal;
    r = abs >= 0x477ff000U ? 0x7c00U : r;
    r = abs > 0x7f800000U ? nan : r;
    return F16{static_cast<std::uint16_t>(sign | r)};
  }
  __device__ static bool non_finite(F16 v) { return (v.bits & 0x7c00U) == 0x7c00U; }
};

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

unsigned blocks_for(std::size_t n) {
  const std::size_t per_block = static_cast<std::size_t>(kThreads) * kUnroll;
  return static_cast<unsigned>(std::min<std::size_t>((n + per_block - 1) / per_block, 65535 * 8));
}

// --- publish: copy or narrow, recording whether what is written is finite -----------------

template <class To, class From>
__global__ void convert_kernel(To* __restrict__ dst, const From* __restrict__ src, std::size_t n,
                               unsigned long long* bad, unsigned long long layer1) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  bool any = false;
  for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < n;
       base += stride * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * stride;
      if (i < n) {
        To v;
        if constexpr (std::is_same_v<To, From>) {
          v = src[i];  // a copy keeps every bit (NaN payloads too)
        } else {
          v = Elem<To>::narrow(Elem<From>::widen(src[i]));
        }
        any = any || Elem<To>::non_finite(v);
        dst[i] = v;
      }
    }
  }
  if (any) atomicMin(bad, layer1);
}

// Same type, 16-byte words: a copy that also looks at the exponent bits of every element.
template <class T>
__device__ __forceinline__ bool word_non_finite(uint4 w);
template <>
__device__ __forceinline__ bool word_non_finite<float>(uint4 w) {
  constexpr std::uint32_t e = 0x7f800000U;
  return ((w.x & e) == e) || ((w.y & e) == e) || ((w.z & e) == e) || ((w.w & e) == e);
}
template <>
__device__ __forceinline__ bool word_non_finite<double>(uint4 w) {
  constexpr std::uint32_t e = 0x7ff00000U;  // high words hold the exponent
  return ((w.y & e) == e) || ((w.w & e) == e);
}
template <std::uint32_t E>
__device__ __forceinline__ bool halves_non_finite(uint4 w) {
  const std::uint32_t lo = E;
  const std::uint32_t hi = E << 16U;
  auto bad = [&](std::uint32_t x) { return ((x & lo) == lo) || ((x & hi) == hi); };
  return bad(w.x) || bad(w.y) || bad(w.z) || bad(w.w);
}
template <>
__device__ __forceinline__ bool word_non_finite<Bf16>(uint4 w) {
  return halves_non_finite<0x7f80U>(w);
}
template <>
__device__ __forceinline__ bool word_non_finite<F16>(uint4 w) {
  return halves_non_finite<0x7c00U>(w);
}

template <class T>
__global__ void copy_check_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                  std::size_t words, unsigned long long* bad,
                                  unsigned long long layer1) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  bool any = false;
  for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       base < words; base += stride * kUnroll) {
    uint4 w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * stride;
      if (i < words) w[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * stride;
      if (i < words) {
        any = any || word_non_finite<T>(w[u]);
        dst[i] = w[u];
      }
    }
  }
  if (any) atomicMin(bad, layer1);
}

// --- pull: k donors in one pass --------------------------------------------------------------

struct Sources {
  const void* data[kMaxDeviceSources];
  double weight[kMaxDeviceSources];
};

enum class MixMode { write, blend };

template <class Acc, class Src, class Out, MixMode M>
__global__ void mix_kernel(Out* __restrict__ out, Sources s, int k, std::size_t n, Acc m,
                           Acc keep) {
  // Weights and pointers stay in the parameter space (constant cache, broadcast to the warp).
  const Acc w0 = static_cast<Acc>(s.weight[0]);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < n;
       base += stride * kUnroll) {
    Acc v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * stride;
      if (i < n) {
        v[u] = mul(w0, static_cast<Acc>(Elem<Src>::widen(static_cast<const Src*>(s.data[0])[i])));
      }
    }
    for (int d = 1; d < k; ++d) {
      const Src* src = static_cast<const Src*>(s.data[d]);
      const Acc wd = static_cast<Acc>(s.weight[d]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::size_t i = base + u * stride;
        if (i < n) v[u] = add(v[u], mul(wd, static_cast<Acc>(Elem<Src>::widen(src[i]))));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::size_t i = base + u * stride;
      if (i < n) {
        if constexpr (M == MixMode::blend) {
          out[i] = Elem<Out>::narrow(
              add(mul(m, static_cast<Acc>(Elem<Out>::widen(out[i]))), mul(keep, v[u])));
        } else {
          out[i] = Elem<Out>::narrow(v[u]);
        }
      }
    }
  }
}

template <class Out, class Acc>
__global__ void commit_kernel(Out* __restrict__ out, const Acc* __restrict__ acc, std::size_t n,
                              Acc m, Acc keep, bool blend) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = blend ? Elem<Out>::narrow(
                         add(mul(m, static_cast<Acc>(Elem<Out>::widen(out[i]))), mul(keep, acc[i])))
                   : Elem<Out>::narrow(acc[i]);
  }
}

template <class Acc, class Src, class Out>
void launch_mix(cudaStream_t stream, void* out, const Sources& s, int k, std::size_t n,
                double momentum) {
  const auto m = static_cast<Acc>(momentum);
  const Acc keep = Acc{1} - m;
  if (momentum == 0.0) {
    mix_kernel<Acc, Src, Out, MixMode::write>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<Out*>(out), s, k, n, m, keep);
  } else {
    mix_kernel<Acc, Src, Out, MixMode::blend>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<Out*>(out), s, k, n, m, keep);
  }
}

// The wire type of a float32 layer's slot (float32, bfloat16, float16) into an output of
// @p Out (the layer type, or float for an accumulation buffer).
template <class Out>
void launch_mix_float(cudaStream_t stream, void* out, const Sources& s, int k, DType wire,
                      std::size_t n, double momentum) {
  switch (wire) {
    case kFloat32: return launch_mix<float, float, Out>(stream, out, s, k, n, momentum);
    case kBfloat16: return launch_mix<float, Bf16, Out>(stream, out, s, k, n, momentum);
    case kFloat16: return launch_mix<float, F16, Out>(stream, out, s, k, n, momentum);
    case kFloat64: break;
  }
  throw Error("paramwin: device mix: float64 wire for a non-float64 layer");
}

// One layer of a publish whose slot keeps the layer's dtype @p T: 16-byte words copied and
// checked when both ends are 16-byte aligned (the tail element-wise), else element-wise.
// Non-finite values record layer1 in @p bad.
template <class T>
void launch_same_dtype(cudaStream_t stream, const CopyItem& it, unsigned long long* bad,
                       unsigned long long layer1) {
  const bool aligned = reinterpret_cast<std::uintptr_t>(it.dst) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(it.src) % 16 == 0;
  if (!aligned) {
    convert_kernel<T, T>
        <<<blocks_for(it.count), kThreads, 0, stream>>>(static_cast<T*>(it.dst),
                                                        static_cast<const T*>(it.src), it.count,
                                                        bad, layer1);
    return;
  }
  const std::size_t bytes = it.count * dtype_size(it.to);
  const std::size_t words = bytes / 16;
  const std::size_t tail = bytes - words * 16;
  if (words != 0) {
    copy_check_kernel<T>
        <<<blocks_for(words), kThreads, 0, stream>>>(static_cast<uint4*>(it.dst),
                                                     static_cast<const uint4*>(it.src), words, bad,
                                                     layer1);
  }
  if (tail != 0) {
    const std::size_t first = words * 16 / dtype_size(it.to);
    const std::size_t n = it.count - first;
    auto* dt = static_cast<std::byte*>(it.dst) + words * 16;
    const auto* st = static_cast<const std::byte*>(it.src) + words * 16;
    convert_kernel<T, T><<<1, kThreads, 0, stream>>>(reinterpret_cast<T*>(dt),
                                                     reinterpret_cast<const T*>(st), n, bad,
                                                     layer1);
  }
}

// One layer of a publish (the slot's dtype it.to from the layer's it.from).
void launch_publish_layer(cudaStream_t stream, const CopyItem& it, unsigned long long* bad,
                          unsigned long long layer1) {
  if (it.to == it.from) {
    switch (it.to) {
      case kFloat32: return launch_same_dtype<float>(stream, it, bad, layer1);
      case kFloat64: return launch_same_dtype<double>(stream, it, bad, layer1);
      case kBfloat16: return launch_same_dtype<Bf16>(stream, it, bad, layer1);
      case kFloat16: return launch_same_dtype<F16>(stream, it, bad, layer1);
    }
  } else if (it.from == kFloat32 && it.to == kBfloat16) {
    convert_kernel<Bf16, float>
        <<<blocks_for(it.count), kThreads, 0, stream>>>(static_cast<Bf16*>(it.dst),
                                                        static_cast<const float*>(it.src), it.count,
                                                        bad, layer1);
    return;
  } else if (it.from == kFloat32 && it.to == kFloat16) {
    convert_kernel<F16, float>
        <<<blocks_for(it.count), kThreads, 0, stream>>>(static_cast<F16*>(it.dst),
                                                        static_cast<const float*>(it.src), it.count,
                                                        bad, layer1);
    return;
  }
  throw Error("paramwin: device publish: unsupported conversion");
}

}  // namespace

// --- the free functions ------------------------------------------------------------------------

bool built() noexcept { return true; }

int device_count(std::string* why) noexcept {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it
    if (why != nullptr) {
      try {
        *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
      } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory: no reason then
      }
    }
    return 0;
  }
  if (n == 0 && why != nullptr) {
    try {
      *why = "cudaGetDeviceCount reports no device";
    } catch (...) {  // NOLINT(bugprone-empty-catch): as above
    }
  }
  return n;
}

int current_device() {
  int d = 0;
  check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

PointerInfo classify(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // Memory CUDA does not know, or no device / driver to know any: not device memory.
    if (e == cudaErrorInvalidValue || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
        e == cudaErrorInitializationError) {
      return {};
    }
    fail("cudaPointerGetAttributes", e);
  }
  PointerInfo info;
  info.device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  info.ordinal = info.device ? a.device : -1;
  return info;
}

void* allocate(std::size_t bytes, int ordinal) {
  DeviceScope scope(ordinal);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cudaMalloc", e, std::to_string(bytes) + " bytes on device " + std::to_string(ordinal));
  }
  return p;
}

void release(void* p) noexcept {
  if (p != nullptr) (void)cudaFree(p);
}

void copy_blocking(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy (device layer <-> host)");
}

// --- Device ------------------------------------------------------------------------------------

struct Device::State {
  int ordinal = 0;
  cudaStream_t stream = cudaStreamLegacy;
  std::byte* slots = nullptr;
  unsigned long long* bad = nullptr;       // device word: first bad layer + 1 (min)
  unsigned long long* bad_host = nullptr;  // page-locked copy of it
  std::byte* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  std::size_t slots_size = 0;
  std::unique_ptr<vmm::Mapped> vmm_slots;               // VMM slots (else cudaMalloc's)
  std::vector<void*> peers;                             // IPC mappings
  std::vector<std::unique_ptr<vmm::Mapped>> vmm_peers;  // VMM mappings
};

bool vmm_supported(int ordinal, std::string* why) noexcept {
  if (device_count(why) == 0) return false;
  int device = ordinal;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {  // kCurrentDevice
    (void)cudaGetLastError();
    device = 0;
  }
  return vmm::supported(device, why);
}

Device::Device(int ordinal, void* stream, std::size_t slot_bytes, bool vmm)
    : s_(std::make_unique<State>()) {
  std::string why;
  if (device_count(&why) == 0) {
    throw Error("paramwin: a device window (Memory::cuda) needs a CUDA device, but this process "
                "sees none (" +
                why + ")");
  }
  s_->ordinal = ordinal < 0 ? current_device() : ordinal;
  s_->stream = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy;
  DeviceScope scope(s_->ordinal);
  void* p = nullptr;
  cudaError_t e = cudaSuccess;
  if (vmm) {
    s_->vmm_slots = vmm::Mapped::create(s_->ordinal, std::max<std::size_t>(slot_bytes, 256));
    p = s_->vmm_slots->data();
    s_->slots_size = s_->vmm_slots->size();
  } else {
    e = cudaMalloc(&p, std::max<std::size_t>(slot_bytes, 256));
    s_->slots_size = std::max<std::size_t>(slot_bytes, 256);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::size_t free_bytes = 0;
    std::size_t total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    (void)cudaGetLastError();
    fail("cudaMalloc", e,
         "a device window needs " + std::to_string(slot_bytes) +
             " bytes of GPU memory for its "
             "two snapshot slots on device " +
             std::to_string(s_->ordinal) + ", which has " + std::to_string(free_bytes) +
             " bytes free of " + std::to_string(total));
  }
  s_->slots = static_cast<std::byte*>(p);
  try {
    check(cudaMalloc(reinterpret_cast<void**>(&s_->bad), sizeof(unsigned long long)),
          "cudaMalloc (publish record)");
    check(cudaMallocHost(reinterpret_cast<void**>(&s_->bad_host), sizeof(unsigned long long)),
          "cudaMallocHost (publish record)");
  } catch (...) {
    if (s_->bad != nullptr) (void)cudaFree(s_->bad);
    if (!s_->vmm_slots) (void)cudaFree(s_->slots);
    s_->vmm_slots.reset();
    throw;
  }
}

Device::~Device() {
  if (!s_) return;
  unmap_peers();
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = s_->ordinal;
  (void)cudaSetDevice(s_->ordinal);
  (void)cudaFree(s_->scratch);
  (void)cudaFree(s_->bad);
  (void)cudaFreeHost(s_->bad_host);
  if (s_->vmm_slots) {
    s_->vmm_slots.reset();
  } else {
    (void)cudaFree(s_->slots);
  }
  (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

int Device::ordinal() const noexcept { return s_->ordinal; }
std::byte* Device::slots() const noexcept { return s_->slots; }
bool Device::vmm() const noexcept { return s_->vmm_slots != nullptr; }
std::size_t Device::slots_size() const noexcept { return s_->slots_size; }

int Device::export_slots_fd() const {
  if (!s_->vmm_slots) throw Error("paramwin: internal: export_slots_fd() of cudaMalloc slots");
  DeviceScope scope(s_->ordinal);
  return s_->vmm_slots->export_fd();
}

std::byte* Device::map_peer(int fd, std::size_t size) {
  DeviceScope scope(s_->ordinal);
  s_->vmm_peers.push_back(vmm::Mapped::import_fd(fd, size, s_->ordinal));
  return s_->vmm_peers.back()->data();
}

IpcHandle Device::export_slots() const {
  DeviceScope scope(s_->ordinal);
  cudaIpcMemHandle_t h{};
  check(cudaIpcGetMemHandle(&h, s_->slots), "cudaIpcGetMemHandle");
  IpcHandle out{};
  static_assert(sizeof(h) == kIpcHandleBytes);
  std::memcpy(out.data(), &h, kIpcHandleBytes);
  return out;
}

std::byte* Device::map_peer(const IpcHandle& handle) {
  DeviceScope scope(s_->ordinal);
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle.data(), kIpcHandleBytes);
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cudaIpcOpenMemHandle", e,
         "device windows map the slots of the node's other ranks with CUDA IPC (a container "
         "may forbid it; ranks on different GPUs need peer access between them)");
  }
  s_->peers.push_back(p);
  return static_cast<std::byte*>(p);
}

void Device::unmap_peers() noexcept {
  if (s_->peers.empty() && s_->vmm_peers.empty()) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = s_->ordinal;
  (void)cudaSetDevice(s_->ordinal);
  for (void* p : s_->peers) (void)cudaIpcCloseMemHandle(p);
  s_->peers.clear();
  s_->vmm_peers.clear();
  (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

std::uint64_t Device::publish(std::span<const CopyItem> items) {
  DeviceScope scope(s_->ordinal);
  const unsigned long long none = ~0ULL;
  check(cudaMemcpyAsync(s_->bad, &none, sizeof(none), cudaMemcpyHostToDevice, s_->stream),
        "cudaMemcpyAsync (publish record)");
  for (std::size_t l = 0; l < items.size(); ++l) {
    if (items[l].count == 0) continue;
    launch_publish_layer(s_->stream, items[l], s_->bad, l + 1);
    check(cudaGetLastError(), "kernel launch (publish)");
  }
  check(cudaMemcpyAsync(s_->bad_host, s_->bad, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                        s_->stream),
        "cudaMemcpyAsync (publish record)");
  synchronize();
  return *s_->bad_host == ~0ULL ? 0 : *s_->bad_host;
}

void Device::mix(void* out, DType out_dtype, std::span<const DeviceSource> sources, DType wire,
                 std::size_t count, double momentum, bool acc_out) {
  if (count == 0) return;
  if (sources.empty() || sources.size() > kMaxDeviceSources) {
    throw Error("paramwin: device mix of " + std::to_string(sources.size()) + " donors (1 to " +
                std::to_string(kMaxDeviceSources) + ")");
  }
  DeviceScope scope(s_->ordinal);
  Sources s{};
  for (std::size_t d = 0; d < sources.size(); ++d) {
    s.data[d] = sources[d].data;
    s.weight[d] = sources[d].weight;
  }
  const int k = static_cast<int>(sources.size());
  cudaStream_t st = s_->stream;
  if (out_dtype == kFloat64) {
    launch_mix<double, double, double>(st, out, s, k, count, acc_out ? 0.0 : momentum);
  } else if (acc_out) {
    launch_mix_float<float>(st, out, s, k, wire, count, 0.0);
  } else {
    switch (out_dtype) {
      case kFloat32: launch_mix_float<float>(st, out, s, k, wire, count, momentum); break;
      case kBfloat16: launch_mix_float<Bf16>(st, out, s, k, wire, count, momentum); break;
      case kFloat16: launch_mix_float<F16>(st, out, s, k, wire, count, momentum); break;
      case kFloat64: break;
    }
  }
  check(cudaGetLastError(), "kernel launch (pull)");
}

void Device::commit(void* out, DType out_dtype, const void* acc, std::size_t count,
                    double momentum) {
  if (count == 0) return;
  DeviceScope scope(s_->ordinal);
  const bool blend = momentum != 0.0;
  const unsigned g = blocks_for(count) * kUnroll;
  cudaStream_t st = s_->stream;
  if (out_dtype == kFloat64) {
    commit_kernel<double, double><<<g, kThreads, 0, st>>>(static_cast<double*>(out),
                                                          static_cast<const double*>(acc), count,
                                                          momentum, 1.0 - momentum, blend);
  } else {
    const auto m = static_cast<float>(momentum);
    const float keep = 1.0F - m;
    const auto* a = static_cast<const float*>(acc);
    switch (out_dtype) {
      case kFloat32:
        commit_kernel<float, float>
            <<<g, kThreads, 0, st>>>(static_cast<float*>(out), a, count, m, keep, blend);
        break;
      case kBfloat16:
        commit_kernel<Bf16, float>
            <<<g, kThreads, 0, st>>>(static_cast<Bf16*>(out), a, count, m, keep, blend);
        break;
      case kFloat16:
        commit_kernel<F16, float>
            <<<g, kThreads, 0, st>>>(static_cast<F16*>(out), a, count, m, keep, blend);
        break;
      case kFloat64: break;
    }
  }
  check(cudaGetLastError(), "kernel launch (pull commit)");
}

void Device::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  DeviceScope scope(s_->ordinal);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s_->stream), "cudaMemcpyAsync");
}

std::byte* Device::scratch(std::size_t bytes) {
  if (bytes <= s_->scratch_bytes) return s_->scratch;
  DeviceScope scope(s_->ordinal);
  synchronize();  // the old buffer may still be read by enqueued work
  (void)cudaFree(s_->scratch);
  s_->scratch = nullptr;
  s_->scratch_bytes = 0;
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc (pull scratch)");
  s_->scratch = static_cast<std::byte*>(p);
  s_->scratch_bytes = bytes;
  return s_->scratch;
}

void Device::synchronize() { check(cudaStreamSynchronize(s_->stream), "cudaStreamSynchronize"); }

}  // namespace paramwin::detail::cuda
