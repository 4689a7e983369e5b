// AgentCore: the one step sequence of every agent — agree, plan, attempt / exclude loop,
// rebirth, callbacks, publish, record — over a RebirthExecutor (solo or shard).
#include <algorithm>
#include <bit>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "agent/agent_core.hpp"
#include "agent/rebirth_executor.hpp"
#include "decision/rebirth_plan.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

using Clock = StepClock;

// A failing pull attempt excludes its donor and plans again, at most this many times.
constexpr int kAttempts = 3;

AgentCounters counters_of(const Policy& p) {
  return AgentCounters{.steps = p.steps(),
                       .age = p.age(),
                       .max_age = p.max_age(),
                       .generation = p.generation()};
}

}  // namespace

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

AgentCore::AgentCore(AgentOptions options, int rank, int population, const Layout& layout,
                     bool writes_log)
    : policy_(std::move(options), rank, population),
      counters_(counters_of(policy_)),
      hyper_(layout.make_hyperparameters()) {
  validate(policy_.options().explore, layout);
  if (policy_.options().checkpoint.async) {
    int level = MPI_THREAD_SINGLE;
    if (MPI_Query_thread(&level) != MPI_SUCCESS || level != MPI_THREAD_MULTIPLE) {
      throw InvalidArgument(
          "paramwin: AgentOptions: checkpoint.async needs MPI_Init_thread with "
          "MPI_THREAD_MULTIPLE (the writer thread calls MPI beside the trainer); this process "
          "has thread level " +
          std::to_string(level));
    }
  }
  // every = 0 with interval_ms = 0: only explicit publish() calls (and rebirths) publish,
  // not even the first step.
  const PublishOptions& p = policy_.options().publish;
  publish_pending_ = p.every > 0 || p.interval_ms > 0.0;
  if (writes_log && !policy_.options().event_log.empty()) {
    log_ = EventLog(expand_rank(policy_.options().event_log, rank));
  }
}

AgentCore AgentCore::create_collective(MPI_Comm comm, AgentOptions options, const Layout& layout) {
  int rank = 0;
  int size = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    throw InvalidArgument("paramwin: Agent: invalid communicator");
  }
  std::optional<AgentCore> core;
  std::string error;
  try {
    core.emplace(std::move(options), rank, size, layout);
  } catch (const Error& e) {
    error = e.what();
  }
  // Every rank learns whether any rank failed, so that none goes on into the collective
  // window creation alone.
  agree_or_throw<InvalidArgument>(comm, error);
  check_same_checkpoint_options(comm, core->policy().options().checkpoint);
  check_same_sync_options(comm, core->policy().options());
  return std::move(*core);
}

void check_same_sync_options(MPI_Comm comm, const AgentOptions& o) {
  // Synchronous PBT is collective at every interval, and every agent marks the same worst
  // agents: the cadence, the fraction and the direction must agree (asynchronous agents
  // contribute 0 and need not).
  const WorstFractionTrigger& w = o.triggers.worst_fraction;
  std::uint64_t h = 0;
  if (w.synchronous) {
    h = static_cast<std::uint64_t>(w.every) * 0x9e3779b97f4a7c15ULL + 1;
    h ^= std::bit_cast<std::uint64_t>(w.fraction) + (h << 6U) + (h >> 2U);
    h ^= static_cast<std::uint64_t>(o.direction) + (h << 6U) + (h >> 2U);
  }
  if (!same_on_all_ranks(comm, h)) {
    throw InvalidArgument("paramwin: AgentOptions: triggers.worst_fraction.synchronous, every, "
                          "fraction or direction differ across ranks; synchronous PBT needs the "
                          "same on every agent");
  }
}

void check_same_checkpoint_options(MPI_Comm comm, const CheckpointOptions& c) {
  // Checkpoints are collective: every agent must save at the same steps into the same files.
  std::uint64_t h = static_cast<std::uint64_t>(c.every) * 0x9e3779b97f4a7c15ULL;
  h ^= std::bit_cast<std::uint64_t>(c.every_seconds) + (h << 6U) + (h >> 2U);
  h ^= static_cast<std::uint64_t>(c.keep) + (h << 6U) + (h >> 2U);
  h ^= std::hash<std::string>{}(c.path) + (h << 6U) + (h >> 2U);
  h ^= static_cast<std::uint64_t>(c.async ? 1 : 0) + (h << 6U) + (h >> 2U);
  if (!same_on_all_ranks(comm, h)) {
    throw InvalidArgument("paramwin: AgentOptions: checkpoint options (every, every_seconds, "
                          "path, keep, async) differ across ranks; every agent must have the same");
  }
}

