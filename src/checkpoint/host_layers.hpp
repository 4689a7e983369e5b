#pragma once
// The parameters of a checkpoint go through the host: layers in host memory are read and
// written in place, device layers CUDA knows are copied (agents' and averaging agents'
// checkpoints alike).
#include <mpi.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paramwin/bound_layers.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

/// Throws InvalidArgument naming @p caller unless every layer of @p ordered is host memory or
/// device memory CUDA knows (a device window's layers: checkpoints copy them through the host).
template <class Ref>
void check_readable(const BoundLayers<Ref>& ordered, const Layout& layout,
                    const std::string& caller);

/// @p params bound to @p layout and checked by check_readable, agreed over @p comm
/// (InvalidArgument naming @p caller on every rank when any rank's are bad). @note Collective.
template <class Ref>
[[nodiscard]] BoundLayers<Ref> bind_readable(const Layout& layout, std::span<const Ref> params,
                                             MPI_Comm comm, const std::string& caller);

/// @p ordered with every device layer replaced by a host copy kept in @p copies (checkpoints
/// write from the host); @p ordered itself when every layer is host memory.
[[nodiscard]] BoundLayers<ConstLayerRef> on_host(const BoundLayers<ConstLayerRef>& ordered,
                                                 std::vector<std::vector<std::byte>>& copies);

/// Writes @p layers (raw bytes, layout order) into the caller's @p ordered (device layers
/// through CUDA). A CUDA failure (after every check passed) leaves that layer partly written:
/// its error ("" when none).
[[nodiscard]] std::string write_layers(const BoundLayers<LayerRef>& ordered,
                                       std::span<const std::string> layers, const Layout& layout);

}  // namespace paramwin::detail
