// AveragingAgent: construction (options agreed on every rank, one layout), the step sequence
// (synchronous mean or asynchronous round, then publish), finish, pause and resume.
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "averaging/averaging_state.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace detail {

namespace {

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  return size;
}

/// Synchronous means and background corrections compute on the host in float32 or float64.
std::string check_layers(const AveragingOptions& o, const Layout& layout) {
  const bool needs_host_float =
      o.warmup_steps > 0 || o.cooldown_steps > 0 || o.background || o.symmetric;
  if (!needs_host_float) {
    return {};
  }
  for (const LayerSpec& spec : layout.layers()) {
    if (spec.dtype != DType::float32 && spec.dtype != DType::float64) {
      return "paramwin: AveragingAgent: warm-up, cool-down, background and symmetric "
             "averaging need float32 or float64 layers; layer " +
             spec.describe() + " is not";
    }
  }
  if (o.symmetric && o.window.memory != Memory::host) {
    return "paramwin: AveragingAgent: symmetric averaging exchanges through host memory; "
           "WindowOptions::memory must be host";
  }
  return {};
}

/// LayoutMismatch on every rank when the ranks' layouts or wire formats differ (a window
/// created with LayoutCheck::per_donor would let them): averaging mixes whole models. Checked
/// before the window exists.
void require_one_layout(MPI_Comm comm, const Layout& layout, WireFormat wire) {
  const std::uint64_t mine[2] = {layout.fingerprint(), static_cast<std::uint64_t>(wire)};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(comm_size(comm)));
  check_mpi(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm),
            "MPI_Allgather");
  for (std::size_t r = 1; 2 * r < all.size(); ++r) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
      throw LayoutMismatch("paramwin: AveragingAgent: every rank needs the same layout, but rank " +
                           std::to_string(r) + "'s layout (or wire format) differs from rank 0's");
    }
  }
}

/// @p options, checked on every rank of @p comm (InvalidArgument everywhere otherwise).
AveragingOptions checked(MPI_Comm comm, const Layout& layout, AveragingOptions options) {
  std::string bad = check_options(options, comm_rank(comm), comm_size(comm));
  if (bad.empty()) {
    bad = check_layers(options, layout);
  }
  agree_or_throw<InvalidArgument>(comm, bad);
  require_one_layout(comm, layout, options.window.wire);
  return options;
}

std::string log_path(std::string pattern, int rank) {
  const std::string key = "{rank}";
  for (std::size_t at = pattern.find(key); at != std::string::npos; at = pattern.find(key)) {
    pattern.replace(at, key.size(), std::to_string(rank));
  }
  return pattern;
}

}  // namespace

AveragingState::AveragingState(MPI_Comm comm, Layout layout, AveragingOptions options,
                               const std::source_location& site)
    : options_(checked(comm, layout, std::move(options))),
      window_(comm, std::move(layout), options_.window, site),
      sync_comm_(Comm::dup(comm)),
      rank_(window_.rank()),
      size_(window_.size()),
      last_round_time_(MPI_Wtime()),
      seen_(static_cast<std::size_t>(size_)) {
  std::string bad;
  if (!options_.event_log.empty()) {
    log_ = std::make_unique<std::ofstream>(log_path(options_.event_log, rank_));
    if (!*log_) {
      bad = "paramwin: AveragingAgent: cannot open the event log " +
            log_path(options_.event_log, rank_);
    }
  }
  agree_or_throw<InvalidArgument>(window_.comm(), bad);
  if (options_.symmetric) {
    inbox_ = std::make_unique<ExchangeInbox>(sync_comm_.get(), window_.layout());
  }
  start_worker();
}

namespace {

/// This rank's index in @p members (window ranks of a window of @p size ranks; empty: every
/// rank, the index is @p rank; -1: not among them), after checking them and @p options over
/// them (InvalidArgument naming what is wrong).
int member_index(const AveragingOptions& options, int rank, int size,
                 const std::vector<int>& members) {
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  int index = members.empty() ? rank : -1;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int r = members[i];
    if (r < 0 || r >= size || seen[static_cast<std::size_t>(r)]) {
      throw InvalidArgument(
          "paramwin: AveragingAgent::set_members: rank " + std::to_string(r) +
          (r < 0 || r >= size ? " is outside the window (ranks 0.." + std::to_string(size - 1) + ")"
                              : " is named twice"));
    }
    seen[static_cast<std::size_t>(r)] = true;
    if (r == rank) {
      index = static_cast<int>(i);
    }
  }
  const int count = members.empty() ? size : static_cast<int>(members.size());
  // Checked as the population's first member when this rank is not one of them (a spare).
  std::string bad = check_options(options, index >= 0 ? index : 0, count);
  if (bad.starts_with("paramwin: ")) {
    bad.erase(0, 10);
  }
  if (!bad.empty()) {
    throw InvalidArgument("paramwin: AveragingAgent::set_members: over " + std::to_string(count) +
                          " members: " + bad);
  }
  return index;
}