void AgentCore::set_status(RebirthExecutor& ex, AgentState state, std::int64_t iteration,
                           double metric) {
  advertised_ = state;
  ex.set_status(AgentStatus{.iteration = iteration,
                            .age = counters_.age,
                            .metric = metric,
                            .generation = counters_.generation,
                            .state = state});
}

void AgentCore::set_hyperparameters(const Hyperparameters& values) {
  const std::span<const HyperSpec> mine = hyper_.specs();
  const std::span<const HyperSpec> theirs = values.specs();
  if (!std::equal(mine.begin(), mine.end(), theirs.begin(), theirs.end())) {
    throw InvalidArgument("paramwin: set_hyperparameters: the values declare " +
                          std::to_string(theirs.size()) +
                          " hyperparameters that are not the layout's " +
                          std::to_string(mine.size()) + " (use hyperparameters() as a template)");
  }
  hyper_ = values;
}

void AgentCore::published(RebirthExecutor& ex, const PublishResult& r) {
  // A reader pinned the slot: never wait for it, the next step tries again.
  publish_pending_ = !r.published;
  if (!r.published) return;
  steps_since_publish_ = 0;
  last_publish_ = Clock::now();
  if (rebirth_unpublished_) {
    // A deferred rebirth's parameters are out: a donor again (mid-rebirth until now).
    rebirth_unpublished_ = false;
    if (!left_) {
      const RosterEntry own = ex.own_roster();
      set_status(ex, resting_state(), own.status.iteration, own.status.metric);
    }
  }
}

void AgentCore::prepare_params(double& seconds) {
  if (params_prepared_) return;
  params_prepared_ = true;
  if (!policy_.options().prepare_params) return;
  const auto t = Clock::now();
  policy_.options().prepare_params();
  seconds += seconds_since(t);
}

PublishResult AgentCore::publish(RebirthExecutor& ex, std::span<const ConstLayerRef> params) {
  const std::string caller = std::string(ex.kind()) + "::publish";
  const BoundLayers<ConstLayerRef> ordered = paramwin::bind(ex.layout(), params, caller);
  params_prepared_ = false;
  double unused = 0.0;
  prepare_params(unused);
  ex.advance_stamp();
  PublishResult r = ex.publish(ordered, hyper_);
  published(ex, r);
  return r;
}

void AgentCore::leave(RebirthExecutor& ex) {
  const RosterEntry own = ex.own_roster();
  set_status(ex, AgentState::left, own.status.iteration, own.status.metric);
  left_ = true;
  paused_ = false;
}

void AgentCore::pause(RebirthExecutor& ex) {
  if (left_) {
    throw InvalidArgument("paramwin: " + std::string(ex.kind()) + " " +
                          std::to_string(ex.agent_id()) +
                          ": pause() after leave(): the agent has left the population");
  }
  if (paused_) return;
  const RosterEntry own = ex.own_roster();
  // resume() goes back to what the roster said: active, or fresh before the first step.
  resume_state_ = own.status.state == AgentState::fresh ? AgentState::fresh : AgentState::active;
  set_status(ex, AgentState::paused, own.status.iteration, own.status.metric);
  paused_ = true;
}

void AgentCore::resume(RebirthExecutor& ex) {
  if (!paused_ || left_) return;
  const RosterEntry own = ex.own_roster();
  paused_ = false;
  // A rebirth whose parameters are not out yet stays mid-rebirth until its publish.
  set_status(ex, rebirth_unpublished_ ? AgentState::rebirth : resume_state_, own.status.iteration,
             own.status.metric);
}

double AgentCore::time_left() const { return deadline_ > 0.0 ? deadline_ - MPI_Wtime() : 0.0; }

double AgentCore::roster_timeout() const {
  const double own = policy_.options().read.roster_timeout_seconds;
  if (deadline_ <= 0.0) return own;
  // Past the step's deadline a roster read still starts, but waits for no one (a remote
  // agent that has not answered at once is left out).
  const double left = std::max(time_left(), 1e-9);
  return own > 0.0 ? std::min(own, left) : left;
}

