// AveragingAgent's checkpoints (docs/averaging.md, "Checkpoints"): the population's parameters
// and each agent's state in one file of src/checkpoint's format (one agent per rank), the
// state as a JSON object in the agent's "state" dataset. A load validates everything on every
// rank before it changes anything, then restores the counters that decide the next rounds
// (steps, rounds: the topology's round index) and republishes under the saved version.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "averaging/averaging_checkpoint.hpp"
#include "averaging/averaging_state.hpp"
#include "checkpoint/file.hpp"
#include "checkpoint/host_layers.hpp"
#include "mpi/agree.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace detail {

namespace {
constexpr const char* kStateFormat = "paramwin-averaging-state";
constexpr std::int64_t kStateVersion = 1;
}  // namespace

std::string take_averaging_state(AveragingState& s) {
  s.pending_ = false;  // a resumed run has no correction in flight: neither has this one
  s.quiesce();
  nlohmann::ordered_json j;
  j["format"] = kStateFormat;
  j["format_version"] = kStateVersion;
  j["rank"] = s.rank_;
  j["size"] = s.size_;
  j["steps"] = s.steps_;
  j["rounds"] = s.rounds_;
  j["paused"] = s.paused_;
  j["version"] = s.window_.version();
  nlohmann::ordered_json seen = nlohmann::ordered_json::array();
  for (const SeenVersion& v : s.seen_) {
    seen.push_back(nlohmann::ordered_json::array({v.version, v.since_step}));
  }
  j["seen"] = seen;
  return j.dump();
}

AveragingSnapshot decode_averaging_state(const std::string& text, const std::string& where) {
  if (text.starts_with("paramwin-agent-state")) {
    throw CheckpointError(where + "written by a population of Agents (dying agents), not by "
                                  "AveragingAgents: an AveragingAgent loads only AveragingAgent "
                                  "checkpoints");
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.at("format").get<std::string>() != kStateFormat ||
        j.at("format_version").get<std::int64_t>() != kStateVersion) {
      throw CheckpointError(where + "not an AveragingAgent state of format version " +
                            std::to_string(kStateVersion) + " (format '" +
                            j.at("format").get<std::string>() + "')");
    }
    AveragingSnapshot s{.rank = j.at("rank").get<int>(),
                        .size = j.at("size").get<int>(),
                        .steps = j.at("steps").get<std::int64_t>(),
                        .rounds = j.at("rounds").get<std::int64_t>(),
                        .paused = j.at("paused").get<bool>(),
                        .version = j.at("version").get<std::uint64_t>(),
                        .seen = {}};
    for (const nlohmann::json& v : j.at("seen")) {
      s.seen.push_back(
          {.version = v.at(0).get<std::uint64_t>(), .since_step = v.at(1).get<std::int64_t>()});
    }
    if (s.steps < 0 || s.rounds < 0 || s.rounds > s.steps ||
        s.seen.size() != static_cast<std::size_t>(s.size)) {
      throw CheckpointError(where + "inconsistent AveragingAgent state (steps " +
                            std::to_string(s.steps) + ", rounds " + std::to_string(s.rounds) +
                            ", " + std::to_string(s.seen.size()) + " peers seen of " +
                            std::to_string(s.size) + ")");
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(where + "unreadable AveragingAgent state: " + e.what());
  }
}

void restore_averaging_state(AveragingState& s, const AveragingSnapshot& snap,
                             const BoundLayers<ConstLayerRef>& loaded) {
  s.pending_ = false;
  s.quiesce();
  s.steps_ = snap.steps;
  s.rounds_ = snap.rounds;
  s.peers_round_ = -1;
  s.paused_ = snap.paused;
  s.seen_ = snap.seen;
  s.last_round_time_ = MPI_Wtime();
  s.reset_inbox();  // the exchanges pending belong to the parameters the load replaces
  s.window_.continue_versions(snap.version);
  if (snap.version > 0) {
    (void)s.publish(loaded);  // nobody reads while every rank is in the load
    return;
  }
  AgentStatus status = s.window_.status();
  status.iteration = s.steps_;
  status.age = s.steps_;
  status.state = s.paused_ ? AgentState::paused : AgentState::fresh;
  s.window_.set_status(status);
}

AgentRecord averaging_record(const BoundLayers<ConstLayerRef>& ordered, std::string state,
                             std::int64_t steps) {
  return AgentRecord{.ordered = ordered,
                     .state = std::move(state),
                     .extras = {},
                     .metric = 0.0,
                     .generation = 0,
                     .steps = steps,
                     .age = steps,
                     .iteration = steps};
}

}  // namespace detail

