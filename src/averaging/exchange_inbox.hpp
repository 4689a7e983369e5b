#pragma once
// ExchangeInbox: the shared-memory mailboxes of symmetric (mean-preserving) averaging. Every
// rank of the population owns one inbox in a shared window over all ranks (one node): a
// header (a spin lock, an open flag, the exchanges pending) and one float64 accumulator per
// element of the layout. A rank that moves its parameters x by d = w (y - x) towards peer p's
// snapshot y adds -d to p's inbox under p's lock; p adds its inbox to its own parameters at
// its next step (drain). The two changes are one computed value with opposite signs, so the
// population's sum of parameters and inboxes never changes by averaging.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mpi/handles.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

class ExchangeInbox {
 public:
  /// What a deposit into a peer's inbox did.
  enum class Deposit : std::uint8_t {
    done,       ///< -d added to the peer's inbox, +d to the accumulator
    closed,     ///< the peer's inbox is closed (paused): nothing changed
    timed_out,  ///< the peer's lock was not taken before the deadline: nothing changed
  };

  /// Creates the shared window over @p comm for @p layout (host float32 or float64 layers).
  /// InvalidArgument on every rank when the ranks of @p comm are not all on one node.
  /// @note Collective over @p comm.
  ExchangeInbox(MPI_Comm comm, const Layout& layout);

  /// One exchange with @p peer: for every element, d = @p weight * (y - x) with y the peer's
  /// snapshot in @p snapshot and x this rank's parameters in @p own (unchanged here); adds -d
  /// to the peer's inbox and +d to @p accumulator (per layer, float64). Waits for the peer's
  /// lock no later than MPI_Wtime() @p deadline (<= 0: no deadline).
  Deposit deposit(int peer, std::span<const LayerRef> snapshot, const BoundLayers<LayerRef>& own,
                  double weight, std::vector<std::vector<double>>& accumulator, double deadline);
  /// Adds this rank's inbox to @p params and empties it; returns the exchanges it held.
  std::int64_t drain(const BoundLayers<LayerRef>& params);
  /// Adds this rank's inbox to @p copies (host copies of the parameters, the layout's types)
  /// and leaves the inbox as it is: what the parameters will be once it is drained (a
  /// checkpoint's values).
  void add_pending_to(std::span<const LayerRef> copies);
  /// Empties this rank's inbox (a checkpoint was loaded: the exchanges pending belong to the
  /// parameters it replaced).
  void clear();
  /// Opens (resume) or closes (pause) this rank's inbox to deposits.
  void set_open(bool open);

 private:
  struct Header;
  [[nodiscard]] Header& header(int rank) const;
  [[nodiscard]] double* values(int rank) const;

  Win win_;
  std::vector<std::byte*> bases_;     // every rank's segment, mapped here
  std::vector<std::size_t> offsets_;  // per layer, first accumulator element
  std::size_t total_ = 0;             // accumulator elements (the layout's)
  int rank_ = 0;
};

}  // namespace paramwin::detail
