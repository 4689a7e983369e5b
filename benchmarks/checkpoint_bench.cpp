// Population checkpoint saves against plain POSIX writes (docs/benchmarks.md, "Checkpoints";
// issue 17's target: a save within 1.5x of every rank writing the same bytes to its own file).
// Every rank is one agent of N float32 parameters in L layers. Each repetition, in one loop so
// that all three see the same machine state:
//   posix  every rank writes its parameters to its own file (open, write, close)
//   shared every rank writes the same bytes into one shared file at its own offset (pwrite):
//          what the file system gives concurrent writers of one file, without HDF5
//   sync   Agent::save_checkpoint, one parallel-HDF5 file (collective MPI-IO)
//   async  CheckpointOptions::async: the call (the pause: a copy of the parameters) and the
//          time until wait_checkpoint() returns (the write, overlapping nothing here)
// plus the copy alone (memcpy of the same bytes). Times are the slowest rank's (MPI_MAX),
// files are removed before each repetition (not timed). Only rank 0 prints.
//   mpiexec -n 4 paramwin_checkpoint_bench [--params N] [--layers L] [--reps R] [--dir D]
//                                          [--fsync] [--json FILE]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace pw = paramwin;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::size_t params = 50'000'000;
  std::size_t layers = 8;
  int reps = 5;
  std::string dir = "out/bench/checkpoint";
  std::string json;
  bool fsync = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      return argv[++i];
    };
    if (k == "--params") {
      a.params = std::stoull(value());
    } else if (k == "--layers") {
      a.layers = std::stoull(value());
    } else if (k == "--reps") {
      a.reps = std::stoi(value());
    } else if (k == "--dir") {
      a.dir = value();
    } else if (k == "--json") {
      a.json = value();
    } else if (k == "--fsync") {
      a.fsync = true;
    } else {
      throw std::invalid_argument("unknown option " + k);
    }
  }
  if (a.params == 0 || a.layers == 0 || a.layers > a.params || a.reps < 1) {
    throw std::invalid_argument(
        "--params and --layers must be >= 1 (layers <= params), --reps >= 1");
  }
  return a;
}