namespace {

/// The "options" attribute: what the saving agents ran with (for the reader of the file).
std::string describe(const AveragingOptions& o) {
  std::ostringstream s;
  s << "kind=averaging topology=" << enum_name(o.topology.kind) << " k=" << o.topology.k
    << " seed=" << o.topology.seed << " interval=" << o.interval << " interval_ms=" << o.interval_ms
    << " warmup_steps=" << o.warmup_steps << " cooldown_steps=" << o.cooldown_steps
    << " total_steps=" << o.total_steps << " publish_every=" << o.publish_every
    << " stale_steps=" << o.stale_steps << " background=" << (o.background ? 1 : 0);
  return s.str();
}

/// The file's share of this rank, checked to be this population's: CheckpointError (on this
/// rank) otherwise.
detail::AveragingSnapshot check_share(const detail::CheckpointRead& read, const std::string& path,
                                      int rank, int size) {
  if (read.agents != size) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': written by a population of " +
                          std::to_string(read.agents) + " averaging agents, this one has " +
                          std::to_string(size) +
                          " (an averaging population resumes with as many ranks as it saved)");
  }
  detail::AveragingSnapshot s =
      detail::decode_averaging_state(read.state, "paramwin: checkpoint '" + path + "': agent " +
                                                     std::to_string(read.source) + ": ");
  if (s.size != size || s.rank != rank) {
    throw CheckpointError("paramwin: checkpoint '" + path + "': agent " +
                          std::to_string(read.source) + " says it was rank " +
                          std::to_string(s.rank) + " of " + std::to_string(s.size));
  }
  return s;
}

}  // namespace

void AveragingAgent::save_checkpoint(const std::string& path,
                                     std::span<const ConstLayerRef> params) {
  detail::AveragingState& s = state();
  s.require_collectives("save_checkpoint");
  const MPI_Comm comm = s.sync_comm_.get();
  const Layout& layout = s.window_.layout();
  const BoundLayers<ConstLayerRef> ordered =
      detail::bind_readable(layout, params, comm, "AveragingAgent::save_checkpoint");
  detail::AgentRecord mine =
      detail::averaging_record(ordered, detail::take_averaging_state(s), s.steps_);
  std::vector<std::vector<std::byte>> copies;   // host copies of device layers
  std::vector<std::vector<std::byte>> pending;  // symmetric: parameters + exchanges pending
  std::string error;
  try {
    if (s.hooks_.save) {
      mine.extras = s.hooks_.save();
    }
    mine.ordered = detail::on_host(ordered, copies);  // after the hook (it may stage layers)
  } catch (const std::exception& e) {
    error = std::string("paramwin: AveragingAgent::save_checkpoint: ") + e.what();
  }
  detail::agree_or_throw<CheckpointError>(comm, error);
  mine.ordered = s.with_pending(mine.ordered, pending);  // host layers: symmetric needs them
  detail::write_checkpoint(comm, path, layout, mine,
                           detail::SaveSettings{.options = describe(s.options_)});
}

CheckpointLoad AveragingAgent::load_checkpoint(const std::string& path,
                                               std::span<const LayerRef> params) {
  detail::AveragingState& s = state();
  s.require_collectives("load_checkpoint");
  const MPI_Comm comm = s.sync_comm_.get();
  const Layout& layout = s.window_.layout();
  const BoundLayers<LayerRef> ordered =
      detail::bind_readable(layout, params, comm, "AveragingAgent::load_checkpoint");
  // Everything that can fail first, on copies (read_checkpoint agrees on its own errors).
  const detail::CheckpointRead read = detail::read_checkpoint(comm, path, layout);
  detail::AveragingSnapshot snap;
  std::string error;
  try {
    snap = check_share(read, path, s.rank_, s.size_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  detail::agree_or_throw<CheckpointError>(comm, error);

  error = detail::write_layers(ordered, read.layers, layout);
  detail::restore_averaging_state(s, snap, ordered.as_const());
  if (s.hooks_.load && error.empty()) {
    try {
      s.hooks_.load(read.extras, false);
    } catch (const std::exception& e) {
      error = std::string("paramwin: AveragingAgent::load_checkpoint: the checkpoint hook "
                          "failed: ") +
              e.what();
    }
  }
  // Nobody steps before every agent republished (the agreement's reduction orders it).
  detail::agree_or_throw<CheckpointError>(comm, error);
  return CheckpointLoad{.path = path,
                        .agents = read.agents,
                        .source = read.source,
                        .reborn = false,
                        .steps = s.steps_};
}

void AveragingAgent::set_checkpoint_hooks(CheckpointHooks hooks) {
  state().hooks_ = std::move(hooks);
}

}  // namespace paramwin
