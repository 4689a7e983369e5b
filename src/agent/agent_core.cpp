// AgentCore: one training step of an agent — decide, select, pull, mix, publish, record.
#include <optional>
#include <string>

#include "paramwin/detail/agent_core.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double staleness_of(const std::vector<RosterEntry>& rosters, int rank, double now) {
  for (const RosterEntry& e : rosters) {
    if (e.rank == rank) return staleness_seconds(e, now);
  }
  return 0.0;
}

template <class Ref>
void check_refs(const Layout& layout, std::span<const Ref> params, std::string_view caller) {
  const std::string where = "paramwin: " + std::string(caller) + ": ";
  if (params.size() != layout.size()) {
    throw InvalidArgument(where + "got " + std::to_string(params.size()) +
                          " layers, the layout has " + std::to_string(layout.size()));
  }
  std::size_t named = 0;
  for (const Ref& r : params) named += r.name().empty() ? 0U : 1U;
  if (named != 0 && named != params.size()) {
    throw InvalidArgument(where + "either name every layer or none (" + std::to_string(named) +
                          " of " + std::to_string(params.size()) + " named)");
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const LayerSpec& spec = named != 0 ? layout[layout.index_of(params[i].name())] : layout[i];
    if (params[i].count() != spec.count) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects " +
                            std::to_string(spec.count) + " elements, got " +
                            std::to_string(params[i].count()));
    }
    if (params[i].dtype() != spec.dtype) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects dtype " +
                            std::string(dtype_name(spec.dtype)) + ", got " +
                            std::string(dtype_name(params[i].dtype())));
    }
  }
}

}  // namespace

void check_step_params(const Layout& layout, std::span<const LayerRef> params,
                       std::string_view caller) {
  check_refs(layout, params, caller);
}

void check_step_params(const Layout& layout, std::span<const ConstLayerRef> params,
                       std::string_view caller) {
  check_refs(layout, params, caller);
}

AgentCore::AgentCore(AgentOptions options, int rank, int population)
    : policy_(std::move(options), rank, population) {
  if (!policy_.options().event_log.empty()) {
    log_ = EventLog(expand_rank(policy_.options().event_log, rank));
  }
}

AgentCore AgentCore::create_collective(MPI_Comm comm, AgentOptions options) {
  int rank = 0;
  int size = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    throw InvalidArgument("paramwin: Agent: invalid communicator");
  }
  std::optional<AgentCore> core;
  std::string error;
  try {
    core.emplace(std::move(options), rank, size);
  } catch (const Error& e) {
    error = e.what();
  }
  // Every rank learns whether any rank failed, so that none goes on into the collective
  // window creation alone.
  int ok = error.empty() ? 1 : 0;
  int all_ok = 0;
  if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) {
    throw InvalidArgument("paramwin: Agent: MPI_Allreduce over the communicator failed");
  }
  if (all_ok == 0) {
    throw InvalidArgument(!error.empty() ? error
                                         : "paramwin: Agent: options are invalid on another rank "
                                           "of the communicator (see that rank's error)");
  }
  return std::move(*core);
}

std::uint64_t AgentCore::fingerprint(WindowAccess& w) {
  if (!have_fingerprint_) {
    fingerprint_ = w.roster(w.rank()).fingerprint;
    have_fingerprint_ = true;
  }
  return fingerprint_;
}

void AgentCore::set_status(WindowAccess& w, AgentState state, std::int64_t iteration,
                           double metric) {
  w.set_status(AgentStatus{.iteration = iteration,
                           .age = policy_.age(),
                           .metric = metric,
                           .generation = policy_.generation(),
                           .state = state});
}

std::string expand_rank(std::string path, int rank) {
  const std::string token = "{rank}";
  for (std::size_t at = path.find(token); at != std::string::npos; at = path.find(token, at)) {
    path.replace(at, token.size(), std::to_string(rank));
  }
  return path;
}

bool publish_due(const PublishOptions& p, std::int64_t steps_since_publish,
                 std::chrono::steady_clock::duration since_last_publish) {
  if (p.every > 0 && steps_since_publish >= p.every) {
    return true;
  }
  return p.interval_ms > 0.0 &&
         std::chrono::duration<double, std::milli>(since_last_publish).count() >= p.interval_ms;
}

bool AgentCore::publish_due(Clock::time_point now) const {
  return detail::publish_due(policy_.options().publish, steps_since_publish_, now - last_publish_);
}

void AgentCore::do_publish(WindowAccess& w, std::span<const LayerRef> params, StepEvent& event) {
  const auto t = Clock::now();
  const_refs_.clear();
  for (const LayerRef& r : params) {
    const_refs_.push_back(r.as_const());
  }
  const PublishResult r = w.publish(const_refs_);
  event.seconds.publish = seconds_since(t);
  if (r.published) {
    event.published = true;
    publish_pending_ = false;
    steps_since_publish_ = 0;
    last_publish_ = Clock::now();
  } else {
    // A reader pinned the slot: never wait for it, try again next step.
    event.publish_skipped = true;
    publish_pending_ = true;
  }
}

PublishResult AgentCore::publish(WindowAccess& w, std::span<const ConstLayerRef> params) {
  PublishResult r = w.publish(params);
  if (r.published) {
    publish_pending_ = false;
    steps_since_publish_ = 0;
    last_publish_ = Clock::now();
  }
  return r;
}

void AgentCore::leave(WindowAccess& w) {
  const RosterEntry own = w.roster(w.rank());
  set_status(w, AgentState::left, own.status.iteration, own.status.metric);
  left_ = true;
}

