// AgentCore's checkpoints: what an agent saves of itself (AgentSnapshot + parameters + the
// owner's blobs), how a load validates everything on every rank before changing anything,
// and when step() saves by itself (AgentOptions::checkpoint). One code path for both kinds
// of agent (CheckpointComms): a one-rank Agent writes and reads its own share; a GroupAgent's
// leader writes and reads for its agent and shares the staged share with the agent's ranks.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_core.hpp"
#include "agent/rebirth_executor.hpp"  // RebirthExecutor, seconds_since
#include "checkpoint/agent_state.hpp"
#include "checkpoint/async_save.hpp"
#include "checkpoint/file.hpp"
#include "checkpoint/host_layers.hpp"
#include "checkpoint/path.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

constexpr std::size_t kMaxBcastBytes = std::size_t{1} << 30;  // per broadcast, below INT_MAX

// What a save writes of @p o: the direction, the checkpoint options and the options' text.
SaveSettings save_settings(const AgentOptions& o) {
  std::ostringstream s;
  s << "seed=" << o.seed << " direction=" << direction_name(o.direction)
    << " age=" << (o.triggers.age.enabled ? 1 : 0) << " age_lo=" << o.triggers.age.lo
    << " age_hi=" << o.triggers.age.hi << " selection=" << selection_name(o.selection.kind)
    << " k=" << o.selection.k << " mixing=" << mixing_name(o.mixing.kind)
    << " publish_every=" << o.publish.every << " checkpoint_every=" << o.checkpoint.every
    << " checkpoint_every_seconds=" << o.checkpoint.every_seconds
    << " checkpoint_path=" << o.checkpoint.path << " checkpoint_keep=" << o.checkpoint.keep
    << " checkpoint_async=" << (o.checkpoint.async ? 1 : 0);
  return SaveSettings{.direction = o.direction, .options = s.str(), .checkpoint = o.checkpoint};
}

int rank_of(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank(checkpoint)");
  return rank;
}

// @p bytes bytes at @p data from rank 0 of @p comm, in pieces that fit an int.
void bcast_bytes(void* data, std::size_t bytes, MPI_Comm comm) {
  auto* p = static_cast<char*>(data);
  for (std::size_t off = 0; off < bytes; off += kMaxBcastBytes) {
    const std::size_t n = std::min(kMaxBcastBytes, bytes - off);
    check_mpi(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, 0, comm),
              "MPI_Bcast(checkpoint bytes)");
  }
}

// @p s from rank 0 of @p comm (its length first).
void bcast_string(std::string& s, MPI_Comm comm) {
  unsigned long long len = s.size();
  check_mpi(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "MPI_Bcast(checkpoint length)");
  s.resize(static_cast<std::size_t>(len));
  bcast_bytes(s.data(), s.size(), comm);
}

// What the writer (rank 0 of @p agent) staged, on every rank of its agent: the share's
// header, its layers (sizes known from @p layout), its state text and its blobs.
void share_read(CheckpointRead& r, const Layout& layout, MPI_Comm agent) {
  long long head[4] = {r.agents, r.source, r.reborn ? 1 : 0,
                       static_cast<long long>(r.extras.size())};
  check_mpi(MPI_Bcast(head, 4, MPI_LONG_LONG, 0, agent), "MPI_Bcast(checkpoint share)");
  r.agents = static_cast<int>(head[0]);
  r.source = static_cast<int>(head[1]);
  r.reborn = head[2] != 0;
  r.layers.resize(layout.size());
  for (std::size_t l = 0; l < layout.size(); ++l) {
    r.layers[l].resize(layout[l].count * dtype_size(layout[l].dtype));
    bcast_bytes(r.layers[l].data(), r.layers[l].size(), agent);
  }
  bcast_string(r.state, agent);
  r.extras.resize(static_cast<std::size_t>(head[3]));
  for (CheckpointBlob& b : r.extras) {
    bcast_string(b.name, agent);
    bcast_string(b.bytes, agent);
  }
}

}  // namespace