std::vector<RosterEntry> AgentCore::agreed_ranking(RebirthExecutor& ex, std::int64_t iteration,
                                                   double metric, bool paused) {
  std::vector<RosterEntry> all =
      ex.agree_ranking(AgentStatus{.iteration = iteration,
                                   .age = counters_.age,
                                   .metric = metric,
                                   .generation = counters_.generation,
                                   .state = paused ? AgentState::paused : AgentState::active},
                       hyper_);
  const AgentOptions& o = policy_.options();
  const std::vector<int> worst = worst_ranks(all, ex.agent_id(), metric, ex.fingerprint(),
                                             o.direction, o.triggers.worst_fraction.fraction);
  for (RosterEntry& e : all) {
    if (std::find(worst.begin(), worst.end(), e.rank) != worst.end()) {
      e.status.state = AgentState::rebirth;
    }
  }
  return all;
}

RebirthPlan AgentCore::plan(RebirthExecutor& ex, const StepEvent& event, bool first,
                            std::span<const int> exclude) {
  RebirthPlan plan;
  std::exception_ptr error;
  if (ex.leader() && !first && deadline_ > 0.0 && time_left() <= 0.0) {
    // The step's time to wait for others is spent: the death stays pending (the leader
    // decides, the plan carries it to every rank of the agent).
    plan = RebirthPlan{.action = PlanAction::defer,
                       .counters = counters_,
                       .note = "deadline: read.timeout_seconds " +
                               std::to_string(policy_.options().read.timeout_seconds) +
                               " s spent before another donor could be tried"};
  } else if (ex.leader()) {
    try {
      plan =
          plan_rebirth(policy_,
                       PlanInput{.iteration = event.iteration,
                                 .metric = event.metric,
                                 .fingerprint = ex.fingerprint(),
                                 .first_attempt = first,
                                 // Judged once, on the first; a pause ignores it.
                                 .publish_due = first && !paused_ &&
                                                detail::publish_due(policy_.options().publish,
                                                                    steps_since_publish_,
                                                                    Clock::now() - last_publish_),
                                 .hold_deaths = paused_ && policy_.options().paused_deaths ==
                                                               PausedDeaths::defer,
                                 .exclude = exclude,
                                 .rosters =
                                     [&ex, this] {
                                       // Synchronous PBT: the interval's agreed ranking.
                                       return agreed_ ? *agreed_ : ex.roster_all(roster_timeout());
                                     },
                                 // The agreed rosters carry no publish time: none is stale.
                                 .now = [this] { return agreed_ ? 0.0 : MPI_Wtime(); }});
    } catch (const std::exception& e) {
      error = std::current_exception();
      plan = RebirthPlan{.action = PlanAction::error,
                         .donor_error = dynamic_cast<const DonorError*>(&e) != nullptr};
    }
  }
  return ex.share(std::move(plan), error);
}

// What attempts() and try_pulls() did.
struct AgentCore::Attempts {
  bool reborn = false;       // the agent was reborn (a pull, or the reset callback)
  bool publish_due = false;  // the cadence's verdict, carried by the first plan
  bool partial = false;      // some pull left the parameters partly written
  std::string note{};        // why no rebirth, "clamped: ...", and the like
  PullOutcome pulled{};      // the pull that succeeded (reborn by a pull)
};

// The decision and, on a death, up to kAttempts plans: a failed pull excludes its donor (or,
// blaming none, is retried when the executor says so).
AgentCore::Attempts AgentCore::attempts(RebirthExecutor& ex, std::span<const LayerRef> params,
                                        const BoundLayers<LayerRef>& ordered, StepEvent& event) {
  Attempts a = try_pulls(ex, params, ordered, event);
  if (a.reborn || !a.partial) return a;  // reborn after a partial pull: a later pull succeeded
  // A direct pull failed midway and no later pull rewrote the parameters: never train on
  // them as they are. The reset callback re-initialises them (validate() requires one for
  // Landing::direct; rebirth_landing() picks direct only when there is one): a rebirth by
  // reset, published like any other.
  append_note(a.note, "partial pull: parameters re-initialised by the reset callback");
  set_status(ex, AgentState::rebirth, event.iteration, event.metric);
  a.pulled = PullOutcome{};
  const auto t_mix = Clock::now();
  std::exception_ptr reset_error;
  if (ex.leader()) {
    try {
      if (!policy_.options().reset) {
        throw Error("paramwin: a direct pull left the parameters partly written and there is "
                    "no reset callback to re-initialise them");
      }
      policy_.options().reset(params, policy_.next_reset_seed());
    } catch (...) {
      reset_error = std::current_exception();
    }
  }
  event.seconds.mix += seconds_since(t_mix);
  ex.share_reset(ordered.refs(), reset_error);
  a.reborn = true;
  return a;
}

