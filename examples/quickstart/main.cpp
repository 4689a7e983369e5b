// The README's quick start: every rank publishes its parameters, then averages two others'.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include <paramwin/paramwin.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  {
    paramwin::Layout layout;                                      // what the model looks like
    layout.add("w1", {64, 32}).add("b1", {64}).add("scale", {});  // {} = 0-dim scalar
    paramwin::ParameterWindow<> win(MPI_COMM_WORLD, layout);      // collective

    const int rank = win.rank(), n = win.size();
    std::vector<float> w1(64 * 32, float(rank)), b1(64, float(rank)), scale(1, 1.0F);
    win.publish({w1, b1, scale});  // one copy; never waits for readers
    MPI_Barrier(MPI_COMM_WORLD);   // (only so the demo's donors exist)

    if (n >= 3) {  // reborn from the mean of two donors
      std::vector<int> donors{(rank + 1) % n, (rank + 2) % n};
      paramwin::PullResult r = win.pull(donors, {w1, b1, scale});
      std::printf("rank %d: w1[0] = %.1f from versions %llu, %llu in %.1f us\n", rank,
                  double(w1[0]), (unsigned long long)r.donors[0].version,
                  (unsigned long long)r.donors[1].version, r.seconds * 1e6);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // donors stay until everyone has read
  }
  MPI_Finalize();
}
