#pragma once
// Writing and reading one population checkpoint file (docs/checkpoints.md, "Format").
#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "paramwin/agent_kinds.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"

namespace paramwin::detail {

/// Format version written in the "format_version" attribute; a reader accepts only its own.
inline constexpr std::uint64_t kCheckpointFormatVersion = 1;

/// The paramwin version written in (and required from) a checkpoint's "library_version".
[[nodiscard]] std::string library_version();

/// What one rank contributes to a checkpoint: its agent.
struct AgentRecord {
  BoundLayers<ConstLayerRef> ordered;  ///< parameters, bound to the layout once by the agent
  std::string state;                   ///< encode_agent_state's text
  std::vector<CheckpointBlob> extras;  ///< the owner's blobs (CheckpointHooks::save)
  double metric = 0.0;                 ///< roster metric (for "best by metric")
  std::uint64_t generation = 0;        ///< rebirths
  std::int64_t steps = 0;              ///< steps so far
  std::int64_t age = 0;                ///< steps since (re)birth
  std::int64_t iteration = 0;          ///< the trainer's latest iteration
};

/// What a save takes from the agent's options, and nothing more.
struct SaveSettings {
  /// The "direction" attribute: loads rank the file's agents by their metrics with it.
  MetricDirection direction = MetricDirection::lower_is_better;
  std::string options{};           ///< the "options" attribute: the agent's options as text
  CheckpointOptions checkpoint{};  ///< after an asynchronous save: the rotation (path, keep)
};

/// Writes @p mine (one agent per rank of @p comm, agent index = rank) into @p path: under
/// "<path>.tmp" with collective MPI-IO, renamed by rank 0 once every rank closed it.
/// CheckpointError on every rank when any rank fails (the previous file at @p path is intact).
/// @note Collective over @p comm.
void write_checkpoint(MPI_Comm comm, const std::string& path, const Layout& layout,
                      const AgentRecord& mine, const SaveSettings& settings);

/// What read_checkpoint staged for this rank.
struct CheckpointRead {
  int agents = 0;                      ///< agents in the file
  int source = -1;                     ///< the file's agent this rank takes
  bool reborn = false;                 ///< an extra agent, reborn from donor @c source
  std::vector<std::string> layers;     ///< raw bytes of each layer, layout order
  std::string state;                   ///< the agent's state text
  std::vector<CheckpointBlob> extras;  ///< its blobs
};

/// Which of the file's @p metrics each of @p population ranks takes: all of them in order
/// when the counts match; the best @p population (kept in file order) when there are fewer
/// ranks; every agent plus, for the extra ranks, the best agents round-robin (reborn).
/// NaN metrics rank last; ties go to the lower index.
[[nodiscard]] std::vector<int> checkpoint_sources(std::span<const double> metrics,
                                                  MetricDirection direction, int population);

/// Opens @p path, validates it entirely for this rank's share (format, library version,
/// layout, agent count, datasets, checksums) and stages that share. CheckpointError on every
/// rank when any rank finds a problem; nothing is changed anywhere.
/// @note Collective over @p comm.
[[nodiscard]] CheckpointRead read_checkpoint(MPI_Comm comm, const std::string& path,
                                             const Layout& layout);

}  // namespace paramwin::detail
