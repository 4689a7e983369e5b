// checkpoint_interop: the C++ half of the cross-language checkpoint test (python/CMakeLists.txt,
// python.checkpoint_interop.*): the same files from C++ and Python (docs/python.md).
//
//   mpiexec -n 2 checkpoint_interop save FILE   a C++ Agent<> steps 3 times (no deaths) with
//                                               w = rank + 0.5, b = 10 * rank + 0.25,
//                                               lr = 0.01 * (rank + 1) and saves FILE
//   mpiexec -n 2 checkpoint_interop load FILE   loads FILE (checkpoint_interop.py's) and checks
//                                               what Python wrote: w = rank + 0.75,
//                                               b = 10 * rank + 0.5, lr = 0.02 * (rank + 1),
//                                               5 steps
//
// The layout and options match tests/python/interop/checkpoint_interop.py.
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

pw::Layout layout_of() {
  pw::Layout layout;
  layout.add("w", std::vector<std::size_t>{4, 3});
  layout.add("b", 3, pw::DType::float64);
  layout.add_hyperparameter("lr");
  return layout;
}

pw::AgentOptions options_of() {
  pw::AgentOptions o;
  o.seed = 7;
  o.triggers.age.enabled = false;  // triggers=none: no deaths, the values stay as set
  o.selection.shortfall = pw::Shortfall::clamp;
  o.selection.k = 1;
  return o;
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("FAILED: " + what);
}

void run(std::string_view mode, const std::string& file, int rank) {
  pw::WindowOptions window;
  window.name = "interop";
  pw::Agent<> agent(MPI_COMM_WORLD, layout_of(), options_of(), window);
  std::vector<float> w(12);
  std::vector<double> b(3);
  const std::vector<pw::LayerRef> refs{pw::LayerRef("w", w), pw::LayerRef("b", b)};
  if (mode == "save") {
    for (float& x : w) x = static_cast<float>(rank) + 0.5F;
    for (double& x : b) x = 10.0 * rank + 0.25;
    agent.set_hyperparameter("lr", 0.01 * (rank + 1));
    for (int s = 1; s <= 3; ++s) agent.step(s, 1.0 + rank, refs);
    const std::vector<pw::ConstLayerRef> crefs{pw::ConstLayerRef("w", w),
                                               pw::ConstLayerRef("b", b)};
    agent.save_checkpoint(file, crefs);
  } else if (mode == "load") {
    const pw::CheckpointLoad loaded = agent.load_checkpoint(file, refs);
    expect(loaded.agents == 2 && loaded.source == rank && !loaded.reborn, "the agents of the file");
    expect(agent.steps() == 5 && loaded.steps == 5,
           "5 steps after the load, got " + std::to_string(agent.steps()));
    for (const float x : w) expect(x == static_cast<float>(rank) + 0.75F, "w from Python");
    for (const double x : b) expect(x == 10.0 * rank + 0.5, "b from Python");
    expect(agent.hyperparameters().get("lr") == 0.02 * (rank + 1), "lr from Python");
  } else {
    throw std::runtime_error("usage: checkpoint_interop save|load FILE");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  agent.close();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    int size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    try {
      if (argc != 3) throw std::runtime_error("usage: checkpoint_interop save|load FILE");
      run(argv[1], argv[2], rank);
      if (rank == 0) {
        std::printf("checkpoint_interop: C++ %s ok on %d ranks\n", argv[1], size);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] checkpoint_interop: FAILED: %s\n", rank, e.what());
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
