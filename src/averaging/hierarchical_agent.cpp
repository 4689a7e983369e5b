// HierarchicalAveragingAgent: DASO's hierarchy. Every step the ranks of a group take the
// group's mean (MPI_Allreduce over the group); the group's leader then runs its
// AveragingAgent's step over the leaders (one-sided, at its own pace) and broadcasts the
// round and, when the round changed the parameters, the parameters to its group.
#include "paramwin/hierarchical_averaging.hpp"

#include <mpi.h>

#include <array>
#include <cstdint>
#include <exception>
#include <optional>
#include <source_location>
#include <string>
#include <utility>

#include "averaging/hierarchical_state.hpp"
#include "averaging/mean.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "mpi/handles.hpp"
#include "paramwin/bound_layers.hpp"
#include "paramwin/error.hpp"

namespace paramwin {

namespace detail {

namespace {

std::string check_hierarchy(const AgentGroups& groups, const Layout& layout,
                            const AveragingOptions& options) {
  std::string bad = check_options(options, groups.agent(), groups.agents());
  if (!bad.empty()) {
    return bad;
  }
  if (options.window.memory != Memory::host) {
    return "paramwin: HierarchicalAveragingAgent: the in-group means run on the host; "
           "WindowOptions::memory must be host";
  }
  for (const LayerSpec& spec : layout.layers()) {
    if (spec.dtype != DType::float32 && spec.dtype != DType::float64) {
      return "paramwin: HierarchicalAveragingAgent: needs float32 or float64 layers; layer " +
             spec.describe() + " is not";
    }
  }
  return {};
}

/// LayoutMismatch on every training rank unless every rank has the same layout and wire.
void require_one_layout(MPI_Comm comm, const Layout& layout, WireFormat wire) {
  const std::array<std::uint64_t, 2> mine{layout.fingerprint(), static_cast<std::uint64_t>(wire)};
  std::array<std::uint64_t, 2> low{};
  std::array<std::uint64_t, 2> high{};
  check_mpi(MPI_Allreduce(mine.data(), low.data(), 2, MPI_UINT64_T, MPI_MIN, comm),
            "MPI_Allreduce");
  check_mpi(MPI_Allreduce(mine.data(), high.data(), 2, MPI_UINT64_T, MPI_MAX, comm),
            "MPI_Allreduce");
  if (low != high) {
    throw LayoutMismatch("paramwin: HierarchicalAveragingAgent: every training rank needs the "
                         "same layout and wire format, but they differ");
  }
}

/// The round's fields the leader broadcasts: a status (0 ok, 1 InvalidArgument, 2 another
/// exception) and the scalars of AveragingRound.
constexpr int kShared = 10;

std::array<double, kShared> pack(int status, const AveragingRound& r) {
  return {static_cast<double>(status),      static_cast<double>(r.kind),
          static_cast<double>(r.round),     r.applied ? 1.0 : 0.0,
          r.background_applied ? 1.0 : 0.0, r.self_weight,
          r.published ? 1.0 : 0.0,          static_cast<double>(r.version),
          static_cast<double>(r.bytes),     r.seconds};
}

AveragingRound unpack(const std::array<double, kShared>& v, int leader_rank) {
  AveragingRound r;
  r.kind = static_cast<RoundKind>(static_cast<int>(v[1]));
  r.round = static_cast<std::int64_t>(v[2]);
  r.applied = v[3] != 0.0;
  r.background_applied = v[4] != 0.0;
  r.self_weight = v[5];
  r.published = v[6] != 0.0;
  r.version = static_cast<std::uint64_t>(v[7]);
  r.bytes = static_cast<std::size_t>(v[8]);
  r.seconds = v[9];
  r.rank = leader_rank;
  r.note = "the round of this group's leader (rank " + std::to_string(leader_rank) +
           " across groups), broadcast";
  return r;
}

void broadcast(const BoundLayers<LayerRef>& params, MPI_Comm comm) {
  for (std::size_t l = 0; l < params.size(); ++l) {
    const LayerRef& ref = params[l];
    const int count = checked_int(ref.count(), "HierarchicalAveragingAgent: layer elements");
    check_mpi(MPI_Bcast(ref.data(), count, ref.dtype() == DType::float32 ? MPI_FLOAT : MPI_DOUBLE,
                        0, comm),
              "MPI_Bcast");
  }
}

}  // namespace

HierarchicalState::HierarchicalState(const AgentGroups& groups, Layout layout,
                                     AveragingOptions options, const std::source_location& site)
    : layout_(std::move(layout)) {
  if (!groups.is_agent_rank()) {
    throw InvalidArgument(std::string("paramwin: HierarchicalAveragingAgent: this rank is a ") +
                          std::string(role_name(groups.role())) +
                          " rank; only the training ranks of AgentGroups hold one");
  }
  training_ = Comm::dup(groups.training_comm());
  group_ = Comm::dup(groups.agent_comm());
  group_id_ = groups.agent();
  groups_ = groups.agents();
  rank_in_group_ = groups.rank_in_agent();
  group_size_ = group_.size();
  agree_or_throw<InvalidArgument>(training_.get(), check_hierarchy(groups, layout_, options));
  require_one_layout(training_.get(), layout_, options.window.wire);
  const bool leads = rank_in_group_ == 0;
  leaders_ = Comm::split(training_.get(), leads ? 0 : MPI_UNDEFINED, group_id_);
  std::string failed;
  if (leads) {
    try {
      across_.emplace(leaders_.get(), layout_, std::move(options), site);
    } catch (const std::exception& e) {  // thrown on every leader alike (it agrees)
      failed = e.what();
    }
  }
  agree_or_throw<Error>(training_.get(), failed);
}

BoundLayers<LayerRef> HierarchicalState::bind_agreed(std::span<const LayerRef> params,
                                                     const char* caller, MPI_Comm comm) const {
  std::string bad;
  BoundLayers<LayerRef> bound;
  try {
    bound = paramwin::bind(layout_, params, caller);
    for (const LayerRef& ref : bound.refs()) {
      if (!ref.host_accessible()) {
        throw InvalidArgument(std::string("paramwin: ") + caller + ": needs host memory");
      }
    }
  } catch (const InvalidArgument& e) {
    bad = e.what();
  }
  agree_or_throw<InvalidArgument>(comm, bad);
  return bound;
}

void HierarchicalState::group_mean(const BoundLayers<LayerRef>& params) const {
  if (group_size_ > 1) {
    allreduce_mean(params, group_.get(), group_size_, "HierarchicalAveragingAgent: layer elements");
  }
}

template <class F>
AveragingRound HierarchicalState::lead(const BoundLayers<LayerRef>& params, F&& across_step) {
  AveragingRound round;
  int status = 0;
  std::string what;
  if (across_) {
    try {
      round = std::forward<F>(across_step)(*across_);
    } catch (const InvalidArgument& e) {
      status = 1;
      what = e.what();
    } catch (const std::exception& e) {
      status = 2;
      what = e.what();
    }
  }
  std::array<double, kShared> shared = pack(status, round);
  check_mpi(MPI_Bcast(shared.data(), kShared, MPI_DOUBLE, 0, group_.get()), "MPI_Bcast");
  status = static_cast<int>(shared[0]);
  if (status == 1) {
    agree_or_throw<InvalidArgument>(group_.get(), what);
  } else if (status == 2) {
    agree_or_throw<Error>(group_.get(), what);
  }
  if (!across_) {
    round = unpack(shared, group_id_);  // the leader's rank across groups is the group id
  }
  if (round.applied && group_size_ > 1) {
    broadcast(params, group_.get());
  }
  return round;
}

}  // namespace detail

HierarchicalAveragingAgent::HierarchicalAveragingAgent(const AgentGroups& groups, Layout layout,
                                                       AveragingOptions options,
                                                       const std::source_location& site)
    : state_(std::make_unique<detail::HierarchicalState>(groups, std::move(layout),
                                                         std::move(options), site)) {}
HierarchicalAveragingAgent::HierarchicalAveragingAgent(
    HierarchicalAveragingAgent&& other) noexcept = default;
HierarchicalAveragingAgent& HierarchicalAveragingAgent::operator=(
    HierarchicalAveragingAgent&& other) noexcept = default;
HierarchicalAveragingAgent::~HierarchicalAveragingAgent() = default;

detail::HierarchicalState& HierarchicalAveragingAgent::state() const {
  if (!state_) {
    throw InvalidArgument("paramwin: HierarchicalAveragingAgent: used after being moved from");
  }
  return *state_;
}

HierarchicalRound HierarchicalAveragingAgent::step(std::span<const LayerRef> params) {
  detail::HierarchicalState& s = state();
  const BoundLayers<LayerRef> bound =
      s.bind_agreed(params, "HierarchicalAveragingAgent::step", s.group_.get());
  ++s.steps_;
  HierarchicalRound out{.group = s.group_id_, .group_size = s.group_size_};
  const double start = MPI_Wtime();
  s.group_mean(bound);
  out.group_seconds = MPI_Wtime() - start;
  out.across = s.lead(bound, [&](AveragingAgent& a) { return a.step(bound.refs()); });
  return out;
}

PublishResult HierarchicalAveragingAgent::publish(std::span<const ConstLayerRef> params) {
  detail::HierarchicalState& s = state();
  if (!s.across_) {
    static_cast<void>(paramwin::bind(s.layout_, params, "HierarchicalAveragingAgent::publish"));
    return {};
  }
  return s.across_->publish(params);
}

HierarchicalRound HierarchicalAveragingAgent::finish(std::span<const LayerRef> params) {
  detail::HierarchicalState& s = state();
  const BoundLayers<LayerRef> bound =
      s.bind_agreed(params, "HierarchicalAveragingAgent::finish", s.training_.get());
  HierarchicalRound out{.group = s.group_id_, .group_size = s.group_size_};
  const double start = MPI_Wtime();
  s.group_mean(bound);
  out.group_seconds = MPI_Wtime() - start;
  out.across = s.lead(bound, [&](AveragingAgent& a) { return a.finish(bound.refs()); });
  return out;
}

void HierarchicalAveragingAgent::pause() {
  detail::HierarchicalState& s = state();
  s.paused_ = true;
  if (s.across_) {
    s.across_->pause();
  }
}

void HierarchicalAveragingAgent::resume() {
  detail::HierarchicalState& s = state();
  s.paused_ = false;
  if (s.across_) {
    s.across_->resume();
  }
}

bool HierarchicalAveragingAgent::is_paused() const { return state().paused_; }
int HierarchicalAveragingAgent::group() const { return state().group_id_; }
int HierarchicalAveragingAgent::groups() const { return state().groups_; }
int HierarchicalAveragingAgent::rank_in_group() const { return state().rank_in_group_; }
int HierarchicalAveragingAgent::group_size() const { return state().group_size_; }
bool HierarchicalAveragingAgent::leader() const { return state().rank_in_group_ == 0; }
std::int64_t HierarchicalAveragingAgent::steps() const { return state().steps_; }
const Layout& HierarchicalAveragingAgent::layout() const { return state().layout_; }

AveragingAgent& HierarchicalAveragingAgent::across() {
  detail::HierarchicalState& s = state();
  if (!s.across_) {
    throw InvalidArgument("paramwin: HierarchicalAveragingAgent::across: rank " +
                          std::to_string(s.rank_in_group_) + " of group " +
                          std::to_string(s.group_id_) + " is not its leader");
  }
  return *s.across_;
}

}  // namespace paramwin