/// @p options for an agent made from @p window, checked before the window is taken (a refused
/// window stays the caller's: its collective free is not left to an exception's unwinding).
AveragingOptions adopted_options(const Window& window, AveragingOptions options,
                                 const std::vector<int>& members) {
  if (options.warmup_steps > 0 || options.cooldown_steps > 0 || options.symmetric) {
    throw InvalidArgument(
        "paramwin: AveragingAgent: an agent made from a window has no communicator for "
        "collectives: warm-up, cool-down and symmetric averaging need one (warmup_steps " +
        std::to_string(options.warmup_steps) + ", cooldown_steps " +
        std::to_string(options.cooldown_steps) + ", symmetric " +
        (options.symmetric ? "true" : "false") + ")");
  }
  (void)member_index(options, window.rank(), window.size(), members);
  if (std::string bad = check_layers(options, window.layout()); !bad.empty()) {
    throw InvalidArgument(bad);
  }
  if (!options.event_log.empty() && !std::ofstream(log_path(options.event_log, window.rank()))) {
    throw InvalidArgument("paramwin: AveragingAgent: cannot open the event log " +
                          log_path(options.event_log, window.rank()));
  }
  options.window = window.options();
  return options;
}

}  // namespace

AveragingState::AveragingState(Window&& window, AveragingOptions options, std::vector<int> members)
    : options_(adopted_options(window, std::move(options), members)),
      window_(std::move(window)),
      rank_(window_.rank()),
      size_(window_.size()),
      last_round_time_(MPI_Wtime()),
      seen_(static_cast<std::size_t>(size_)) {
  set_members(std::move(members));  // checked above: does not throw
  if (!options_.event_log.empty()) {
    log_ = std::make_unique<std::ofstream>(log_path(options_.event_log, rank_));
  }
  start_worker();
}

void AveragingState::set_members(std::vector<int> members) {
  member_index_ = member_index(options_, rank_, size_, members);
  members_ = std::move(members);
  peers_round_ = -1;  // the topology's peers are asked anew over the new population
}

void AveragingState::beat() {
  AgentStatus status = window_.status();
  status.iteration = steps_;
  status.age = steps_;
  status.state = paused_                 ? AgentState::paused
                 : joining_              ? AgentState::rebirth
                 : window_.version() > 0 ? AgentState::active
                                         : AgentState::fresh;
  window_.set_status(status);
}

void AveragingState::abandon() noexcept {
  worker_.reset();  // a read in flight completes first; its abandoned reads go to the window
  // NOLINTNEXTLINE(bugprone-unused-return-value): left allocated on purpose (a dead rank)
  (void)inbox_.release();
  sync_comm_.leak();
  window_.abandon();
}

void AveragingState::require_collectives(const char* what) const {
  if (!sync_comm_) {
    throw InvalidArgument(std::string("paramwin: AveragingAgent::") + what +
                          ": this agent was made from a window (an elastic population's) and has "
                          "no communicator for collectives");
  }
}

std::int64_t AveragingState::drain_all(const BoundLayers<LayerRef>& params) {
  if (!inbox_) {
    return 0;
  }
  check_mpi(MPI_Barrier(sync_comm_.get()), "MPI_Barrier");
  return inbox_->drain(params);
}

bool AveragingState::synchronous(std::int64_t step) const {
  return step <= options_.warmup_steps ||
         (options_.cooldown_steps > 0 && step > options_.total_steps - options_.cooldown_steps);
}

bool AveragingState::round_due() {
  if (options_.interval_ms > 0.0) {
    const double now = MPI_Wtime();
    if ((now - last_round_time_) * 1e3 < options_.interval_ms) {
      return false;
    }
    last_round_time_ = now;
    return true;
  }
  return (steps_ - options_.warmup_steps) % options_.interval == 0;
}

PublishResult AveragingState::publish(const BoundLayers<ConstLayerRef>& params) {
  PublishResult result = window_.publish(params, static_cast<std::uint64_t>(steps_));
  beat();
  return result;
}

void AveragingState::log(const AveragingRound& round) {
  if (log_ && (round.kind != RoundKind::none || round.background_applied || round.busy ||
               round.started_round >= 0)) {
    *log_ << to_json(round) << '\n';
    log_->flush();
  }
}

}  // namespace detail

