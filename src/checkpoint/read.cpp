// Reading a population checkpoint: every rank validates the file's attributes, picks the
// agent it continues (checkpoint_sources) and stages that agent's datasets after checking
// their shapes, types and checksums. Only once every rank succeeded does anyone use them.
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "checkpoint/file.hpp"
#include "checkpoint/hdf5.hpp"
#include "mpi/agree.hpp"

namespace paramwin::detail {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw CheckpointError("paramwin: checkpoint '" + path + "': " + what);
}

// Reads dataset @p name of @p parent whole into @p out after checking its element count,
// type size (and, for layers, the dataspace shape) and its checksum.
void read_dataset(hid_t parent, const std::string& name, hid_t mem_type, std::size_t count,
                  std::size_t elem, const std::vector<std::size_t>* shape, std::string& out,
                  const std::string& path, const std::string& where) {
  if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) <= 0) {
    bad(path, "dataset " + where + " missing");
  }
  const H5Id d =
      h5_check(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose, path, "opening " + where);
  const H5Id space = h5_check(H5Dget_space(d.get()), H5Sclose, path, "H5Dget_space");
  const H5Id type = h5_check(H5Dget_type(d.get()), H5Tclose, path, "H5Dget_type");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    h5_fail(path, "reading the shape of " + where);
  }
  const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get()));
  const bool shape_ok =
      shape == nullptr || std::equal(dims.begin(), dims.end(), shape->begin(), shape->end());
  if (n != count || !shape_ok || H5Tget_size(type.get()) != elem ||
      (shape != nullptr && H5Tequal(type.get(), mem_type) <= 0)) {
    bad(path, where + " holds " + std::to_string(n) + " elements of " +
                  std::to_string(H5Tget_size(type.get())) + " bytes, expected " +
                  std::to_string(count) + " of " + std::to_string(elem) +
                  (shape_ok ? "" : " (shape differs)") + " of the layout's type");
  }
  out.assign(count * elem, '\0');
  if (count != 0) {
    h5_check(H5Dread(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), path,
             "reading " + where);
  }
  const std::uint64_t want = read_attr_u64(d.get(), "xxh64", path);
  const std::uint64_t got = XXH64(out.data(), out.size(), 0);
  if (want != got) {
    bad(path, "checksum mismatch in " + where + " (xxh64 stored " + std::to_string(want) +
                  ", computed " + std::to_string(got) + "): the file is corrupted");
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t j = std::min(text.find('\n', i), text.size());
    out.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

struct FileHead {
  std::int64_t agents = 0;
  MetricDirection direction = MetricDirection::lower_is_better;
};

// The root's attributes: format, versions, layout, agent count and direction.
FileHead check_head(hid_t root, const std::string& path, const Layout& layout) {
  if (H5Aexists(root, "format") <= 0 ||
      read_attr_str(root, "format", path) != "paramwin-checkpoint") {
    bad(path, "not a paramwin checkpoint (no format attribute 'paramwin-checkpoint')");
  }
  const std::uint64_t format = read_attr_u64(root, "format_version", path);
  if (format != kCheckpointFormatVersion) {
    bad(path, "format version " + std::to_string(format) + ", this library reads version " +
                  std::to_string(kCheckpointFormatVersion));
  }
  const std::string version = read_attr_str(root, "library_version", path);
  if (version != library_version()) {
    bad(path, "written by paramwin " + version + ", this is paramwin " + library_version() +
                  " (checkpoints are read by the version that wrote them)");
  }
  const std::uint64_t fingerprint = read_attr_u64(root, "layout_fingerprint", path);
  if (fingerprint != layout.fingerprint()) {
    std::string why;
    try {
      why = Layout::first_difference(Layout::deserialize(read_attr_str(root, "layout", path)),
                                     layout);
    } catch (const std::exception&) {
      why = "layout fingerprints differ";
    }
    bad(path, "written for another layout: " + why);
  }
  const std::int64_t agents = read_attr_i64(root, "agents", path);
  if (agents < 1 || agents > std::numeric_limits<int>::max()) {
    bad(path, "attribute agents = " + std::to_string(agents));
  }
  return FileHead{.agents = agents,
                  .direction = parse_direction(read_attr_str(root, "direction", path))};
}

// Every agent's metric, from group agents/ (which must hold exactly @p agents groups).
std::vector<double> agent_metrics(hid_t group, std::int64_t agents, const std::string& path) {
  H5G_info_t info{};
  h5_check(H5Gget_info(group, &info), path, "H5Gget_info(agents)");
  if (info.nlinks != static_cast<hsize_t>(agents)) {
    bad(path, "the file says " + std::to_string(agents) + " agents but holds " +
                  std::to_string(info.nlinks) + " agent groups");
  }
  std::vector<double> metrics;
  for (std::int64_t a = 0; a < agents; ++a) {
    const std::string name = std::to_string(a);
    if (H5Lexists(group, name.c_str(), H5P_DEFAULT) <= 0) {
      bad(path, "agent group agents/" + name + " missing");
    }
    const H5Id g = h5_check(H5Gopen2(group, name.c_str(), H5P_DEFAULT), H5Gclose, path,
                            "opening agents/" + name);
    metrics.push_back(read_attr_f64(g.get(), "metric", path));
  }
  return metrics;
}

// One dataset of unsigned chars, whatever its length.
void read_bytes(hid_t parent, const std::string& name, std::string& out, const std::string& path,
                const std::string& where) {
  const H5Id d =
      h5_check(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose, path, "opening " + where);
  const H5Id space = h5_check(H5Dget_space(d.get()), H5Sclose, path, "H5Dget_space");
  const auto n = static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get()));
  read_dataset(parent, name, H5T_NATIVE_UCHAR, n, 1, nullptr, out, path, where);
}

