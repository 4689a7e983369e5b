// GroupAgent: one step of an agent made of g ranks. Per step, over the agent's ranks only:
//   1. allreduce: bad-input flags, the metric (mean) and "a publish is pending somewhere";
//   2. the leader decides (triggers, donors, weights) and broadcasts a fixed-size plan;
//   3. on a death: every rank pulls its shard from the donors' matching ranks into scratch,
//      then an allgather of the outcomes (errors, publish stamps per donor) lets every rank
//      judge the same way whether the shards form one consistent mix; if not, back to 2;
//   4. the shards are gathered into every rank's replica (one broadcast per shard, straight
//      between the callers' layers, described by MPI datatypes);
//   5. callbacks, then every rank publishes its shard stamped with the same epoch.
// No collective follows a user callback, so a throwing callback cannot strand the others.
#include "paramwin/group_agent.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <exception>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "detail/mpi_check.hpp"
#include "paramwin/detail/agent_core.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace {

using Clock = std::chrono::steady_clock;
using detail::check_mpi;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

constexpr int kAttempts = 3;
constexpr std::size_t kMaxBcastBytes = std::size_t{1} << 30;  // per broadcast, below INT_MAX

enum class Action : std::int64_t { none = 0, pull = 1, reset = 2, defer = 3, error = 4 };

/// The leader's decision, as fixed-size words every rank of the agent receives.
struct Plan {
  static constexpr std::size_t kHead = 10;
  std::vector<std::int64_t> words;
  explicit Plan(int agents) : words(kHead + 4 * static_cast<std::size_t>(agents), 0) {}
  std::int64_t& at(std::size_t i) { return words[i]; }
  Action action() const { return static_cast<Action>(words[0]); }
  std::size_t donors() const { return static_cast<std::size_t>(words[7]); }
  int donor(std::size_t i) const { return static_cast<int>(words[kHead + i]); }
  double real(std::size_t block, std::size_t i) const {  // block 1 weights, 2 staleness, 3 metric
    return std::bit_cast<double>(words[kHead + block * cap() + i]);
  }
  void set_real(std::size_t block, std::size_t i, double v) {
    words[kHead + block * cap() + i] = std::bit_cast<std::int64_t>(v);
  }
  std::size_t cap() const { return (words.size() - kHead) / 4; }
};

/// A byte range of the caller's memory.
struct Block {
  std::byte* data;
  std::size_t bytes;
};

/// Broadcasts @p blocks (same sizes on every rank, the root's contents win) over @p comm,
/// as few MPI_Bcast calls of one hindexed datatype each as the 1 GiB cap allows.
void broadcast_blocks(std::vector<Block> blocks, int root, MPI_Comm comm) {
  // Cut blocks above the cap so that every piece and every batch fits an int.
  std::vector<Block> pieces;
  for (const Block& b : blocks) {
    for (std::size_t off = 0; off < b.bytes; off += kMaxBcastBytes) {
      pieces.push_back({b.data + off, std::min(kMaxBcastBytes, b.bytes - off)});
    }
  }
  std::size_t i = 0;
  while (i < pieces.size()) {
    std::vector<int> lens;
    std::vector<MPI_Aint> addrs;
    std::size_t total = 0;
    for (; i < pieces.size() && total + pieces[i].bytes <= kMaxBcastBytes; ++i) {
      MPI_Aint a = 0;
      check_mpi(MPI_Get_address(pieces[i].data, &a), "MPI_Get_address");
      addrs.push_back(a);
      lens.push_back(static_cast<int>(pieces[i].bytes));
      total += pieces[i].bytes;
    }
    MPI_Datatype type = MPI_DATATYPE_NULL;
    check_mpi(MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(), addrs.data(),
                                       MPI_BYTE, &type),
              "MPI_Type_create_hindexed");
    check_mpi(MPI_Type_commit(&type), "MPI_Type_commit");
    const int rc = MPI_Bcast(MPI_BOTTOM, 1, type, root, comm);
    MPI_Type_free(&type);
    check_mpi(rc, "MPI_Bcast(shard)");
  }
}

}  // namespace