void AgentCore::reset_by_plan(RebirthExecutor& ex, std::span<const LayerRef> params,
                              const BoundLayers<LayerRef>& ordered, StepEvent& event,
                              std::uint64_t seed) {
  prepare_params(event.seconds.mix);
  const auto t_mix = Clock::now();
  std::exception_ptr reset_error;
  if (ex.leader()) {
    try {
      policy_.options().reset(params, seed);
    } catch (...) {
      reset_error = std::current_exception();
    }
  }
  event.seconds.mix += seconds_since(t_mix);
  const auto t_share = Clock::now();
  ex.share_reset(ordered.refs(), reset_error);
  event.seconds.assemble += seconds_since(t_share);
}

AgentCore::Attempts AgentCore::try_pulls(RebirthExecutor& ex, std::span<const LayerRef> params,
                                         const BoundLayers<LayerRef>& ordered, StepEvent& event) {
  Attempts a;
  std::vector<int> exclude;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const auto t = Clock::now();
    const RebirthPlan plan = this->plan(ex, event, attempt == 0, exclude);
    counters_ = plan.counters;
    if (attempt == 0) {
      a.publish_due = plan.publish_due;
      event.reason = plan.reason;
      event.step = counters_.steps;
      event.age = counters_.age;
      event.max_age = counters_.max_age;
    }
    append_note(a.note, plan.note);
    event.seconds.decide += seconds_since(t);
    if (plan.action == PlanAction::none || plan.action == PlanAction::defer) return a;

    // Chosen first, advertised after: of two agents dying at once, at most one can see the
    // other mid-rebirth, so they never both wait for each other.
    set_status(ex, AgentState::rebirth, event.iteration, event.metric);
    if (plan.action == PlanAction::reset) {
      reset_by_plan(ex, params, ordered, event, plan.reset_seed);
      a.reborn = true;
      return a;
    }
    // A pull with momentum blends with the parameters: their values must be current. A
    // device window's pull writes them in place: the hook orders it after the caller's
    // kernels. Otherwise the pull overwrites them whole and reads nothing of them, so the
    // caller's copies (the LibTorch adapter's module and optimizer state) are not staged
    // for it; after a failed pull the publish below stages them.
    if (policy_.options().mixing.momentum != 0.0 || ex.device_window()) {
      prepare_params(event.seconds.pull);
    }
    PullOptions po = pull_options(plan, policy_.options().mixing, policy_.options().read,
                                  deadline_ > 0.0 ? std::max(time_left(), 1e-9) : 0.0);
    po.landing = rebirth_landing(policy_.options());
    PullOutcome r = ex.pull(plan, po, ordered, event);
    // Written (whole, or partly and about to be reset): the parameters are newer than the
    // caller's copies, which must not be staged over them in this step.
    if (r.ok || r.partial) params_prepared_ = true;
    if (r.ok) {
      a.pulled = std::move(r);
      a.reborn = true;
      return a;
    }
    append_note(a.note, r.why);
    if (r.partial) {
      a.partial = true;
      // With momentum the next pull would blend with the partly written values: reset now.
      if (policy_.options().mixing.momentum != 0.0) {
        set_status(ex, resting_state(), event.iteration, event.metric);
        return a;
      }
    }
    set_status(ex, resting_state(), event.iteration, event.metric);
    if (r.blame < 0 ? !r.retry
                    : std::find(exclude.begin(), exclude.end(), r.blame) != exclude.end()) {
      return a;
    }
    if (r.blame >= 0) exclude.push_back(r.blame);
  }
  return a;
}

void AgentCore::publish_step(RebirthExecutor& ex, const BoundLayers<LayerRef>& ordered,
                             StepEvent& event, bool wait_for_pins) {
  const auto t = Clock::now();
  rebirth_publish_deferred_ = false;  // this is its try
  double prepared = 0.0;              // counted in the publish timer below
  prepare_params(prepared);
  const BoundLayers<ConstLayerRef> refs = ordered.as_const();
  const auto wait = std::chrono::duration<double, std::milli>(
      wait_for_pins ? policy_.options().publish.rebirth_wait_ms : 0.0);
  PublishResult r = ex.publish(refs, hyper_);
  event.publish_attempts = 1;
  // A pin is held by a reader of the older snapshot for the length of one read: after a
  // rebirth, wait for it (bounded) rather than keep the reborn agent out of the donors.
  while (!r.published && Clock::now() - t < wait) {
    ex.progress();
    std::this_thread::yield();
    r = ex.publish(refs, hyper_);
    ++event.publish_attempts;
  }
  event.seconds.publish = seconds_since(t);
  event.published = r.published;
  event.publish_skipped = !r.published;
  published(ex, r);
}

