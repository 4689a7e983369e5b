#pragma once
// The one ref binder: matches the caller's layer refs (by name, or by position when none is
// named) to a layout, checking count, dtype, contiguity, view shape and element order, and
// data pointer of every layer.
// Used by publish, pull and bind() (BoundLayers, what the agents bind once per call); its
// error messages are part of the contract.

#include <cstddef>
#include <span>
#include <vector>

#include "paramwin/bound_layers.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

/// Binds the caller's refs to layout order: result[i] is the ref index for layer i.
/// Throws InvalidArgument naming the layer on a count, dtype, name, contiguity, view shape or
/// element order problem (a view of rank >= 2 must be the layer's shape, row-major);
/// messages start with "paramwin: <operation>: ".
std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                                     const char* operation);
std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const LayerRef> refs,
                                     const char* operation);
/// The order of refs already bound (BoundLayers): 0, 1, ..., @p n - 1.
std::vector<std::size_t> identity_order(std::size_t n);

}  // namespace paramwin::detail