struct GroupAgent::State {
  State(const AgentGroups& groups, Layout layout, AgentOptions options, int shard)
      : plan(std::move(layout), groups.agent_size()),
        policy(std::move(options), groups.agent(), groups.agents()),
        agent(groups.agent()),
        agents(groups.agents()),
        rank_in_agent(shard),
        g(groups.agent_size()) {}
  ~State() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    if (scratch_win != MPI_WIN_NULL) {
      MPI_Win_unlock_all(scratch_win);
      MPI_Win_free(&scratch_win);
    }
    if (agent_comm != MPI_COMM_NULL) MPI_Comm_free(&agent_comm);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  State(State&&) = delete;
  State& operator=(State&&) = delete;

  ShardPlan plan;
  Policy policy;  // advanced on the leader only; the others mirror its counters below
  AgentStats stats;
  EventLog log;
  std::optional<ParameterWindow<>> window;
  MPI_Comm agent_comm = MPI_COMM_NULL;  // a duplicate of the groups' agent communicator
  int agent;
  int agents;
  int rank_in_agent;
  int g;
  std::int64_t steps = 0;
  std::int64_t age = 0;
  std::int64_t max_age = 0;
  std::uint64_t generation = 0;
  std::uint64_t epoch = 0;
  std::uint64_t fingerprint = 0;
  bool publish_pending = true;
  bool left = false;
  std::int64_t steps_since_publish = 0;
  Clock::time_point last_publish{};
  // This rank's shard, pulled before it is trusted. When the agent's ranks share a node it
  // lives in a shared-memory window over the agent, and the gather is a plain copy from the
  // peers' scratch; otherwise in private memory, gathered by broadcasts.
  bool same_node = false;
  MPI_Win scratch_win = MPI_WIN_NULL;
  std::vector<std::byte*> peer_scratch;     // per in-agent rank (same_node)
  std::vector<std::byte> private_scratch;
  std::byte* scratch = nullptr;
  std::vector<std::size_t> scratch_offset;  // per layer

  bool leader() const { return rank_in_agent == 0; }
  ParameterWindow<>& win() { return *window; }

  void set_status(AgentState state, std::int64_t iteration, double metric) {
    win().set_status(AgentStatus{.iteration = iteration,
                                 .age = age,
                                 .metric = metric,
                                 .generation = generation,
                                 .state = state});
  }

  bool publish_due(Clock::time_point now) const {
    return detail::publish_due(policy.options().publish, steps_since_publish, now - last_publish);
  }

  /// This rank's shard of the caller's full layers, as refs the window can publish.
  std::vector<ConstLayerRef> shard_of(std::span<const ConstLayerRef> params) const {
    std::vector<ConstLayerRef> refs;
    refs.reserve(params.size());
    const Layout& full = plan.full();
    for (std::size_t l = 0; l < full.size(); ++l) {
      const std::size_t esize = dtype_size(full[l].dtype);
      const auto* base = static_cast<const std::byte*>(params[l].data());
      refs.emplace_back(std::string_view{}, base + plan.first(l, rank_in_agent) * esize,
                        plan.count(l, rank_in_agent), full[l].dtype);
    }
    return refs;
  }

  /// Binds @p params (positional, or named in any order) to layout order.
  template <class Ref>
  std::vector<Ref> ordered(std::span<const Ref> params) const {
    const Layout& full = plan.full();
    if (params.empty() || params[0].name().empty()) return {params.begin(), params.end()};
    std::vector<Ref> out(params.begin(), params.end());
    std::vector<bool> bound(full.size(), false);
    for (const Ref& r : params) {
      const std::size_t i = full.index_of(r.name());
      if (bound[i]) {
        throw InvalidArgument("paramwin: GroupAgent: layer \"" + std::string(r.name()) +
                              "\" is passed twice");
      }
      bound[i] = true;
      out[i] = r;
    }
    return out;
  }

