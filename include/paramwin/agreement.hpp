#pragma once
/// @file agreement.hpp
/// "Do all ranks agree?" for code built on the library that must fail together, on every rank
/// of a communicator, so that no rank is left waiting in the next collective while another
/// one raises (the Python package's collective choices use it).

#include <mpi.h>

#include <string>

namespace paramwin {

/// Collective over @p comm: "" when @p local_error is "" on every rank. Otherwise, on a rank
/// that failed, its own @p local_error, and on every other rank "paramwin: rank N failed:
/// <message>" with the message of N, the lowest failing rank. The agreeing path costs one
/// allreduce; the message is broadcast only when something failed. Throws MpiError.
[[nodiscard]] std::string agreed_error(MPI_Comm comm, const std::string& local_error);

}  // namespace paramwin
