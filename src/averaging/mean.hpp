#pragma once
// The synchronous mean both averaging agents take: an MPI_Allreduce sum of float32 or float64
// host layers over a communicator, scaled by 1/size (defined in averaging_round.cpp).
#include <mpi.h>

#include "paramwin/bound_layers.hpp"

namespace paramwin::detail {

/// Replaces each layer of @p params by its mean over the @p size ranks of @p comm.
/// @p what names the caller in a count-overflow error. @note Collective over @p comm.
void allreduce_mean(const BoundLayers<LayerRef>& params, MPI_Comm comm, int size, const char* what);

}  // namespace paramwin::detail