  PublishResult publish_shard(std::span<const ConstLayerRef> ordered_params, std::uint64_t stamp) {
    const std::vector<ConstLayerRef> shard = shard_of(ordered_params);
    PublishResult r = win().publish(shard, stamp);
    publish_pending = !r.published;
    if (r.published) {
      steps_since_publish = 0;
      last_publish = Clock::now();
    }
    return r;
  }

  /// Byte offset of each layer of shard @p s in that shard's scratch; last entry: the size.
  std::vector<std::size_t> offsets_of(int s) const {
    const Layout& shard = plan.shard_layout(s);
    std::vector<std::size_t> off;
    std::size_t at = 0;
    for (std::size_t l = 0; l < shard.size(); ++l) {
      off.push_back(at);
      at += (shard[l].count * dtype_size(shard[l].dtype) + 63) / 64 * 64;
    }
    off.push_back(at);
    return off;
  }

  /// Allocates the scratch on first use. Every rank of the agent reaches the first rebirth
  /// pull together, so the shared window's collective creation is safe here.
  void ensure_scratch() {
    if (scratch != nullptr) return;
    scratch_offset = offsets_of(rank_in_agent);
    const std::size_t bytes = std::max<std::size_t>(scratch_offset.back(), 64);
    if (same_node) {
      const detail::SharedInfo info;
      void* base = nullptr;
      check_mpi(MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info.get(), agent_comm,
                                        &base, &scratch_win),
                "MPI_Win_allocate_shared(scratch)");
      check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, scratch_win), "MPI_Win_lock_all(scratch)");
      peer_scratch.assign(static_cast<std::size_t>(g), nullptr);
      for (int r = 0; r < g; ++r) {
        MPI_Aint size = 0;
        int unit = 0;
        void* peer = nullptr;
        check_mpi(MPI_Win_shared_query(scratch_win, r, &size, &unit, &peer), "MPI_Win_shared_query");
        peer_scratch[static_cast<std::size_t>(r)] = static_cast<std::byte*>(peer);
      }
      scratch = peer_scratch[static_cast<std::size_t>(rank_in_agent)];
    } else {
      private_scratch.resize(bytes);
      scratch = private_scratch.data();
    }
  }

  std::vector<LayerRef> scratch_refs() {
    ensure_scratch();
    const Layout& shard = plan.shard_layout(rank_in_agent);
    std::vector<LayerRef> refs;
    for (std::size_t l = 0; l < shard.size(); ++l) {
      refs.emplace_back(std::string_view{}, scratch + scratch_offset[l], shard[l].count,
                        shard[l].dtype);
    }
    return refs;
  }

  /// The byte ranges of shard @p s inside the caller's layers.
  std::vector<Block> blocks_of(int s, std::span<const LayerRef> params) const {
    std::vector<Block> blocks;
    const Layout& full = plan.full();
    for (std::size_t l = 0; l < full.size(); ++l) {
      const std::size_t esize = dtype_size(full[l].dtype);
      const std::size_t n = plan.count(l, s) * esize;
      if (n == 0) continue;
      blocks.push_back({static_cast<std::byte*>(params[l].data()) + plan.first(l, s) * esize, n});
    }
    return blocks;
  }

  /// Copies shard @p s from @p src (that shard's scratch) into the caller's @p params.
  void copy_shard(int s, const std::byte* src, std::span<const LayerRef> params) const {
    const std::vector<std::size_t> off = offsets_of(s);
    const Layout& full = plan.full();
    for (std::size_t l = 0; l < full.size(); ++l) {
      const std::size_t esize = dtype_size(full[l].dtype);
      const std::size_t n = plan.count(l, s) * esize;
      if (n == 0) continue;
      std::memcpy(static_cast<std::byte*>(params[l].data()) + plan.first(l, s) * esize,
                  src + off[l], n);
    }
  }

  /// Every rank's scratch shard into every rank's @p params. Called after the outcome
  /// allgather, which every rank entered after writing its scratch: the shards are complete.
  /// The next write to any scratch comes after the next step's allreduce, which no rank
  /// passes before every rank has finished copying here.
  void assemble(std::span<const LayerRef> params) {
    if (same_node) {
      check_mpi(MPI_Win_sync(scratch_win), "MPI_Win_sync(scratch)");
      for (int s = 0; s < g; ++s) copy_shard(s, peer_scratch[static_cast<std::size_t>(s)], params);
      return;
    }
    copy_shard(rank_in_agent, scratch, params);
    for (int s = 0; s < g; ++s) broadcast_blocks(blocks_of(s, params), s, agent_comm);
  }
};