AgentCore::Rebirth AgentCore::rebirth(WindowAccess& w, std::span<const LayerRef> params,
                                      StepEvent& event) {
  const AgentOptions& o = policy_.options();
  const auto t_decide = Clock::now();
  std::string note;

  if (o.mixing.kind == MixingKind::reset) {
    set_status(w, AgentState::rebirth, event.iteration, event.metric);
    event.seconds.decide += seconds_since(t_decide);
    const auto t_mix = Clock::now();
    o.reset(params, policy_.next_reset_seed());
    event.seconds.mix += seconds_since(t_mix);
    return {true, note};
  }

  const std::uint64_t fp = fingerprint(w);
  std::vector<int> exclude;
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const auto t_select = Clock::now();
    // Select first, then advertise the rebirth: of two agents dying at once, at most one can
    // see the other mid-rebirth, so they never both wait for each other.
    const std::vector<RosterEntry> rosters = w.roster_all();
    const double now = MPI_Wtime();
    const DonorChoice choice = policy_.select_donors(rosters, fp, exclude, now);
    if (choice.ranks.empty()) {
      event.seconds.decide += seconds_since(t_select);
      note += (note.empty() ? "" : "; ") + choice.shortfall;
      return {false, note};
    }
    if (!choice.shortfall.empty()) {
      note += (note.empty() ? "clamped: " : "; clamped: ") + choice.shortfall;
    }
    set_status(w, AgentState::rebirth, event.iteration, event.metric);
    event.seconds.decide += seconds_since(t_select);

    const auto t_weights = Clock::now();
    std::vector<int> donors = choice.ranks;  // best first
    PullOptions pull;
    pull.momentum = o.mixing.momentum;
    pull.non_finite = o.mixing.non_finite;
    if (o.mixing.kind == MixingKind::best) {
      donors.resize(1);
    } else if (o.mixing.kind == MixingKind::weighted) {
      pull.reduction = Reduction::weighted;
      pull.weights = policy_.mixing_weights(choice.metrics);
    }
    event.seconds.mix += seconds_since(t_weights);

    const auto t_pull = Clock::now();
    try {
      const PullResult r = w.pull(donors, params, pull);
      event.seconds.pull += seconds_since(t_pull);
      event.donors.clear();
      for (const DonorRead& d : r.donors) {
        event.donors.push_back(DonorRecord{.rank = d.rank,
                                           .version = d.version,
                                           .metric = d.metric,
                                           .weight = d.weight,
                                           .bytes = d.bytes,
                                           .transport = d.transport,
                                           .skipped = d.skipped,
                                           .staleness_seconds = staleness_of(rosters, d.rank, now)});
      }
      event.bytes += r.bytes;
      return {true, note};
    } catch (const DonorError& e) {
      // Transactional pull: params are unchanged. Leave that donor out and choose again.
      event.seconds.pull += seconds_since(t_pull);
      set_status(w, AgentState::active, event.iteration, event.metric);
      note += (note.empty() ? "" : "; ") + std::string(e.what());
      if (e.rank() < 0 || std::find(exclude.begin(), exclude.end(), e.rank()) != exclude.end()) {
        break;
      }
      exclude.push_back(e.rank());
    }
  }
  return {false, note};
}

StepEvent AgentCore::step(WindowAccess& w, std::int64_t iteration, double metric,
                          std::span<const LayerRef> params) {
  if (left_) {
    // A step would advertise the agent as active again behind the others' backs.
    throw InvalidArgument("paramwin: Agent " + std::to_string(policy_.rank()) +
                          ": step() after leave(): the agent has left the population");
  }
  check_step_params(w.layout(), params, "Agent::step");
  const auto t0 = Clock::now();
  StepEvent event;
  event.rank = policy_.rank();
  event.iteration = iteration;
  event.metric = metric;
  event.mixing = policy_.options().mixing.kind;
  ++steps_since_publish_;

  const std::uint64_t fp = fingerprint(w);
  const DeathReason reason =
      policy_.decide(iteration, metric, [&w] { return w.roster_all(); }, fp);
  event.step = policy_.steps();
  event.age = policy_.age();
  event.max_age = policy_.max_age();
  event.reason = reason;
  event.seconds.decide = seconds_since(t0);

  if (reason == DeathReason::none) {
    set_status(w, AgentState::active, iteration, metric);
  } else {
    try {
      const Rebirth r = rebirth(w, params, event);
      event.note = r.note;
      if (r.done) {
        event.died = true;
        policy_.reborn();
        event.generation = policy_.generation();
        event.next_max_age = policy_.max_age();
        // From here the caller's parameters hold the mix: whatever happens next (a throwing
        // rebirth callback included), they must be published by this or the next step.
        publish_pending_ = true;
        const auto t_mix = Clock::now();
        if (policy_.options().on_rebirth) {
          policy_.options().on_rebirth(event, params);
        }
        event.seconds.mix += seconds_since(t_mix);
      } else {
        event.deferred = true;
      }
      // The reborn agent keeps reporting its last metric until the next step measures one.
      set_status(w, AgentState::active, iteration, metric);
    } catch (...) {
      // Never stay advertised as mid-rebirth after an error (others would skip us forever).
      set_status(w, AgentState::active, iteration, metric);
      throw;
    }
  }

  if (event.died || publish_pending_ || publish_due(Clock::now())) {
    do_publish(w, params, event);
  }
  event.generation = policy_.generation();
  event.next_max_age = policy_.max_age();
  event.version = w.version();
  stats_.record(event);
  log_.write(event);
  return event;
}

}  // namespace paramwin::detail