// Agent group @p g (at @p where): its parameters, state and blobs, into @p out.
void read_agent(hid_t g, const std::string& where, const Layout& layout, CheckpointRead& out,
                const std::string& path) {
  if (H5Lexists(g, "params", H5P_DEFAULT) <= 0) bad(path, where + "/params missing");
  const H5Id params =
      h5_check(H5Gopen2(g, "params", H5P_DEFAULT), H5Gclose, path, "opening " + where + "/params");
  H5G_info_t pinfo{};
  h5_check(H5Gget_info(params.get(), &pinfo), path, "H5Gget_info(params)");
  if (pinfo.nlinks != layout.size()) {
    bad(path, where + "/params holds " + std::to_string(pinfo.nlinks) +
                  " datasets, the layout has " + std::to_string(layout.size()) + " layers");
  }
  for (const LayerSpec& spec : layout.layers()) {
    const H5Id type = h5_type(spec.dtype);
    out.layers.emplace_back();
    read_dataset(params.get(), h5_escape(spec.name), type.get(), spec.count, dtype_size(spec.dtype),
                 &spec.shape, out.layers.back(), path, where + "/params/" + spec.name);
  }
  if (H5Lexists(g, "state", H5P_DEFAULT) <= 0) bad(path, where + "/state missing");
  read_bytes(g, "state", out.state, path, where + "/state");
  if (H5Lexists(g, "extra", H5P_DEFAULT) <= 0) return;
  const H5Id extra =
      h5_check(H5Gopen2(g, "extra", H5P_DEFAULT), H5Gclose, path, "opening " + where + "/extra");
  for (const std::string& blob : split_lines(read_attr_str(g, "extras", path))) {
    const std::string bwhere = std::string(where).append("/extra/").append(blob);
    const std::string dname = h5_escape(blob);
    if (H5Lexists(extra.get(), dname.c_str(), H5P_DEFAULT) <= 0) bad(path, bwhere + " missing");
    out.extras.push_back(CheckpointBlob{.name = blob, .bytes = {}});
    read_bytes(extra.get(), dname, out.extras.back().bytes, path, bwhere);
  }
}

CheckpointRead read_share(MPI_Comm comm, const std::string& path, const Layout& layout) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const H5Id fapl = h5_mpio_fapl(comm, path);
  const H5Id file = h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, path,
                             "opening (truncated or not an HDF5 file?)");
  const FileHead head = check_head(file.get(), path, layout);
  if (H5Lexists(file.get(), "agents", H5P_DEFAULT) <= 0) bad(path, "group 'agents' missing");
  const H5Id group =
      h5_check(H5Gopen2(file.get(), "agents", H5P_DEFAULT), H5Gclose, path, "opening group agents");
  const std::vector<double> metrics = agent_metrics(group.get(), head.agents, path);
  const std::vector<int> sources = checkpoint_sources(metrics, head.direction, size);
  CheckpointRead out;
  out.agents = static_cast<int>(head.agents);
  out.source = sources[static_cast<std::size_t>(rank)];
  out.reborn = rank >= head.agents;
  const std::string name = std::to_string(out.source);
  const H5Id g = h5_check(H5Gopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Gclose, path,
                          "opening agents/" + name);
  read_agent(g.get(), "agents/" + name, layout, out, path);
  return out;
}

}  // namespace

std::vector<int> checkpoint_sources(std::span<const double> metrics, MetricDirection direction,
                                    int population) {
  const int m = static_cast<int>(metrics.size());
  std::vector<int> best(metrics.size());
  std::iota(best.begin(), best.end(), 0);
  std::stable_sort(best.begin(), best.end(), [&](int a, int b) {
    const double x = metrics[static_cast<std::size_t>(a)];
    const double y = metrics[static_cast<std::size_t>(b)];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return is_better(direction, x, y);
  });
  std::vector<int> out;
  if (population <= m) {
    out.assign(best.begin(), best.begin() + population);
    std::sort(out.begin(), out.end());
    return out;
  }
  for (int r = 0; r < m; ++r) out.push_back(r);
  for (int r = m; r < population; ++r) out.push_back(best[static_cast<std::size_t>((r - m) % m)]);
  return out;
}

CheckpointRead read_checkpoint(MPI_Comm comm, const std::string& path, const Layout& layout) {
  h5_quiet();
  std::string error;
  if (path.empty()) {
    error = "paramwin: load_checkpoint: empty path";
  } else if (!std::filesystem::is_regular_file(path)) {
    error = "paramwin: checkpoint '" + path + "' does not exist (or is not a file)";
  }
  agree_or_throw<CheckpointError>(comm, error);
  CheckpointRead out;
  try {
    out = read_share(comm, path, layout);  // the file is closed (on every rank) on return
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw<CheckpointError>(comm, error);
  return out;
}

}  // namespace paramwin::detail