StepEvent AgentCore::step(RebirthExecutor& ex, const CheckpointComms& c, std::int64_t iteration,
                          double metric, std::span<const LayerRef> params) {
  if (left_) {
    // A step would advertise the agent as active again behind the others' backs.
    throw InvalidArgument("paramwin: " + std::string(ex.kind()) + " " +
                          std::to_string(ex.agent_id()) +
                          ": step() after leave(): the agent has left the population");
  }
  // Bound once: the pulls, the publish and a save of this step use these, unbound again.
  BoundLayers<LayerRef> ordered;
  std::string bad;
  try {
    // Qualified: unqualified, argument-dependent lookup also finds std::bind.
    ordered = paramwin::bind(ex.layout(), params, std::string(ex.kind()) + "::step");
    ex.check_params(ordered.refs());
  } catch (const InvalidArgument& e) {
    bad = e.what();
  }
  const std::int64_t steps_before = counters_.steps;
  StepEvent event;
  try {
    event = run_step(ex, iteration, metric, params, ordered, bad);
  } catch (...) {
    // A callback threw after the step was counted (on_rebirth keeps the rebirth): the other
    // agents may already wait in this step's collective save, so join it before leaving.
    // A step that was undone (a throwing custom trigger, bad parameters) saves on its retry.
    if (counters_.steps != steps_before) {
      try {
        checkpoint_if_due(ex, c, ordered);
      } catch (...) {
        // The callback's exception is the one this rank reports; a failed save was agreed,
        // so the other ranks throw that one themselves.
      }
    }
    throw;
  }
  checkpoint_if_due(ex, c, ordered);
  return event;
}

StepEvent AgentCore::start_step(RebirthExecutor& ex, std::int64_t iteration,
                                const StepAgreement& in) {
  ++steps_since_publish_;
  // The step's bound on waiting for other agents (roster reads and pulls share it).
  const double budget = policy_.options().read.timeout_seconds;
  deadline_ = budget > 0.0 ? MPI_Wtime() + budget : 0.0;
  params_prepared_ = false;
  // The decide timer starts after the agreement: for a group, waiting there for the agent's
  // slowest rank is the trainer's imbalance, not the decision's cost.
  const auto t0 = Clock::now();
  StepEvent event;
  event.rank = ex.agent_id();
  event.iteration = iteration;
  event.metric = in.metric;
  event.paused = in.paused;
  event.mixing = policy_.options().mixing.kind;
  event.hyper_before = hyper_;
  event.seconds.decide = seconds_since(t0);
  return event;
}

void AgentCore::rebirth(RebirthExecutor& ex, std::int64_t iteration, const PullOutcome& pulled,
                        StepEvent& event, std::string& note) {
  // The leader explores (its own stream) and redraws the maximum age; every rank learns
  // both with the new generation. A throwing explore function keeps the death pending.
  const auto t_mix = Clock::now();
  Hyperparameters next = hyper_;
  std::exception_ptr explore_error;
  if (ex.leader()) {
    try {
      next = policy_.exploit_explore(hyper_, pulled.donor_hyper, pulled.donor_weights);
      append_note(note, policy_.explore_note());  // PB2: the GP path or its fallback
      policy_.reborn();
      // PB2: the reborn agent's next interval starts from its best donor's metric.
      if (!event.donors.empty()) {
        policy_.observe_rebirth(iteration, event.donors.front().metric, next);
      }
    } catch (...) {
      explore_error = std::current_exception();
    }
  }
  counters_ = ex.share_rebirth(counters_of(policy_), next, explore_error);
  hyper_ = next;
  event.seconds.mix += seconds_since(t_mix);
  event.died = true;
}

