#pragma once
/// @file checkpoint.hpp
/// Population checkpoints (docs/checkpoints.md): the options that make an agent save itself
/// into one parallel-HDF5 file per checkpoint, and the error a bad checkpoint raises.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "paramwin/error.hpp"

namespace paramwin {

/// When and where an agent saves checkpoints from step() (AgentOptions::checkpoint). Every
/// agent of the population must have the same values (checked when the agents are created).
struct CheckpointOptions {
  /// Save after every @c every steps (the step count reaching a multiple of it); 0: off.
  std::int64_t every = 0;
  /// Save when at least this many seconds passed since the previous save (or the start),
  /// as agreed by every agent every kCheckpointSecondsProbe steps; 0: off.
  double every_seconds = 0.0;
  /// Path pattern: "{step}" is replaced by the step count, zero-padded to 12 digits (so
  /// that names sort by step). Needs "{step}" once when every or every_seconds is set.
  std::string path = "checkpoint-{step}.h5";
  /// Keep the newest @c keep checkpoints of the pattern and delete older ones (0: keep all).
  int keep = 0;
  /// Write in the background: a save (from step() or save_checkpoint) pauses the agent only
  /// to copy its parameters, state and blobs; a thread of the agent writes the file while
  /// training goes on. Its error is thrown by the next save, load, resume or
  /// Agent::wait_checkpoint (on every rank). Needs MPI_THREAD_MULTIPLE.
  bool async = false;
};

/// How often (in steps) the agents agree on the elapsed time for
/// CheckpointOptions::every_seconds: each agent waits, at most every this many steps, until
/// every agent has reached the step this many steps earlier.
inline constexpr std::int64_t kCheckpointSecondsProbe = 16;

/// A checkpoint that cannot be written or loaded: missing, truncated, corrupted (checksum),
/// written by another layout or library version, or holding fewer agents than needed. Raised
/// on every rank; the population is unchanged.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

/// Extra per-agent bytes saved beside the parameters (e.g. a LibTorch optimizer's state),
/// one dataset each under the agent's "extra" group, with its own checksum.
struct CheckpointBlob {
  std::string name;   ///< dataset name (unique, no '/')
  std::string bytes;  ///< contents
};

/// How an agent's owner adds its own state to the agent's checkpoints
/// (Agent::set_checkpoint_hooks).
struct CheckpointHooks {
  /// The blobs to save now (same names, in the same order, on every rank).
  std::function<std::vector<CheckpointBlob>()> save{};
  /// Receives the loaded blobs (in the order save returned them) once the whole checkpoint
  /// was validated; @p reborn: this agent did not exist in the checkpoint and took a donor's.
  std::function<void(const std::vector<CheckpointBlob>& blobs, bool reborn)> load{};
};

/// What a load restored on this rank.
struct CheckpointLoad {
  std::string path{};      ///< the file read
  int agents = 0;          ///< agents in the file
  int source = -1;         ///< the file's agent this rank's agent continues (or was reborn from)
  bool reborn = false;     ///< more agents than the file holds: reborn from donor @c source
  std::int64_t steps = 0;  ///< this agent's step count after the load
};

/// @p pattern with "{step}" replaced by @p step, zero-padded to 12 digits.
[[nodiscard]] std::string checkpoint_path(const std::string& pattern, std::int64_t step);

/// The newest existing file of @p pattern (the highest step), or "" when there is none.
/// Local: looks at the directory of the pattern on this rank only.
[[nodiscard]] std::string newest_checkpoint(const std::string& pattern);

}  // namespace paramwin
