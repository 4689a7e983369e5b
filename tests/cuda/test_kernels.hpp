#pragma once
// Kernels for the GPU tests and benchmarks of device windows (compiled by nvcc in their own
// library, test_kernels.cu): a busy donor's long kernel and a training step's stand-in.
#include <cstddef>

namespace paramwin::test {

/// Launches, on @p stream (a cudaStream_t; nullptr: the legacy default stream), a kernel that
/// keeps every multiprocessor of the current device busy for about @p seconds; returns at once.
void launch_spin(void* stream, double seconds);

/// Launches, on @p stream, @p passes memory-bound passes over @p n floats at @p data
/// (x = 0.999 x + 0.001, a stand-in for an optimizer step); returns at once.
void launch_step(void* stream, float* data, std::size_t n, int passes);

}  // namespace paramwin::test
