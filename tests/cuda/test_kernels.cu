// See test_kernels.hpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "test_kernels.hpp"

namespace paramwin::test {
namespace {

__device__ std::uint64_t now_ns() {
  std::uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(std::uint64_t ns, unsigned* sink) {
  const std::uint64_t start = now_ns();
  unsigned x = threadIdx.x;
  while (now_ns() - start < ns) {
    x = x * 1664525U + 1013904223U;
  }
  if (x == 0xffffffffU) *sink = x;  // keeps the loop
}

__global__ void step_kernel(float* data, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    data[i] = 0.999F * data[i] + 0.001F;
  }
}

cudaStream_t as_stream(void* s) {
  return s != nullptr ? static_cast<cudaStream_t>(s) : cudaStreamLegacy;
}

}  // namespace

void launch_spin(void* stream, double seconds) {
  int device = 0;
  int sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  static unsigned* sink = nullptr;
  if (sink == nullptr) cudaMalloc(&sink, sizeof(unsigned));
  spin_kernel<<<2 * sms, 256, 0, as_stream(stream)>>>(static_cast<std::uint64_t>(seconds * 1e9),
                                                      sink);
}

void launch_step(void* stream, float* data, std::size_t n, int passes) {
  int device = 0;
  int sms = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  for (int p = 0; p < passes; ++p) {
    step_kernel<<<4 * sms, 256, 0, as_stream(stream)>>>(data, n);
  }
}

}  // namespace paramwin::test