GroupAgent::GroupAgent(const AgentGroups& groups, Layout layout, AgentOptions options,
                       const WindowOptions& window_options) {
  if (!groups.is_agent_rank()) {
    throw InvalidArgument("paramwin: GroupAgent: world rank " +
                          std::to_string(groups.world_rank()) + " is a " +
                          std::string(role_name(groups.role())) +
                          " rank, not an agent rank; only agent ranks construct a GroupAgent");
  }
  const MPI_Comm training = groups.training_comm();
  // Decide everything that could fail on one rank only before any collective over a
  // subset: options, exposure, uniform agents; then the layout across all training ranks.
  std::string error;
  try {
    if (!groups.uniform()) {
      throw InvalidArgument("paramwin: GroupAgent: agents differ in size (explicit assignment); "
                            "sharded agents need the same number of ranks in every agent");
    }
    if (window_options.exposure == Exposure::live) {
      throw InvalidArgument("paramwin: GroupAgent: Exposure::live is not supported: each rank's "
                            "window holds one shard while the trainer holds the full replica");
    }
    s_ = std::make_unique<State>(groups, std::move(layout), std::move(options),
                                 groups.rank_in_agent());
  } catch (const Error& e) {
    error = e.what();
  }
  int ok = error.empty() ? 1 : 0;
  int all_ok = 0;
  check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, training), "MPI_Allreduce");
  if (all_ok == 0) {
    s_.reset();
    throw InvalidArgument(!error.empty() ? error
                                         : "paramwin: GroupAgent: invalid options or groups on "
                                           "another training rank (see that rank's error)");
  }
  // The same full layout everywhere: shard layouts alone would not catch a difference
  // inside one agent before the shard windows' collectives split the ranks.
  const std::vector<std::string> texts = detail::allgather_text(training, s_->plan.full().serialize());
  for (std::size_t r = 1; r < texts.size(); ++r) {
    if (texts[r] != texts[0]) {
      const std::string why =
          Layout::first_difference(Layout::deserialize(texts[0]), Layout::deserialize(texts[r]));
      s_.reset();
      throw LayoutMismatch("paramwin: GroupAgent: layouts differ across training ranks: rank 0 "
                           "vs rank " + std::to_string(r) + " differ at " + why);
    }
  }
  State& st = *s_;
  check_mpi(MPI_Comm_dup(groups.agent_comm(), &st.agent_comm), "MPI_Comm_dup(agent)");
  check_mpi(MPI_Comm_set_errhandler(st.agent_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  {
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(st.agent_comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type(agent)");
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    // PARAMWIN_GROUP_GATHER=broadcast forces the path agents spread over nodes take (tests).
    const char* force = std::getenv("PARAMWIN_GROUP_GATHER");
    const bool broadcast = force != nullptr && std::string(force) == "broadcast";
    int all_local = node_size == st.g && !broadcast ? 1 : 0;
    int everywhere = 0;
    check_mpi(MPI_Allreduce(&all_local, &everywhere, 1, MPI_INT, MPI_MIN, st.agent_comm),
              "MPI_Allreduce(same node)");
    st.same_node = everywhere == 1 && st.g > 1;
  }
  st.window.emplace(groups.shard_comm(), st.plan.shard_layout(st.rank_in_agent), window_options);
  st.max_age = st.policy.max_age();
  st.fingerprint = st.win().fingerprint();
  if (st.leader() && !st.policy.options().event_log.empty()) {
    st.log = EventLog(detail::expand_rank(st.policy.options().event_log, st.agent));
  }
}

GroupAgent::GroupAgent(GroupAgent&&) noexcept = default;
GroupAgent& GroupAgent::operator=(GroupAgent&&) noexcept = default;
GroupAgent::~GroupAgent() = default;

GroupAgent::State& GroupAgent::state() const {
  if (!s_) throw Error("paramwin: use of a GroupAgent that was moved from or failed to construct");
  return *s_;
}

StepEvent GroupAgent::step(std::int64_t iteration, double metric, std::span<const LayerRef> params) {
  State& st = state();
  if (st.left) {
    throw InvalidArgument("paramwin: GroupAgent " + std::to_string(st.agent) +
                          ": step() after leave(): the agent has left the population");
  }
  // 1. Input checks, the agent's metric and pending publishes, in one allreduce.
  std::string bad;
  std::vector<LayerRef> p;
  try {
    detail::check_step_params(st.plan.full(), params, "GroupAgent::step");
    for (const LayerRef& r : params) {
      if (!r.host_accessible() || !r.contiguous()) {
        throw InvalidArgument("paramwin: GroupAgent::step: layer \"" + std::string(r.name()) +
                              "\" must be contiguous host memory (GroupAgent is host-only)");
      }
    }
    p = st.ordered(params);
  } catch (const InvalidArgument& e) {
    bad = e.what();
  }
  double in[3] = {bad.empty() ? 0.0 : 1.0, metric, st.publish_pending ? 1.0 : 0.0};
  double sum[3] = {};
  check_mpi(MPI_Allreduce(in, sum, 3, MPI_DOUBLE, MPI_SUM, st.agent_comm), "MPI_Allreduce(step)");
  if (sum[0] > 0.0) {
    throw InvalidArgument(!bad.empty() ? bad
                                       : "paramwin: GroupAgent::step: another rank of agent " +
                                             std::to_string(st.agent) +
                                             " passed bad parameters (see its error)");
  }
  const double agent_metric = sum[1] / st.g;
  const bool any_pending = sum[2] > 0.0;

  StepEvent event;
  event.rank = st.agent;
  event.iteration = iteration;
  event.metric = agent_metric;
  event.mixing = st.policy.options().mixing.kind;

  // 2. + 3. Decide (leader), share, pull, judge; up to kAttempts choices.
  std::string note;
  std::vector<int> exclude;
  bool died = false;
  bool first = true;
  bool due = false;
  std::exception_ptr leader_error;
  for (int attempt = 0; attempt < kAttempts && !died; ++attempt) {
    Plan plan(st.agents);
    if (st.leader()) {
      const auto t = Clock::now();
      try {
        DeathReason reason = st.policy.pending();
        if (first) {
          reason = st.policy.decide(iteration, agent_metric,
                                    [&st] { return st.win().roster_all(); }, st.fingerprint);
          plan.at(2) = st.publish_due(Clock::now()) ? 1 : 0;
        }
        plan.at(1) = static_cast<std::int64_t>(reason);
        plan.at(3) = st.policy.steps();
        plan.at(4) = st.policy.age();
        plan.at(5) = st.policy.max_age();
        plan.at(6) = static_cast<std::int64_t>(st.policy.generation());
        plan.at(9) = attempt;
        if (reason == DeathReason::none) {
          plan.at(0) = static_cast<std::int64_t>(Action::none);
        } else if (st.policy.options().mixing.kind == MixingKind::reset) {
          plan.at(0) = static_cast<std::int64_t>(Action::reset);
          plan.at(8) = static_cast<std::int64_t>(st.policy.next_reset_seed());
        } else {
          const std::vector<RosterEntry> rosters = st.win().roster_all();
          const double now = MPI_Wtime();
          const DonorChoice choice = st.policy.select_donors(rosters, st.fingerprint, exclude, now);
          if (choice.ranks.empty()) {
            plan.at(0) = static_cast<std::int64_t>(Action::defer);
            note += (note.empty() ? "" : "; ") + choice.shortfall;
          } else {
            if (!choice.shortfall.empty()) note += (note.empty() ? "clamped: " : "; clamped: ") + choice.shortfall;
            std::vector<int> donors = choice.ranks;
            std::vector<double> weights(donors.size(), 1.0);
            const MixingKind kind = st.policy.options().mixing.kind;
            if (kind == MixingKind::best) {
              donors.resize(1);
            } else if (kind == MixingKind::weighted) {
              weights = st.policy.mixing_weights(choice.metrics);
              plan.at(8) = 1;
            }
            plan.at(0) = static_cast<std::int64_t>(Action::pull);
            plan.at(7) = static_cast<std::int64_t>(donors.size());
            for (std::size_t i = 0; i < donors.size(); ++i) {
              plan.at(Plan::kHead + i) = donors[i];
              plan.set_real(1, i, weights[i]);
              plan.set_real(2, i, staleness_seconds(rosters[static_cast<std::size_t>(donors[i])], now));
              plan.set_real(3, i, choice.metrics[i]);
            }
          }
        }
      } catch (const std::exception& e) {
        leader_error = std::current_exception();
        plan.at(0) = static_cast<std::int64_t>(Action::error);
        plan.at(1) = dynamic_cast<const DonorError*>(&e) != nullptr ? 1 : 0;
      }
      event.seconds.decide += seconds_since(t);
    }
    const auto t_share = Clock::now();
    check_mpi(MPI_Bcast(plan.words.data(), static_cast<int>(plan.words.size()), MPI_INT64_T, 0,
                        st.agent_comm),
              "MPI_Bcast(plan)");
    if (!st.leader()) event.seconds.decide += seconds_since(t_share);
    if (plan.action() == Action::error) {
      // The leader's custom trigger, roster read or donor selection threw: it rethrows; the
      // others throw too, so that nobody waits in a collective the leader will not enter.
      st.set_status(AgentState::active, iteration, agent_metric);
      if (st.leader()) std::rethrow_exception(leader_error);
      const std::string msg = "paramwin: GroupAgent::step: the leader of agent " +
                              std::to_string(st.agent) + " failed to decide (see its error)";
      if (plan.at(1) == 1) throw DonorError(-1, msg);
      throw Error(msg);
    }
    first = false;
    event.reason = static_cast<DeathReason>(plan.at(1));
    event.step = st.steps = plan.at(3);
    event.age = st.age = plan.at(4);
    event.max_age = st.max_age = plan.at(5);
    st.generation = static_cast<std::uint64_t>(plan.at(6));
    if (attempt == 0) due = plan.at(2) != 0;

    if (plan.action() == Action::none || plan.action() == Action::defer) break;

    st.set_status(AgentState::rebirth, iteration, agent_metric);
    if (plan.action() == Action::reset) {
      const auto t = Clock::now();
      if (st.leader()) {
        st.policy.options().reset(p, static_cast<std::uint64_t>(plan.at(8)));
      }
      event.seconds.mix += seconds_since(t);
      const auto ta = Clock::now();
      std::vector<Block> all;
      for (int s = 0; s < st.g; ++s) {
        const std::vector<Block> b = st.blocks_of(s, p);
        all.insert(all.end(), b.begin(), b.end());
      }
      broadcast_blocks(all, 0, st.agent_comm);
      event.seconds.assemble += seconds_since(ta);
      died = true;
      break;
    }

    // Pull this rank's shard from each donor agent's matching rank.
    const std::size_t n = plan.donors();
    std::vector<int> donors(n);
    for (std::size_t i = 0; i < n; ++i) donors[i] = plan.donor(i);
    const auto t_pull = Clock::now();
    // One rank per agent: nothing to agree on or gather, and the window's pull is itself
    // transactional, so it writes straight into the caller's layers.
    std::vector<LayerRef> scratch = st.g == 1 ? p : st.scratch_refs();
    const MixingOptions& mo = st.policy.options().mixing;
    PullOptions po;
    po.momentum = mo.momentum;
    po.non_finite = mo.non_finite;
    if (plan.at(8) != 0) {
      po.reduction = Reduction::weighted;
      for (std::size_t i = 0; i < n; ++i) po.weights.push_back(plan.real(1, i));
    }
    if (po.momentum > 0.0 && st.g > 1) {  // momentum mixes into the current shard: start from it
      std::vector<ConstLayerRef> cp;
      for (const LayerRef& r : p) cp.push_back(r.as_const());
      const std::vector<ConstLayerRef> cur = st.shard_of(cp);
      for (std::size_t l = 0; l < cur.size(); ++l) {
        if (cur[l].count() == 0) continue;  // an empty layer's data() may be null
        std::memcpy(scratch[l].data(), cur[l].data(), cur[l].count() * dtype_size(cur[l].dtype()));
      }
    }
    const std::size_t words = 3 + 2 * n;
    std::vector<std::int64_t> out(words, 0);
    std::string pull_error;
    PullResult result;
    try {
      result = st.win().pull(donors, scratch, po);
      out[0] = 1;
      out[1] = -1;
      out[2] = static_cast<std::int64_t>(result.bytes);
      for (std::size_t i = 0; i < n; ++i) {
        out[3 + i] = static_cast<std::int64_t>(result.donors[i].stamp);
        out[3 + n + i] = result.donors[i].skipped ? 1 : 0;
      }
    } catch (const DonorError& e) {
      out[0] = 0;
      out[1] = e.rank();
      pull_error = e.what();
    }
    if (st.scratch_win != MPI_WIN_NULL) {
      check_mpi(MPI_Win_sync(st.scratch_win), "MPI_Win_sync(scratch)");  // before the allgather
    }
    event.seconds.pull += seconds_since(t_pull);
    const auto t_judge = Clock::now();
    std::vector<std::int64_t> all(words * static_cast<std::size_t>(st.g));
    check_mpi(MPI_Allgather(out.data(), static_cast<int>(words), MPI_INT64_T, all.data(),
                            static_cast<int>(words), MPI_INT64_T, st.agent_comm),
              "MPI_Allgather(pull outcomes)");
    // Every rank sees the same table and reaches the same verdict.
    std::string why;
    int failed = -1;
    std::size_t bytes = 0;
    for (int r = 0; r < st.g && why.empty(); ++r) {
      const std::int64_t* o = &all[static_cast<std::size_t>(r) * words];
      if (o[0] == 0) {
        failed = static_cast<int>(o[1]);
        why = "in-agent rank " + std::to_string(r) + " could not pull its shard" +
              (failed >= 0 ? " from donor agent " + std::to_string(failed) : std::string()) +
              (r == st.rank_in_agent ? ": " + pull_error : std::string());
      }
      bytes += static_cast<std::size_t>(o[0] != 0 ? o[2] : 0);
    }
    for (std::size_t i = 0; i < n && why.empty(); ++i) {
      for (int r = 1; r < st.g && why.empty(); ++r) {
        const std::int64_t* o = &all[static_cast<std::size_t>(r) * words];
        if (o[3 + i] != all[3 + i] || o[3 + n + i] != all[3 + n + i]) {
          why = "donor agent " + std::to_string(donors[i]) +
                ": its shards came from different publishes (stamps " + std::to_string(all[3 + i]) +
                " and " + std::to_string(o[3 + i]) + ") or one was skipped";
        }
      }
    }
    event.seconds.pull += seconds_since(t_judge);
    if (!why.empty()) {
      note += (note.empty() ? "" : "; ") + why;
      st.set_status(AgentState::active, iteration, agent_metric);
      if (failed >= 0) {
        if (std::find(exclude.begin(), exclude.end(), failed) != exclude.end()) break;
        exclude.push_back(failed);
      }
      continue;
    }
    event.donors.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const DonorRead& d = result.donors[i];
      event.donors.push_back(DonorRecord{.rank = donors[i],
                                         .version = d.stamp,
                                         .metric = plan.real(3, i),
                                         .weight = d.weight,
                                         .bytes = d.bytes * static_cast<std::size_t>(st.g),
                                         .transport = d.transport,
                                         .skipped = d.skipped,
                                         .staleness_seconds = plan.real(2, i)});
    }
    event.bytes = bytes;
    if (st.g > 1) {
      const auto ta = Clock::now();
      st.assemble(p);
      event.seconds.assemble += seconds_since(ta);
    }
    died = true;
  }

  if (died) {
    // The leader redraws the maximum age; everyone learns it with the new generation.
    std::int64_t after[2] = {0, 0};
    if (st.leader()) {
      st.policy.reborn();
      after[0] = static_cast<std::int64_t>(st.policy.generation());
      after[1] = st.policy.max_age();
    }
    check_mpi(MPI_Bcast(after, 2, MPI_INT64_T, 0, st.agent_comm), "MPI_Bcast(rebirth)");
    st.generation = static_cast<std::uint64_t>(after[0]);
    st.max_age = after[1];
    st.age = 0;
    event.died = true;
  } else if (event.reason != DeathReason::none) {
    event.deferred = true;
  }
  event.note = st.leader() ? note : std::string();
  event.generation = st.generation;
  event.next_max_age = st.max_age;
  st.set_status(AgentState::active, iteration, agent_metric);
  ++st.steps_since_publish;

  // 5. Callbacks, then the shard publish: every rank decides alike (died, pending, due).
  const bool publish = died || any_pending || due;
  if (publish) {
    ++st.epoch;
    st.publish_pending = true;
  }
  if (died && st.policy.options().on_rebirth) {
    const auto t = Clock::now();
    st.policy.options().on_rebirth(event, p);
    event.seconds.mix += seconds_since(t);
  }
  if (publish) {
    const auto t = Clock::now();
    std::vector<ConstLayerRef> cp;
    cp.reserve(p.size());
    for (const LayerRef& r : p) cp.push_back(r.as_const());
    const PublishResult r = st.publish_shard(cp, st.epoch);
    event.seconds.publish = seconds_since(t);
    event.published = r.published;
    event.publish_skipped = !r.published;
  }
  event.version = st.epoch;
  st.stats.record(event);
  if (st.leader()) st.log.write(event);
  return event;
}

PublishResult GroupAgent::publish(std::span<const ConstLayerRef> params) {
  State& st = state();
  detail::check_step_params(st.plan.full(), params, "GroupAgent::publish");
  const std::vector<ConstLayerRef> ordered = st.ordered(params);
  return st.publish_shard(ordered, ++st.epoch);
}

void GroupAgent::leave() {
  State& st = state();
  const RosterEntry own = st.win().roster(st.win().rank());
  st.set_status(AgentState::left, own.status.iteration, own.status.metric);
  st.left = true;
}

void GroupAgent::close() {
  State& st = state();
  if (st.window) st.win().close();
}

ParameterWindow<>& GroupAgent::window() { return state().win(); }
const ParameterWindow<>& GroupAgent::window() const { return state().win(); }
const ShardPlan& GroupAgent::plan() const { return state().plan; }
const AgentStats& GroupAgent::stats() const { return state().stats; }
const AgentOptions& GroupAgent::options() const { return state().policy.options(); }
int GroupAgent::agent() const { return state().agent; }
int GroupAgent::agents() const { return state().agents; }
int GroupAgent::rank_in_agent() const { return state().rank_in_agent; }
int GroupAgent::ranks_per_agent() const { return state().g; }
std::int64_t GroupAgent::steps() const { return state().steps; }
std::int64_t GroupAgent::age() const { return state().age; }
std::int64_t GroupAgent::max_age() const { return state().max_age; }
std::uint64_t GroupAgent::generation() const { return state().generation; }
std::uint64_t GroupAgent::epoch() const { return state().epoch; }
void GroupAgent::write_summary(std::ostream& out) const { state().stats.write_summary(out); }
void GroupAgent::set_event_log(EventLog log) { state().log = std::move(log); }

}  // namespace paramwin
