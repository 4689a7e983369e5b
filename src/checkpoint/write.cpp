// Writing a population checkpoint: every rank creates every object collectively (parallel
// HDF5 requires it; datasets are allocated at creation), then each agent's datasets are
// written by their owner alone with independent MPI-IO, under a temporary name that rank 0
// renames once the file is closed everywhere.
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "checkpoint/file.hpp"
#include "checkpoint/hdf5.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"

namespace paramwin::detail {

namespace {

// Per agent, gathered to every rank: the values its attributes and dataset sizes need.
// metric bits, generation, steps, age, iteration, state size, state checksum, layer
// checksums..., then (size, checksum) per extra blob.
std::vector<std::uint64_t> summary_of(const AgentRecord& a, std::span<const std::uint64_t> sums) {
  std::vector<std::uint64_t> v{std::bit_cast<std::uint64_t>(a.metric),
                               a.generation,
                               static_cast<std::uint64_t>(a.steps),
                               static_cast<std::uint64_t>(a.age),
                               static_cast<std::uint64_t>(a.iteration),
                               a.state.size(),
                               XXH64(a.state.data(), a.state.size(), 0)};
  v.insert(v.end(), sums.begin(), sums.end());
  for (const CheckpointBlob& b : a.extras) {
    v.push_back(b.bytes.size());
    v.push_back(XXH64(b.bytes.data(), b.bytes.size(), 0));
  }
  return v;
}

std::string utc_now(std::int64_t t) {
  const auto tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Creates dataset @p name of @p type over @p space under @p parent, its checksum attribute,
// with no fill (every byte is written) and contiguous storage.
H5Id create_dataset(hid_t parent, const std::string& name, hid_t type, hid_t space,
                    std::uint64_t checksum, const std::string& path) {
  const H5Id dcpl = h5_check(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, path, "H5Pcreate");
  h5_check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), path, "H5Pset_fill_time");
  h5_check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), path, "H5Pset_alloc_time");
  H5Id d =
      h5_check(H5Dcreate2(parent, name.c_str(), type, space, H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
               H5Dclose, path, "creating dataset " + name);
  write_attr(d.get(), "xxh64", checksum, path);
  return d;
}

H5Id bytes_space(std::uint64_t n, const std::string& path) {
  const hsize_t dims[1] = {n};
  return h5_check(H5Screate_simple(1, dims, nullptr), H5Sclose, path, "H5Screate_simple");
}

// Independent write of one dataset by its owner (the others do nothing): the datasets were
// allocated when created (collectively, H5D_ALLOC_TIME_EARLY), so the owner's bytes go
// straight from its memory to its own extent of the file, as a POSIX write would. A
// collective transfer here would route every agent's bytes through ROMIO's two-phase
// aggregators: 16.7x the POSIX time in paramwin_checkpoint_bench (docs/benchmarks.md, 13).
// A failure here is this rank's alone (a full or failing disk seen from its node): it is
// recorded in @p failed, and the rank goes on through every collective call of the file (its
// later writes skipped) so that no other rank is left waiting in HDF5; write_file throws it
// once the file is closed, and write_checkpoint agrees on it.
void write_dataset(hid_t dset, hid_t type, bool mine, const void* data, hid_t dxpl,
                   const std::string& path, const std::string& what, std::string& failed) {
  if (!mine || !failed.empty()) return;
  try {
    h5_check(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, dxpl, data), path, "writing " + what);
  } catch (const std::exception& e) {
    failed = e.what();
  }
}

H5Id layer_space(const LayerSpec& spec, const std::string& path) {
  if (spec.shape.empty()) return h5_check(H5Screate(H5S_SCALAR), H5Sclose, path, "H5Screate");
  std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
  return h5_check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
                  path, "H5Screate_simple");
}

