// Publishes on every rank and averages the other ranks through an installed paramwin.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include <paramwin/paramwin.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    paramwin::Layout layout;
    layout.add("w", std::size_t{1000});
    paramwin::ParameterWindow<> win(MPI_COMM_WORLD, layout);
    std::vector<float> w(1000, static_cast<float>(win.rank()));
    (void)win.publish({w});
    MPI_Barrier(MPI_COMM_WORLD);
    if (win.size() > 1) {
      std::vector<int> donors;
      float want = 0;
      for (int r = 0; r < win.size(); ++r) {
        if (r != win.rank()) {
          donors.push_back(r);
          want += static_cast<float>(r);
        }
      }
      want /= static_cast<float>(donors.size());
      (void)win.pull(donors, {w});
      if (w[0] != want || w[999] != want) {
        std::fprintf(stderr, "rank %d: got %f, want %f\n", win.rank(), double(w[0]), double(want));
        code = 1;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (code == 0) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf("consumer: installed paramwin works\n");
  }
  MPI_Finalize();
  return code;
}
