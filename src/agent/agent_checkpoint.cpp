// AgentCore's checkpoints: what an agent saves of itself (AgentSnapshot + parameters + the
// owner's blobs), how a load validates everything on every rank before changing anything,
// and when step() saves by itself (AgentOptions::checkpoint).
#include <cstring>
#include <optional>
#include <string>

#include "agent/rebirth_executor.hpp"  // const_refs
#include "checkpoint/agent_state.hpp"
#include "checkpoint/async_save.hpp"
#include "checkpoint/file.hpp"
#include "checkpoint/path.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/detail/agent_core.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

std::vector<ConstLayerRef> bound_const(const Layout& layout, std::span<const ConstLayerRef> params,
                                       MPI_Comm comm, const char* caller) {
  std::vector<ConstLayerRef> ordered;
  std::string error;
  try {
    ordered = bind_step_params(layout, params, caller);
    for (const ConstLayerRef& r : ordered) {
      if (!r.host_accessible()) {
        throw InvalidArgument(std::string("paramwin: ") + caller + ": layer '" +
                              std::string(r.name()) +
                              "' is not host-accessible (checkpoints read and write the "
                              "parameters on the host)");
      }
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw<InvalidArgument>(comm, error);
  return ordered;
}

}  // namespace

void AgentCore::save_checkpoint(WindowAccess& w, const std::string& path,
                                std::span<const ConstLayerRef> params) {
  const MPI_Comm comm = w.comm();
  wait_checkpoint(w);  // the previous asynchronous save first (and its error)
  const std::vector<ConstLayerRef> ordered =
      bound_const(w.layout(), params, comm, "Agent::save_checkpoint");
  const RosterEntry own = w.roster(w.rank());
  AgentSnapshot s;
  s.policy = policy_.state();
  s.stats = stats_.counters();
  const std::span<const std::uint64_t> words = std::as_const(hyper_).words();
  s.hyper.assign(words.begin(), words.end());
  s.status = own.status;
  s.status.state = advertised_;
  s.version = w.version();
  s.steps_since_publish = steps_since_publish_;
  s.publish_pending = publish_pending_;
  s.paused = paused_;
  s.resume_state = resume_state_;

  AgentRecord mine{.ordered = ordered,
                   .state = encode_agent_state(s),
                   .extras = {},
                   .metric = own.status.metric,
                   .generation = policy_.generation(),
                   .steps = policy_.steps(),
                   .age = policy_.age(),
                   .iteration = own.status.iteration};
  std::string error;
  try {
    if (hooks_.save) mine.extras = hooks_.save();
  } catch (const std::exception& e) {
    error = std::string("paramwin: save_checkpoint: the checkpoint hook failed: ") + e.what();
  }
  agree_or_throw<CheckpointError>(comm, error);
  if (policy_.options().checkpoint.async) {
    // The pause is the copy; the write, the rename and the rotation run on the writer.
    if (!async_) async_.reset(new AsyncCheckpoint(comm));
    try {
      async_->stage(path, w.layout(), mine, policy_.options());
    } catch (const std::exception& e) {
      error = std::string("paramwin: save_checkpoint '") + path + "': " + e.what();
    }
    agree_or_throw<CheckpointError>(comm, error);
    async_->launch();
    last_checkpoint_ = Clock::now();
    return;
  }
  write_checkpoint(comm, path, w.layout(), mine, policy_.options());
  last_checkpoint_ = Clock::now();
  if (w.rank() == 0)
    error =
        rotate_checkpoints(policy_.options().checkpoint.path, policy_.options().checkpoint.keep);
  agree_or_throw<CheckpointError>(comm, error.empty() ? error
                                                      : "paramwin: checkpoint '" + path +
                                                            "' saved, but " + error);
}

void AgentCore::wait_checkpoint(WindowAccess& w) {
  const std::string error = async_ ? async_->wait() : std::string();
  agree_or_throw<CheckpointError>(w.comm(), error);
}

CheckpointLoad AgentCore::load_checkpoint(WindowAccess& w, const std::string& path,
                                          std::span<const LayerRef> params) {
  const MPI_Comm comm = w.comm();
  wait_checkpoint(w);  // HDF5 is used by one thread at a time; the newest save completes
  std::vector<LayerRef> ordered;
  std::string error;
  try {
    ordered = bind_step_params(w.layout(), params, "Agent::load_checkpoint");
    for (const LayerRef& r : ordered) {
      if (!r.host_accessible()) {
        throw InvalidArgument("paramwin: Agent::load_checkpoint: layer '" + std::string(r.name()) +
                              "' is not host-accessible");
      }
    }
  } catch (const Error& e) {
    error = e.what();
  }
  agree_or_throw<InvalidArgument>(comm, error);

  CheckpointRead read = read_checkpoint(comm, path, w.layout());
  // Everything that could still fail, on a copy: the live agent changes only after every
  // rank succeeded.
  AgentSnapshot s;
  Policy policy = policy_;
  try {
    s = decode_agent_state(read.state);
    if (s.hyper.size() != hyper_.words().size()) {
      throw CheckpointError(
          "paramwin: checkpoint '" + path + "': agent " + std::to_string(read.source) + " holds " +
          std::to_string(s.hyper.size()) + " hyperparameter words, the layout declares " +
          std::to_string(hyper_.words().size()));
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
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw<CheckpointError>(comm, error);

  for (std::size_t l = 0; l < ordered.size(); ++l) {
    if (!read.layers[l].empty())
      std::memcpy(ordered[l].data(), read.layers[l].data(), read.layers[l].size());
  }
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
  if (hooks_.load) {
    try {
      hooks_.load(read.extras, read.reborn);
    } catch (const std::exception& e) {
      error = std::string("paramwin: load_checkpoint: the checkpoint hook failed: ") + e.what();
    }
  }
  // Others find this agent as a donor with the saved version number, as in the run that saved.
  if (!read.reborn) w.continue_versions(s.version);
  if (read.reborn || s.version > 0) {
    const std::vector<ConstLayerRef> refs = const_refs(ordered);
    const PublishResult r = w.publish(refs, hyper_);
    if (r.published) last_publish_ = Clock::now();
  }
  AgentStatus status = s.status;
  if (read.reborn) {
    status.age = policy_.age();
    status.generation = policy_.generation();
    status.state = AgentState::active;
  }
  advertised_ = status.state;
  w.set_status(status);
  last_checkpoint_ = Clock::now();
  agree_or_throw<CheckpointError>(comm, error);
  // Nobody steps before every agent republished (agree_or_throw's reduction orders it).
  return CheckpointLoad{.path = path,
                        .agents = read.agents,
                        .source = read.source,
                        .reborn = read.reborn,
                        .steps = policy_.steps()};
}

std::optional<CheckpointLoad> AgentCore::resume_newest(WindowAccess& w,
                                                       std::span<const LayerRef> params) {
  const MPI_Comm comm = w.comm();
  wait_checkpoint(w);  // an asynchronous save in flight may be the newest checkpoint
  // Rank 0 looks, every rank loads the same file.
  std::string path = w.rank() == 0 ? newest_checkpoint(policy_.options().checkpoint.path) : "";
  unsigned long long len = path.size();
  check_mpi(MPI_Bcast(&len, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "MPI_Bcast(checkpoint path)");
  path.resize(len);
  check_mpi(MPI_Bcast(path.data(), static_cast<int>(len), MPI_CHAR, 0, comm),
            "MPI_Bcast(checkpoint path)");
  if (path.empty()) return std::nullopt;
  return load_checkpoint(w, path, params);
}

void AgentCore::checkpoint_if_due(WindowAccess& w, std::span<const LayerRef> params) {
  const CheckpointOptions& c = policy_.options().checkpoint;
  if (c.every == 0 && c.every_seconds == 0.0) return;
  const std::int64_t steps = policy_.steps();
  bool due = c.every > 0 && steps % c.every == 0;
  if (!due && c.every_seconds > 0.0 && steps % kCheckpointSecondsProbe == 0) {
    // The slowest agent's clock decides, so that every agent reaches the same verdict at the
    // same step count.
    double elapsed = seconds_since(last_checkpoint_);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, w.comm()),
              "MPI_Allreduce(checkpoint clock)");
    due = elapsed >= c.every_seconds;
  }
  if (!due) return;
  const std::vector<ConstLayerRef> refs = const_refs(params);
  save_checkpoint(w, checkpoint_path(c.path, steps), refs);
}

}  // namespace paramwin::detail