void AgentCore::save_checkpoint(RebirthExecutor& ex, const CheckpointComms& c,
                                const std::string& path, std::span<const ConstLayerRef> params) {
  wait_checkpoint(c);  // the previous asynchronous save first (and its error)
  save_bound(ex, c, path,
             bind_readable(ex.layout(), params, c.all,
                           std::string(ex.kind()) + "::save_checkpoint"));
}

void AgentCore::save_bound(RebirthExecutor& ex, const CheckpointComms& c, const std::string& path,
                           const BoundLayers<ConstLayerRef>& ordered) {
  // Only the writer of each agent (a GroupAgent's leader: its policy is the agent's) records
  // the agent; the other ranks of a group hold the same replica.
  const bool writer = c.writers != MPI_COMM_NULL;
  AgentRecord mine;
  std::vector<std::vector<std::byte>> copies;  // host copies of device layers, for the write
  std::string error;
  if (writer) {
    const RosterEntry own = ex.own_roster();
    AgentSnapshot s;
    s.policy = policy_.state();
    s.stats = stats_.counters();
    const std::span<const std::uint64_t> words = std::as_const(hyper_).words();
    s.hyper.assign(words.begin(), words.end());
    s.status = own.status;
    s.status.state = advertised_;
    s.version = ex.version();
    s.steps_since_publish = steps_since_publish_;
    s.publish_pending = publish_pending_;
    s.paused = paused_;
    s.resume_state = resume_state_;
    mine = AgentRecord{.ordered = ordered,
                       .state = encode_agent_state(s),
                       .extras = {},
                       .metric = own.status.metric,
                       .generation = policy_.generation(),
                       .steps = policy_.steps(),
                       .age = policy_.age(),
                       .iteration = own.status.iteration};
    try {
      if (hooks_.save) mine.extras = hooks_.save();
    } catch (const std::exception& e) {
      error = std::string("paramwin: save_checkpoint: the checkpoint hook failed: ") + e.what();
    }
    // After the hook, which may bring the layers up to date (a TorchAgent's stage_in).
    try {
      if (error.empty()) mine.ordered = on_host(ordered, copies);
    } catch (const std::exception& e) {
      error = std::string("paramwin: save_checkpoint: copying the device layers: ") + e.what();
    }
  }
  agree_or_throw<CheckpointError>(c.all, error);
  if (policy_.options().checkpoint.async) {
    // The pause is the copy; the write, the rename and the rotation run on the writer thread
    // (one per writing rank, over its own duplicate of the writers' communicator).
    if (writer) {
      if (!async_) async_ = std::make_unique<AsyncCheckpoint>(c.writers);
      try {
        async_->stage(path, ex.layout(), mine, save_settings(policy_.options()));
      } catch (const std::exception& e) {
        error = std::string("paramwin: save_checkpoint '") + path + "': " + e.what();
      }
    }
    agree_or_throw<CheckpointError>(c.all, error);
    if (writer) async_->launch();
    last_checkpoint_ = Clock::now();
    return;
  }
  if (writer) {
    try {
      write_checkpoint(c.writers, path, ex.layout(), mine, save_settings(policy_.options()));
    } catch (const std::exception& e) {
      error = e.what();  // the same on every writer (write_checkpoint agrees)
    }
  }
  agree_or_throw<CheckpointError>(c.all, error);
  last_checkpoint_ = Clock::now();
  if (writer && rank_of(c.writers) == 0)
    error =
        rotate_checkpoints(policy_.options().checkpoint.path, policy_.options().checkpoint.keep);
  agree_or_throw<CheckpointError>(c.all, error.empty() ? error
                                                       : "paramwin: checkpoint '" + path +
                                                             "' saved, but " + error);
}

void AgentCore::wait_checkpoint(const CheckpointComms& c) {
  const std::string error = async_ ? async_->wait() : std::string();
  agree_or_throw<CheckpointError>(c.all, error);
}

