// Checkpoint parameters through the host (host_layers.hpp).
#include "checkpoint/host_layers.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "detail/cuda.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

template <class Ref>
void check_readable(const BoundLayers<Ref>& ordered, const Layout& layout,
                    const std::string& caller) {
  for (std::size_t l = 0; l < ordered.size(); ++l) {
    const Ref& r = ordered[l];
    if (r.host_accessible() || r.count() == 0 || cuda::classify(r.data()).device) continue;
    throw InvalidArgument("paramwin: " + caller + ": layer '" + layout[l].name +
                          "' is neither host memory nor device memory that CUDA knows "
                          "(checkpoints read and write the parameters on the host, copying "
                          "device layers" +
                          (cuda::built() ? "" : "; this paramwin was built without CUDA") + ")");
  }
}

template void check_readable(const BoundLayers<LayerRef>&, const Layout&, const std::string&);
template void check_readable(const BoundLayers<ConstLayerRef>&, const Layout&, const std::string&);

template <class Ref>
BoundLayers<Ref> bind_readable(const Layout& layout, std::span<const Ref> params, MPI_Comm comm,
                               const std::string& caller) {
  BoundLayers<Ref> ordered;
  std::string error;
  try {
    ordered = paramwin::bind(layout, params, caller);
    check_readable(ordered, layout, caller);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw<InvalidArgument>(comm, error);
  return ordered;
}

template BoundLayers<LayerRef> bind_readable(const Layout&, std::span<const LayerRef>, MPI_Comm,
                                             const std::string&);
template BoundLayers<ConstLayerRef> bind_readable(const Layout&, std::span<const ConstLayerRef>,
                                                  MPI_Comm, const std::string&);

BoundLayers<ConstLayerRef> on_host(const BoundLayers<ConstLayerRef>& ordered,
                                   std::vector<std::vector<std::byte>>& copies) {
  const std::span<const ConstLayerRef> refs = ordered.refs();
  if (std::all_of(refs.begin(), refs.end(),
                  [](const ConstLayerRef& r) { return r.host_accessible(); })) {
    return ordered;
  }
  copies.assign(refs.size(), {});
  std::vector<ConstLayerRef> host;
  host.reserve(refs.size());
  for (std::size_t l = 0; l < refs.size(); ++l) {
    const ConstLayerRef& r = refs[l];
    if (r.host_accessible()) {
      host.push_back(r);
      continue;
    }
    copies[l].resize(r.count() * dtype_size(r.dtype()));
    cuda::copy_blocking(copies[l].data(), r.data(), copies[l].size());
    host.emplace_back(r.name(), copies[l].data(), r.count(), r.dtype());
  }
  return BoundLayersAccess::make(std::move(host), ordered.layout_fingerprint());
}

std::string write_layers(const BoundLayers<LayerRef>& ordered, std::span<const std::string> layers,
                         const Layout& layout) {
  for (std::size_t l = 0; l < ordered.size(); ++l) {
    if (layers[l].empty()) continue;
    if (ordered[l].host_accessible()) {
      std::memcpy(ordered[l].data(), layers[l].data(), layers[l].size());
      continue;
    }
    try {
      cuda::copy_blocking(ordered[l].data(), layers[l].data(), layers[l].size());
    } catch (const std::exception& e) {
      return "paramwin: load_checkpoint: writing layer '" + layout[l].name +
             "' into device memory: " + e.what();
    }
  }
  return "";
}

}  // namespace paramwin::detail