double slowest(double t) {
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

template <class F>
double timed(F fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  fn();
  return slowest(MPI_Wtime() - t0);
}

// Writes @p layers into @p path from byte @p offset on (own file: offset 0 and truncated).
void posix_write(const std::string& path, const std::vector<std::vector<float>>& layers, bool sync,
                 off_t offset = 0, bool truncate = true) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | (truncate ? O_TRUNC : 0), 0644);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  for (const std::vector<float>& l : layers) {
    const char* p = reinterpret_cast<const char*>(l.data());
    std::size_t left = l.size() * sizeof(float);
    while (left > 0) {
      const ssize_t n = ::pwrite(fd, p, left, offset);
      if (n < 0) throw std::runtime_error("write " + path + ": " + std::strerror(errno));
      p += n;
      offset += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  if (sync && ::fsync(fd) != 0) throw std::runtime_error("fsync " + path);
  if (::close(fd) != 0) throw std::runtime_error("close " + path);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  try {
    const Args a = parse(argc, argv);
    if (rank == 0) fs::create_directories(a.dir);
    MPI_Barrier(MPI_COMM_WORLD);
    pw::Layout layout;
    std::vector<std::vector<float>> layers(a.layers);
    for (std::size_t l = 0; l < a.layers; ++l) {
      const std::size_t n = a.params / a.layers + (l < a.params % a.layers ? 1 : 0);
      layout.add("layer" + std::to_string(l), n);
      layers[l].resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        layers[l][i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 997)) * 0.25F;
      }
    }
    std::vector<pw::ConstLayerRef> refs;
    for (const std::vector<float>& l : layers) refs.emplace_back(l);
    pw::AgentOptions sync_o;
    sync_o.triggers.age.enabled = false;
    sync_o.selection.k = 1;
    sync_o.selection.shortfall = pw::Shortfall::clamp;
    pw::AgentOptions async_o = sync_o;
    async_o.checkpoint.async = true;
    // Named: two unnamed windows of one layout may not be alive at once over the same ranks.
    pw::Agent<> sync_agent(MPI_COMM_WORLD, layout, sync_o, {.name = "sync"});
    pw::Agent<> async_agent(MPI_COMM_WORLD, layout, async_o, {.name = "async"});
    const std::string own = a.dir + "/posix-rank" + std::to_string(rank) + ".bin";
    const std::string shared = a.dir + "/posix-shared.bin";
    const std::string h5_sync = a.dir + "/sync.h5";
    const std::string h5_async = a.dir + "/async.h5";
    std::vector<std::vector<float>> copy(a.layers);
    for (std::size_t l = 0; l < a.layers; ++l) copy[l].resize(layers[l].size());

    std::vector<double> t_posix, t_shared, t_sync, t_pause, t_async, t_copy;
    const auto own_offset = static_cast<off_t>(a.params * sizeof(float)) * rank;
    for (int r = 0; r < a.reps; ++r) {
      std::error_code ec;
      fs::remove(own, ec);
      if (rank == 0) {
        fs::remove(h5_sync, ec);
        fs::remove(h5_async, ec);
        fs::remove(shared, ec);
      }
      t_posix.push_back(timed([&] { posix_write(own, layers, a.fsync); }));
      t_shared.push_back(timed([&] { posix_write(shared, layers, a.fsync, own_offset, false); }));
      t_sync.push_back(timed([&] { sync_agent.save_checkpoint(h5_sync, refs); }));
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      async_agent.save_checkpoint(h5_async, refs);
      const double pause = MPI_Wtime() - t0;
      async_agent.wait_checkpoint();
      const double total = MPI_Wtime() - t0;
      t_pause.push_back(slowest(pause));
      t_async.push_back(slowest(total));
      t_copy.push_back(timed([&] {
        for (std::size_t l = 0; l < a.layers; ++l) {
          std::memcpy(copy[l].data(), layers[l].data(), layers[l].size() * sizeof(float));
        }
      }));
    }
    if (rank == 0) {
      const double bytes = static_cast<double>(a.params) * 4.0 * size;
      const double posix = median(t_posix);
      const double sync = median(t_sync);
      std::printf("checkpoint_bench: %d agents x %zu float32 parameters in %zu layers (%.0f MB "
                  "in all), %d repetitions, %s, directory %s\n",
                  size, a.params, a.layers, bytes / 1e6, a.reps,
                  a.fsync ? "fsync before close" : "no fsync", a.dir.c_str());
      std::printf("%-34s %10s %10s %10s %9s\n", "case", "median ms", "min ms", "max ms", "GB/s");
      const auto row = [&](const char* name, const std::vector<double>& v) {
        std::printf("%-34s %10.1f %10.1f %10.1f %9.2f\n", name, median(v) * 1e3,
                    *std::min_element(v.begin(), v.end()) * 1e3,
                    *std::max_element(v.begin(), v.end()) * 1e3, bytes / median(v) / 1e9);
      };
      row("posix: every rank its own file", t_posix);
      row("posix: one shared file (pwrite)", t_shared);
      row("save_checkpoint (sync)", t_sync);
      row("save_checkpoint (async): pause", t_pause);
      row("save_checkpoint (async): to wait", t_async);
      row("memcpy of the parameters", t_copy);
      std::printf("sync save / posix: %.2fx (target <= 1.5x); sync save / shared file: %.2fx; "
                  "async pause / memcpy: %.2fx\n",
                  sync / posix, sync / median(t_shared), median(t_pause) / median(t_copy));
      if (!a.json.empty()) {
        std::ofstream j(a.json);
        const auto list = [&](const std::vector<double>& v) {
          std::string s = "[";
          for (std::size_t i = 0; i < v.size(); ++i) {
            s += (i ? ", " : "") + std::to_string(v[i]);
          }
          return s + "]";
        };
        j << "{\"agents\": " << size << ", \"params\": " << a.params << ", \"layers\": " << a.layers
          << ", \"fsync\": " << (a.fsync ? "true" : "false")
          << ", \"seconds\": {\"posix\": " << list(t_posix)
          << ", \"posix_shared\": " << list(t_shared) << ", \"sync\": " << list(t_sync)
          << ", \"async_pause\": " << list(t_pause) << ", \"async_total\": " << list(t_async)
          << ", \"memcpy\": " << list(t_copy) << "}}\n";
      }
    }
    std::error_code ec;
    fs::remove(own, ec);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      fs::remove(h5_sync, ec);
      fs::remove(h5_async, ec);
      fs::remove(shared, ec);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench (rank %d): %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