namespace {

// The writer's part of a load, on copies: reads its agent's share of @p path, validates it
// (@p hyper_words: the layout's hyperparameter words) and decides the agent's @p policy
// (restored, or reborn with its own streams); the other ranks of a group (c.agent) receive
// that share with the decided state and apply the same. Returns this rank's error, "" none.
std::string read_share(const CheckpointComms& c, const std::string& path, const Layout& layout,
                       std::size_t hyper_words, CheckpointRead& read, AgentSnapshot& s,
                       Policy& policy) {
  std::string error;
  const bool writer = c.writers != MPI_COMM_NULL;
  if (writer) {
    try {
      read = read_checkpoint(c.writers, path, layout);
      s = decode_agent_state(read.state);
      if (s.hyper.size() != hyper_words) {
        throw CheckpointError(
            "paramwin: checkpoint '" + path + "': agent " + std::to_string(read.source) +
            " holds " + std::to_string(s.hyper.size()) +
            " hyperparameter words, the layout declares " + std::to_string(hyper_words));
      }
      if (read.reborn) {
        policy.reborn();
      } else {
        try {
          policy.restore(s.policy);
        } catch (const InvalidArgument& e) {
          throw CheckpointError("paramwin: checkpoint '" + path + "': agent " +
                                std::to_string(read.source) + ": " + e.what());
        }
      }
      if (c.agent != MPI_COMM_NULL) {
        s.policy = policy.state();  // what the agent's other ranks restore
        read.state = encode_agent_state(s);
      }
    } catch (const std::exception& e) {
      error = e.what();  // read_checkpoint's is the same on every writer
    }
  }
  if (c.agent != MPI_COMM_NULL) {
    int ok = error.empty() ? 1 : 0;  // the writer's verdict
    check_mpi(MPI_Bcast(&ok, 1, MPI_INT, 0, c.agent), "MPI_Bcast(checkpoint verdict)");
    if (ok != 0) {
      share_read(read, layout, c.agent);
      if (!writer) {
        try {
          s = decode_agent_state(read.state);
          policy.restore(s.policy);
        } catch (const std::exception& e) {
          error =
              "paramwin: checkpoint '" + path + "': the state shared by the leader: " + e.what();
        }
      }
    }
  }
  return error;
}

}  // namespace

CheckpointLoad AgentCore::load_checkpoint(RebirthExecutor& ex, const CheckpointComms& c,
                                          const std::string& path,
                                          std::span<const LayerRef> params) {
  wait_checkpoint(c);  // HDF5 is used by one thread at a time; the newest save completes
  const BoundLayers<LayerRef> ordered =
      bind_readable(ex.layout(), params, c.all, std::string(ex.kind()) + "::load_checkpoint");
  std::string error;

  // Everything that could still fail, on copies: the live agent changes only after every
  // rank succeeded.
  CheckpointRead read;
  AgentSnapshot s;
  Policy policy = policy_;
  error = read_share(c, path, ex.layout(), hyper_.words().size(), read, s, policy);
  agree_or_throw<CheckpointError>(c.all, error);

  // A layer left partly written is reported on every rank below.
  error = write_layers(ordered, read.layers, ex.layout());
  policy_ = std::move(policy);
  counters_ = AgentCounters{.steps = policy_.steps(),
                            .age = policy_.age(),
                            .max_age = policy_.max_age(),
                            .generation = policy_.generation()};
  std::copy(s.hyper.begin(), s.hyper.end(), hyper_.words().begin());
  if (!read.reborn) {
    stats_.restore_counters(s.stats);
    steps_since_publish_ = s.steps_since_publish;
    publish_pending_ = s.publish_pending;
    paused_ = s.paused;
    resume_state_ = s.resume_state;
  }
  if (hooks_.load && error.empty()) {
    try {
      hooks_.load(read.extras, read.reborn);
    } catch (const std::exception& e) {
      error = std::string("paramwin: load_checkpoint: the checkpoint hook failed: ") + e.what();
    }
  }
  republish_loaded(ex, read.reborn, s, ordered);
  last_checkpoint_ = Clock::now();
  agree_or_throw<CheckpointError>(c.all, error);
  // Nobody steps before every agent republished (agree_or_throw's reduction orders it).
  return CheckpointLoad{.path = path,
                        .agents = read.agents,
                        .source = read.source,
                        .reborn = read.reborn,
                        .steps = policy_.steps()};
}