namespace {

/// Binds @p params; in a synchronous step the error is agreed first (every rank throws).
BoundLayers<LayerRef> bind_step(const Layout& layout, std::span<const LayerRef> params,
                                const char* caller, MPI_Comm agree_comm, bool symmetric) {
  std::string bad;
  BoundLayers<LayerRef> bound;
  try {
    bound = paramwin::bind(layout, params, caller);
    for (const LayerRef& ref : bound.refs()) {
      if ((agree_comm != MPI_COMM_NULL || symmetric) && !ref.host_accessible()) {
        throw InvalidArgument(std::string("paramwin: ") + caller + ": " +
                              (symmetric ? "symmetric" : "synchronous") +
                              " averaging needs host memory");
      }
    }
  } catch (const InvalidArgument& e) {
    bad = e.what();
  }
  if (agree_comm != MPI_COMM_NULL) {
    detail::agree_or_throw<InvalidArgument>(agree_comm, bad);
  } else if (!bad.empty()) {
    throw InvalidArgument(bad);
  }
  return bound;
}

}  // namespace

AveragingAgent::AveragingAgent(MPI_Comm comm, Layout layout, AveragingOptions options,
                               const std::source_location& site)
    : state_(std::make_unique<detail::AveragingState>(comm, std::move(layout), std::move(options),
                                                      site)) {}
AveragingAgent::AveragingAgent(Window&& window, AveragingOptions options, std::vector<int> members)
    : state_(std::make_unique<detail::AveragingState>(std::move(window), std::move(options),
                                                      std::move(members))) {}
AveragingAgent::AveragingAgent(AveragingAgent&& other) noexcept = default;
AveragingAgent& AveragingAgent::operator=(AveragingAgent&& other) noexcept = default;
AveragingAgent::~AveragingAgent() = default;

detail::AveragingState& AveragingAgent::state() const {
  if (!state_) {
    throw InvalidArgument("paramwin: AveragingAgent: used after being moved from");
  }
  return *state_;
}

AveragingRound AveragingAgent::step(std::span<const LayerRef> params) {
  detail::AveragingState& s = state();
  const std::int64_t next = s.steps_ + 1;
  const bool sync = s.synchronous(next);
  const BoundLayers<LayerRef> bound =
      bind_step(s.window_.layout(), params, "AveragingAgent::step",
                sync ? s.sync_comm_.get() : MPI_COMM_NULL, s.options_.symmetric);
  if (!sync && !s.paused_ && !s.joining_ && s.population_rank() >= 0 &&
      s.options_.topology.kind == TopologyKind::custom) {
    const std::vector<int>& peers = s.round_peers();
    const std::string bad = check_peers(peers, s.population_rank(), s.population_size());
    if (!bad.empty()) {  // checked before anything changes
      throw InvalidArgument("paramwin: topology custom: round " + std::to_string(s.rounds_) + ": " +
                            bad);
    }
  }
  s.steps_ = next;
  if (s.window_.has_rma_readers()) {
    s.window_.progress();  // serves peers reading this rank over RMA (as Agent::step does)
  }
  AveragingRound round{.rank = s.rank_, .step = next, .paused = s.paused_};
  const double start = MPI_Wtime();
  if (sync) {
    s.pending_ = false;
    s.quiesce();
    round.received = s.drain_all(bound);
    s.synchronous_mean(bound);
    s.last_round_time_ = MPI_Wtime();
    round.kind = RoundKind::synchronous;
    round.applied = true;
    round.self_weight = 1.0 / s.size_;
  } else if (s.joining_ && !s.paused_) {
    round.received = s.drain(bound);
    s.join_round(bound, round);
    s.last_round_time_ = MPI_Wtime();
  } else if (s.population_rank() < 0 && !s.paused_) {
    round.note = "this rank is not among the population's members (set_members): no round";
  } else if (s.has_worker() && s.paused_) {
    s.collect_dropped();
  } else if (s.has_worker()) {
    s.overlap_step(bound, round);
  } else {
    round.received = s.drain(bound);  // symmetric: peers' halves of their exchanges, even paused
    if (!s.paused_) {
      round.background_applied = s.apply_correction(bound);
      if (s.round_due()) {
        s.gossip(bound, round);
      }
    }
    round.applied = round.applied || round.background_applied || round.received > 0;
  }
  if (!round.overlapped) {  // an overlapped round reports its read's own time on the worker
    round.seconds = MPI_Wtime() - start;
  }
  const bool joined_now = round.kind == RoundKind::joined && round.applied;
  if (!s.paused_ && !s.joining_ && (joined_now || next % s.options_.publish_every == 0)) {
    round.published = s.publish(bound.as_const()).published;
  } else {
    s.beat();  // the heartbeat of every step (liveness), published or not
  }
  round.joining = s.joining_;
  round.version = s.window_.version();
  s.log(round);
  return round;
}

