// One inline averaging round (AveragingAgent, topology all: n - 1 peers + self, uniform
// weights) against a hand-written mix of as many local buffers with the same weights, both
// over N float32 on rank 0, while the other ranks wait without spinning (docs/averaging.md,
// "Cost of a round"); and a symmetric (mean-preserving) round over the same peers, alternating
// with them. Prints medians and minimums of 11 repetitions and the kernel that ran.
//   mpiexec -n 4 paramwin_averaging_mix_micro [N]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "detail/kernels.hpp"
#include "paramwin/averaging.hpp"

namespace {

void polite_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  int done = 0;
  while (done == 0) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

/// x = a * (x + sum of @p others), element by element: the hand-written mix (one fused loop
/// over plain pointers for 3 others, the case the docs quote; a loop per element otherwise).
void hand_mix(std::vector<float>& x, const std::vector<std::vector<float>>& others, float a) {
  float* out = x.data();
  if (others.size() == 3) {
    const float* p = others[0].data();
    const float* q = others[1].data();
    const float* r = others[2].data();
    for (std::size_t i = 0; i < x.size(); ++i) {
      out[i] = a * out[i] + a * p[i] + a * q[i] + a * r[i];
    }
    return;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    float sum = out[i];
    for (const std::vector<float>& o : others) {
      sum += o[i];
    }
    out[i] = a * sum;
  }
}

void run(std::size_t n) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  paramwin::Layout layout;
  layout.add("w", n);
  paramwin::AveragingOptions options;
  options.publish_every = 1 << 30;  // time the round alone
  options.window.name = "mix_micro.pull";
  paramwin::AveragingAgent agent(MPI_COMM_WORLD, layout, options);
  options.window.name = "mix_micro.symmetric";
  options.symmetric = true;
  paramwin::AveragingAgent symmetric(MPI_COMM_WORLD, layout, options);
  std::vector<float> w(n, static_cast<float>(rank));
  std::vector<float> v(n, static_cast<float>(rank));
  (void)agent.publish({w});
  (void)symmetric.publish({v});
  polite_barrier();
  if (rank == 0) {
    const std::vector<std::vector<float>> local(static_cast<std::size_t>(size - 1),
                                                std::vector<float>(n, 1.0F));
    const float a = 1.0F / static_cast<float>(size);
    std::vector<double> round_s;
    std::vector<double> hand_s;
    std::vector<double> symmetric_s;
    for (int rep = 0; rep < 11; ++rep) {
      round_s.push_back(agent.step({w}).seconds);
      const double start = MPI_Wtime();
      hand_mix(w, local, a);
      hand_s.push_back(MPI_Wtime() - start);
      symmetric_s.push_back(symmetric.step({v}).seconds);
    }
    std::sort(round_s.begin(), round_s.end());
    std::sort(hand_s.begin(), hand_s.end());
    std::sort(symmetric_s.begin(), symmetric_s.end());
    std::printf("%zu float32, %d peers + self: round median %.2f ms (min %.2f), hand-written mix "
                "median %.2f ms (min %.2f), ratio of medians %.2f; symmetric round median "
                "%.2f ms (min %.2f), %.2fx the round; kernels: %s\n",
                n, size - 1, round_s[5] * 1e3, round_s[0] * 1e3, hand_s[5] * 1e3, hand_s[0] * 1e3,
                round_s[5] / hand_s[5], symmetric_s[5] * 1e3, symmetric_s[0] * 1e3,
                symmetric_s[5] / round_s[5], paramwin::detail::kernel_summary().c_str());
  }
  polite_barrier();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10'000'000;
  run(n);
  MPI_Finalize();
  return 0;
}