void AgentCore::republish_loaded(RebirthExecutor& ex, bool reborn, const AgentSnapshot& s,
                                 const BoundLayers<LayerRef>& ordered) {
  // Others find this agent as a donor with the saved version number (a group: the saved
  // publish stamp), as in the run that saved.
  if (!reborn) ex.continue_versions(s.version);
  bool out = false;  // the loaded parameters are published
  if (reborn || s.version > 0) {
    const BoundLayers<ConstLayerRef> refs = ordered.as_const();
    ex.advance_stamp();
    const PublishResult r = ex.publish(refs, hyper_);
    out = r.published;
    if (r.published) last_publish_ = Clock::now();
    // A group rank whose slot was pinned still advertises the older publish: the next
    // step publishes again, on every rank of the agent (its agreement sees this).
    if (!r.published) publish_pending_ = true;
  }
  AgentStatus status = s.status;
  if (reborn) {
    status.age = policy_.age();
    status.generation = policy_.generation();
    status.state = AgentState::active;
  }
  // Saved between a deferred rebirth and its publish (publish.defer_rebirth): the
  // parameters are out now, or mid-rebirth until the next step publishes them.
  rebirth_unpublished_ = status.state == AgentState::rebirth && !out;
  if (status.state == AgentState::rebirth && out) status.state = AgentState::active;
  advertised_ = status.state;
  ex.set_status(status);
}

std::optional<CheckpointLoad> AgentCore::resume_newest(RebirthExecutor& ex,
                                                       const CheckpointComms& c,
                                                       std::span<const LayerRef> params) {
  wait_checkpoint(c);  // an asynchronous save in flight may be the newest checkpoint
  // Rank 0 looks, every rank loads the same file.
  std::string path =
      rank_of(c.all) == 0 ? newest_checkpoint(policy_.options().checkpoint.path) : "";
  unsigned long long len = path.size();
  check_mpi(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, c.all), "MPI_Bcast(checkpoint path)");
  path.resize(len);
  check_mpi(MPI_Bcast(path.data(), static_cast<int>(len), MPI_CHAR, 0, c.all),
            "MPI_Bcast(checkpoint path)");
  if (path.empty()) return std::nullopt;
  return load_checkpoint(ex, c, path, params);
}

void AgentCore::checkpoint_if_due(RebirthExecutor& ex, const CheckpointComms& c,
                                  const BoundLayers<LayerRef>& ordered) {
  const CheckpointOptions& o = policy_.options().checkpoint;
  if (o.every == 0 && o.every_seconds == 0.0) return;
  // counters_: on a group's other ranks, the leader's step count as shared with the step.
  const std::int64_t steps = counters_.steps;
  bool due = o.every > 0 && steps % o.every == 0;
  if (!due && o.every_seconds > 0.0 && steps % kCheckpointSecondsProbe == 0) {
    // The slowest agent's clock decides, so that every agent reaches the same verdict at the
    // same step count.
    double elapsed = seconds_since(last_checkpoint_);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, c.all),
              "MPI_Allreduce(checkpoint clock)");
    due = elapsed >= o.every_seconds;
  }
  if (!due) return;
  // The step bound the parameters: the save checks only that it can read them.
  wait_checkpoint(c);  // the previous asynchronous save first (and its error)
  const BoundLayers<ConstLayerRef> refs = ordered.as_const();
  const std::string caller = "step (checkpoint)";
  std::string error;
  try {
    check_readable(refs, ex.layout(), caller);
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw<InvalidArgument>(c.all, error);
  save_bound(ex, c, checkpoint_path(o.path, steps), refs);
}

}  // namespace paramwin::detail
