// HierarchicalAveragingAgent's checkpoints: one agent per training rank in src/checkpoint's
// format (a group's members hold different parameters between steps), each with its group,
// step count and pause as a JSON object, the leaders' with their AveragingAgent's state across
// groups (averaging_checkpoint.hpp) inside.
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "averaging/averaging_checkpoint.hpp"
#include "averaging/hierarchical_state.hpp"
#include "checkpoint/file.hpp"
#include "checkpoint/host_layers.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"
#include "paramwin/hierarchical_averaging.hpp"

namespace paramwin {

namespace {

constexpr const char* kFormat = "paramwin-hierarchical-averaging-state";
constexpr std::int64_t kVersion = 1;

/// This rank's place in the hierarchy and counters, and the leader's agent across groups.
struct HierarchySnapshot {
  int group = -1;
  int groups = 0;
  int rank_in_group = 0;
  int group_size = 0;
  std::int64_t steps = 0;
  bool paused = false;
  std::string across;  // the leader's AveragingAgent state ("" on the other ranks)
};

std::string encode(const detail::HierarchicalState& s, const std::string& across) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["format_version"] = kVersion;
  j["group"] = s.group_id_;
  j["groups"] = s.groups_;
  j["rank_in_group"] = s.rank_in_group_;
  j["group_size"] = s.group_size_;
  j["steps"] = s.steps_;
  j["paused"] = s.paused_;
  j["across"] = across;
  return j.dump();
}

HierarchySnapshot decode(const std::string& text, const std::string& where) {
  if (text.starts_with("paramwin-agent-state")) {
    throw CheckpointError(where + "written by a population of Agents (dying agents), not by a "
                                  "HierarchicalAveragingAgent");
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string format = j.at("format").get<std::string>();
    if (format != kFormat || j.at("format_version").get<std::int64_t>() != kVersion) {
      throw CheckpointError(where + "not a HierarchicalAveragingAgent state of format version " +
                            std::to_string(kVersion) + " (format '" + format +
                            "': a file of AveragingAgents loads into AveragingAgents)");
    }
    return HierarchySnapshot{.group = j.at("group").get<int>(),
                             .groups = j.at("groups").get<int>(),
                             .rank_in_group = j.at("rank_in_group").get<int>(),
                             .group_size = j.at("group_size").get<int>(),
                             .steps = j.at("steps").get<std::int64_t>(),
                             .paused = j.at("paused").get<bool>(),
                             .across = j.at("across").get<std::string>()};
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + "unreadable HierarchicalAveragingAgent state: " + e.what());
  }
}

/// The file's share of this rank, checked against this rank's place (and, on a leader, its
/// agent across groups): CheckpointError (on this rank) otherwise.
HierarchySnapshot check_share(const detail::HierarchicalState& s, const detail::CheckpointRead& r,
                              const std::string& path, detail::AveragingSnapshot& across) {
  const std::string where =
      "paramwin: checkpoint '" + path + "': agent " + std::to_string(r.source) + ": ";
  const int training = s.training_.size();
  if (r.agents != training) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': written by " +
                          std::to_string(r.agents) + " ranks, this hierarchy has " +
                          std::to_string(training) + " training ranks");
  }
  HierarchySnapshot h = decode(r.state, where);
  if (h.group != s.group_id_ || h.groups != s.groups_ || h.rank_in_group != s.rank_in_group_ ||
      h.group_size != s.group_size_) {
    throw CheckpointError(
        where + "saved as rank " + std::to_string(h.rank_in_group) + " of " +
        std::to_string(h.group_size) + " in group " + std::to_string(h.group) + " of " +
        std::to_string(h.groups) + "; this rank is rank " + std::to_string(s.rank_in_group_) +
        " of " + std::to_string(s.group_size_) + " in group " + std::to_string(s.group_id_) +
        " of " + std::to_string(s.groups_) + " (load with the groups that saved)");
  }
  if (s.across_) {
    across = detail::decode_averaging_state(h.across, where + "the leader's agent: ");
    if (across.size != s.groups_ || across.rank != s.group_id_) {
      throw CheckpointError(where + "the leader's agent was rank " + std::to_string(across.rank) +
                            " of " + std::to_string(across.size) + " across groups");
    }
  }
  return h;
}

}  // namespace

void HierarchicalAveragingAgent::save_checkpoint(const std::string& path,
                                                 std::span<const ConstLayerRef> params) {
  detail::HierarchicalState& s = state();
  const MPI_Comm comm = s.training_.get();
  const BoundLayers<ConstLayerRef> ordered =
      detail::bind_readable(s.layout_, params, comm, "HierarchicalAveragingAgent::save_checkpoint");
  const std::string across = s.across_ ? detail::take_averaging_state(s.across_->state()) : "";
  std::vector<std::vector<std::byte>> pending;  // a symmetric leader's exchanges pending
  const BoundLayers<ConstLayerRef> values =
      s.across_ ? s.across_->state().with_pending(ordered, pending) : ordered;
  detail::write_checkpoint(comm, path, s.layout_,
                           detail::averaging_record(values, encode(s, across), s.steps_),
                           detail::SaveSettings{.options = "kind=hierarchical-averaging groups=" +
                                                           std::to_string(s.groups_)});
}

CheckpointLoad HierarchicalAveragingAgent::load_checkpoint(const std::string& path,
                                                           std::span<const LayerRef> params) {
  detail::HierarchicalState& s = state();
  const MPI_Comm comm = s.training_.get();
  const BoundLayers<LayerRef> ordered =
      detail::bind_readable(s.layout_, params, comm, "HierarchicalAveragingAgent::load_checkpoint");
  const detail::CheckpointRead read = detail::read_checkpoint(comm, path, s.layout_);
  HierarchySnapshot h;
  detail::AveragingSnapshot across;
  std::string error;
  try {
    h = check_share(s, read, path, across);
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::agree_or_throw<CheckpointError>(comm, error);

  error = detail::write_layers(ordered, read.layers, s.layout_);
  s.steps_ = h.steps;
  s.paused_ = h.paused;
  if (s.across_) {
    detail::restore_averaging_state(s.across_->state(), across, ordered.as_const());
  }
  // Nobody steps before every leader republished.
  detail::agree_or_throw<CheckpointError>(comm, error);
  return CheckpointLoad{.path = path,
                        .agents = read.agents,
                        .source = read.source,
                        .reborn = false,
                        .steps = s.steps_};
}

}  // namespace paramwin