void AgentCore::abandon_step(RebirthExecutor& ex, std::int64_t iteration, double metric,
                             bool sync_step) {
  // Never stay advertised as mid-rebirth after an error (others would skip us forever);
  // an error before that (a throwing trigger: the policy undid the step) changes nothing.
  if (advertised_ == AgentState::rebirth) set_status(ex, resting_state(), iteration, metric);
  agreed_.reset();
  if (sync_step) {
    // The others wait in the interval's barrier: meet them, then report this error.
    try {
      ex.sync_barrier();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the step's own error is the one to report
    }
  }
}

void AgentCore::finish_step(RebirthExecutor& ex, std::span<const LayerRef> params,
                            const BoundLayers<LayerRef>& ordered, const StepAgreement& in,
                            bool publish_pending, Attempts& a, StepEvent& event) {
  const bool died = a.reborn;
  // From a rebirth on, the caller's parameters hold the mix: whatever happens next (a
  // throwing callback included), they are published by this step or the next. A paused
  // agent holds every publish (the rebirth's too) for its first step after resume().
  // publish.defer_rebirth leaves it to the next step, and until then the roster says
  // mid-rebirth (the slot holds the dead parameters every step until then, not by chance).
  const bool owed = died || publish_pending || a.publish_due;
  const bool deferred = died && policy_.options().publish.defer_rebirth;
  const bool publish = owed && !in.paused && !deferred;
  // The rebirth's own publish (its first try, in this step or the next) waits for pins.
  const bool wait_for_pins = died || rebirth_publish_deferred_;
  if (deferred) {
    rebirth_unpublished_ = true;
    rebirth_publish_deferred_ = true;
  }
  if (owed) publish_pending_ = true;
  if (died && in.paused) {
    append_note(a.note, "paused: the republish waits for resume()");
  } else if (deferred) {
    append_note(a.note, "publish.defer_rebirth: the republish waits for the next step");
  }
  event.note = ex.leader() ? a.note : std::string();
  event.generation = counters_.generation;
  event.next_max_age = counters_.max_age;
  // The reborn agent keeps reporting its last metric until the next step measures one.
  resume_state_ = AgentState::active;
  set_status(ex, resting_state(), event.iteration, in.metric);

  event.hyper = hyper_;
  if (publish) ex.advance_stamp();
  if (died && policy_.options().on_rebirth) {
    const auto t = Clock::now();
    policy_.options().on_rebirth(event, params);
    event.seconds.mix += seconds_since(t);
  }
  if (publish) publish_step(ex, ordered, event, wait_for_pins);
  event.version = ex.version();
  event.hyper = hyper_;
  stats_.record(event);
  if (ex.leader()) log_.write(event);
}

StepEvent AgentCore::run_step(RebirthExecutor& ex, std::int64_t iteration, double metric,
                              std::span<const LayerRef> params,
                              const BoundLayers<LayerRef>& ordered, const std::string& bad) {
  // Serve this rank's RMA readers once per step: on MPICH's ch4:ucx their gets wait until
  // this rank enters MPI, and a trainer loop may make no other MPI call.
  if (policy_.options().serve.progress_in_step && ex.has_rma_readers()) ex.progress();
  const StepAgreement in = ex.agree(bad, metric, publish_pending_, paused_);
  StepEvent event = start_step(ex, iteration, in);
  bool publish_pending = in.any_publish_pending;
  // Synchronous PBT: at every interval step each agent publishes, then all agree on one
  // ranking, the worst are reborn from it, and a barrier keeps every donor from publishing
  // newer parameters before every pull of the interval is done.
  const WorstFractionTrigger& wf = policy_.options().triggers.worst_fraction;
  const bool sync_step = wf.synchronous && (policy_.steps() + 1) % wf.every == 0;
  agreed_.reset();
  if (sync_step) {
    if (!in.paused) {
      ex.advance_stamp();
      publish_step(ex, ordered, event, /*wait_for_pins=*/true);
      publish_pending = publish_pending_;
    }
    agreed_ = agreed_ranking(ex, iteration, in.metric, in.paused);
  }
  Attempts a;
  try {
    a = attempts(ex, params, ordered, event);
    if (a.reborn) {
      rebirth(ex, iteration, a.pulled, event, a.note);
    } else if (event.reason != DeathReason::none) {
      event.deferred = true;
    }
  } catch (...) {
    abandon_step(ex, iteration, in.metric, sync_step);
    throw;
  }
  agreed_.reset();
  if (sync_step) ex.sync_barrier();
  finish_step(ex, params, ordered, in, publish_pending, a, event);
  return event;
}

}  // namespace paramwin::detail