void write_file(MPI_Comm comm, const std::string& tmp, const std::string& path,
                const Layout& layout, const AgentRecord& mine,
                const std::vector<std::vector<std::uint64_t>>& all, const SaveSettings& settings,
                std::int64_t created) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const H5Id fapl = h5_mpio_fapl(comm, path);
  // Metadata is written by rank 0 alone: HDF5's default (distributed) strategy has every
  // rank write a share of it inside H5Fclose's collective flush, and a rank whose write fails
  // there leaves that flush's barrier while the others wait in it (seen: a hang). Rank 0
  // writes a few kilobytes per agent; the parameters are each owner's independent writes.
  {
    H5AC_cache_config_t mdc{};
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    h5_check(H5Pget_mdc_config(fapl.get(), &mdc), path, "H5Pget_mdc_config");
    mdc.metadata_write_strategy = H5AC_METADATA_WRITE_STRATEGY__PROCESS_0_ONLY;
    h5_check(H5Pset_mdc_config(fapl.get(), &mdc), path, "H5Pset_mdc_config");
  }
  H5Id file = h5_check(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                       path, "creating " + tmp);
  const hid_t root = file.get();
  write_attr(root, "format", std::string("paramwin-checkpoint"), path);
  write_attr(root, "format_version", kCheckpointFormatVersion, path);
  write_attr(root, "library_version", library_version(), path);
  write_attr(root, "layout_fingerprint", layout.fingerprint(), path);
  write_attr(root, "layout", layout.serialize(), path);
  write_attr(root, "agents", static_cast<std::int64_t>(all.size()), path);
  write_attr(root, "created", utc_now(created), path);
  write_attr(root, "created_unix", created, path);
  write_attr(root, "direction", std::string(direction_name(settings.direction)), path);
  write_attr(root, "options", settings.options, path);
  std::string extra_names;
  for (const CheckpointBlob& b : mine.extras)
    extra_names += (extra_names.empty() ? "" : "\n") + b.name;

  std::string failed;  // this rank's first failed write (write_dataset)
  {                    // every object closed before the file
    const H5Id dxpl = h5_check(H5Pcreate(H5P_DATASET_XFER), H5Pclose, path, "H5Pcreate(xfer)");
    h5_check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), path, "H5Pset_dxpl_mpio");
    const H5Id agents = h5_check(H5Gcreate2(root, "agents", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                 H5Gclose, path, "creating group agents");
    const std::size_t nl = layout.size();
    std::vector<H5Id> types;
    for (const LayerSpec& spec : layout.layers()) types.push_back(h5_type(spec.dtype));
    for (std::size_t a = 0; a < all.size(); ++a) {
      const std::vector<std::uint64_t>& s = all[a];
      const bool own = static_cast<int>(a) == rank;
      const std::string name = std::to_string(a);
      const H5Id g =
          h5_check(H5Gcreate2(agents.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   H5Gclose, path, "creating group agents/" + name);
      write_attr(g.get(), "metric", std::bit_cast<double>(s[0]), path);
      write_attr(g.get(), "generation", s[1], path);
      write_attr(g.get(), "steps", static_cast<std::int64_t>(s[2]), path);
      write_attr(g.get(), "age", static_cast<std::int64_t>(s[3]), path);
      write_attr(g.get(), "iteration", static_cast<std::int64_t>(s[4]), path);
      write_attr(g.get(), "extras", extra_names, path);
      const H5Id params =
          h5_check(H5Gcreate2(g.get(), "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   path, "creating group params");
      for (std::size_t l = 0; l < nl; ++l) {
        const LayerSpec& spec = layout[l];
        const H5Id space = layer_space(spec, path);
        const H5Id d = create_dataset(params.get(), h5_escape(spec.name), types[l].get(),
                                      space.get(), s[7 + l], path);
        if (spec.count != 0) {
          write_dataset(d.get(), types[l].get(), own, own ? mine.ordered[l].data() : nullptr,
                        dxpl.get(), path, "agents/" + name + "/params/" + spec.name, failed);
        }
      }
      const H5Id st_space = bytes_space(s[5], path);
      const H5Id st =
          create_dataset(g.get(), "state", H5T_NATIVE_UCHAR, st_space.get(), s[6], path);
      if (s[5] != 0) {
        write_dataset(st.get(), H5T_NATIVE_UCHAR, own, own ? mine.state.data() : nullptr,
                      dxpl.get(), path, "agents/" + name + "/state", failed);
      }
      const H5Id extra =
          h5_check(H5Gcreate2(g.get(), "extra", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   path, "creating group extra");
      for (std::size_t e = 0; e < mine.extras.size(); ++e) {
        const std::uint64_t size = s[7 + nl + 2 * e];
        const H5Id space = bytes_space(size, path);
        const H5Id d = create_dataset(extra.get(), h5_escape(mine.extras[e].name), H5T_NATIVE_UCHAR,
                                      space.get(), s[8 + nl + 2 * e], path);
        if (size != 0) {
          write_dataset(d.get(), H5T_NATIVE_UCHAR, own, own ? mine.extras[e].bytes.data() : nullptr,
                        dxpl.get(), path, "agents/" + name + "/extra/" + mine.extras[e].name,
                        failed);
        }
      }
    }
  }
  const bool closed = file.reset();
  if (!failed.empty()) throw CheckpointError(failed);
  if (!closed) h5_fail(path, "closing " + tmp);
}

}  // namespace

std::string library_version() { return PARAMWIN_LIBRARY_VERSION; }

void write_checkpoint(MPI_Comm comm, const std::string& path, const Layout& layout,
                      const AgentRecord& mine, const SaveSettings& settings) {
  h5_quiet();
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Local checks and checksums first: every rank agrees before any collective file call.
  std::string error;
  std::vector<std::uint64_t> summary;
  std::string names;
  try {
    if (path.empty()) throw CheckpointError("paramwin: save_checkpoint: empty path");
    if (mine.ordered.layout_fingerprint() != layout.fingerprint()) {
      throw CheckpointError("paramwin: save_checkpoint: the " +
                            std::to_string(mine.ordered.size()) +
                            " layers given were bound to another layout than the checkpoint's");
    }
    std::vector<std::uint64_t> sums;
    for (const ConstLayerRef& r : mine.ordered.refs()) {
      if (!r.host_accessible()) {
        throw CheckpointError("paramwin: save_checkpoint: layer '" + std::string(r.name()) +
                              "' is not in host-accessible memory (checkpoints read the "
                              "parameters from the host)");
      }
      sums.push_back(XXH64(r.data(), r.count() * dtype_size(r.dtype()), 0));
    }
    summary = summary_of(mine, sums);
    for (const CheckpointBlob& b : mine.extras) {
      if (b.name.empty() || b.name.find('/') != std::string::npos) {
        throw CheckpointError("paramwin: save_checkpoint: blob name '" + b.name +
                              "' is empty or holds '/'");
      }
      names += b.name + '\n';
    }
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (rank == 0 && !dir.empty() && !std::filesystem::is_directory(dir)) {
      throw CheckpointError("paramwin: save_checkpoint: directory '" + dir.string() + "' of '" +
                            path + "' does not exist");
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw<CheckpointError>(comm, error);
  if (!same_on_all_ranks(comm, layout.fingerprint()) ||
      !same_on_all_ranks(comm, XXH64(names.data(), names.size(), 0))) {
    throw CheckpointError("paramwin: save_checkpoint '" + path +
                          "': the agents' layouts or checkpoint blobs differ across ranks; a "
                          "checkpoint holds one layout");
  }

  const std::vector<std::uint64_t> flat = [&] {
    std::vector<std::uint64_t> out(summary.size() * static_cast<std::size_t>(size));
    check_mpi(MPI_Allgather(summary.data(), static_cast<int>(summary.size()), MPI_UINT64_T,
                            out.data(), static_cast<int>(summary.size()), MPI_UINT64_T, comm),
              "MPI_Allgather(checkpoint summary)");
    return out;
  }();
  std::vector<std::vector<std::uint64_t>> all;
  for (int r = 0; r < size; ++r) {
    const auto begin = flat.begin() + static_cast<std::ptrdiff_t>(summary.size()) * r;
    all.emplace_back(begin, begin + static_cast<std::ptrdiff_t>(summary.size()));
  }
  std::int64_t created = static_cast<std::int64_t>(std::time(nullptr));
  check_mpi(MPI_Bcast(&created, 1, MPI_INT64_T, 0, comm), "MPI_Bcast(checkpoint time)");

  const std::string tmp = path + ".tmp";
  try {
    write_file(comm, tmp, path, layout, mine, all, settings, created);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank closed the file (write_file's handles are gone): rename on rank 0 only, or,
  // when some rank failed, remove the partial file there (the previous checkpoint is untouched).
  try {
    agree_or_throw<CheckpointError>(comm, error);
  } catch (const CheckpointError&) {
    if (rank == 0) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
    }
    throw;
  }
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      error = "paramwin: save_checkpoint: renaming '" + tmp + "' to '" + path +
              "' failed: " + ec.message();
      std::filesystem::remove(tmp, ec);
    }
  }
  agree_or_throw<CheckpointError>(comm, error);
}

}  // namespace paramwin::detail