PublishResult AveragingAgent::publish(std::span<const ConstLayerRef> params) {
  detail::AveragingState& s = state();
  return s.publish(paramwin::bind(s.window_.layout(), params, "AveragingAgent::publish"));
}

AveragingRound AveragingAgent::finish(std::span<const LayerRef> params) {
  detail::AveragingState& s = state();
  s.require_collectives("finish");
  const BoundLayers<LayerRef> bound =
      bind_step(s.window_.layout(), params, "AveragingAgent::finish", s.sync_comm_.get(),
                s.options_.symmetric);
  std::string bad;
  for (const LayerSpec& spec : s.window_.layout().layers()) {
    if (spec.dtype != DType::float32 && spec.dtype != DType::float64) {
      bad = "paramwin: AveragingAgent::finish: needs float32 or float64 layers; layer " +
            spec.describe() + " is not";
    }
  }
  detail::agree_or_throw<InvalidArgument>(s.sync_comm_.get(), bad);
  AveragingRound round{.rank = s.rank_, .step = s.steps_, .paused = s.paused_};
  const double start = MPI_Wtime();
  s.pending_ = false;
  s.quiesce();
  round.received = s.drain_all(bound);
  s.synchronous_mean(bound);
  round.kind = RoundKind::synchronous;
  round.applied = true;
  round.self_weight = 1.0 / s.size_;
  round.seconds = MPI_Wtime() - start;
  round.published = s.publish(bound.as_const()).published;
  round.version = s.window_.version();
  s.log(round);
  return round;
}

void AveragingAgent::pause() {
  detail::AveragingState& s = state();
  if (s.paused_) {
    return;
  }
  s.paused_ = true;
  s.pending_ = false;
  s.drop_in_flight();
  s.set_inbox_open(false);  // peers' exchanges already in still land at the next step
  AgentStatus status = s.window_.status();
  status.state = AgentState::paused;
  s.window_.set_status(status);
}

void AveragingAgent::resume() {
  detail::AveragingState& s = state();
  if (!s.paused_) {
    return;
  }
  s.paused_ = false;
  s.set_inbox_open(true);
  AgentStatus status = s.window_.status();
  status.state = s.window_.version() > 0 ? AgentState::active : AgentState::fresh;
  s.window_.set_status(status);
}

bool AveragingAgent::is_paused() const { return state().paused_; }

void AveragingAgent::join() {
  detail::AveragingState& s = state();
  s.pending_ = false;
  s.drop_in_flight();
  s.window_.renew_incarnation();
  s.joining_ = true;
  s.beat();  // the roster says rebirth: no peer mixes this agent in until it has joined
}

bool AveragingAgent::joining() const { return state().joining_; }

void AveragingAgent::set_members(std::vector<int> members) {
  state().set_members(std::move(members));
}

const std::vector<int>& AveragingAgent::members() const { return state().members_; }

void AveragingAgent::abandon() noexcept {
  if (!state_) {
    return;
  }
  state_->abandon();
  state_.reset();
}

void AveragingAgent::replace_window(Window&& window) {
  detail::AveragingState& s = state();
  s.quiesce();  // the worker reads the window: idle before it changes (or the check throws)
  window.continue_from(s.window_, "paramwin: AveragingAgent::replace_window");
  s.pending_ = false;
  s.window_ = std::move(window);
}
int AveragingAgent::rank() const { return state().rank_; }
int AveragingAgent::size() const { return state().size_; }
std::int64_t AveragingAgent::steps() const { return state().steps_; }
std::int64_t AveragingAgent::rounds() const { return state().rounds_; }
const AveragingOptions& AveragingAgent::options() const { return state().options_; }
// The layout never changes after creation: reading it never waits for the worker.
const Layout& AveragingAgent::layout() const { return state().window_.layout(); }
Window& AveragingAgent::window() {
  detail::AveragingState& s = state();
  s.wait_for_worker();
  return s.window_;
}
const Window& AveragingAgent::window() const {
  const detail::AveragingState& s = state();
  s.wait_for_worker();
  return s.window_;
}
const std::string& AveragingAgent::background_inline_reason() const {
  return state().inline_reason_;
}

}  // namespace paramwin
