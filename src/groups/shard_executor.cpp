// ShardExecutor: a GroupAgent's rebirth, shard by shard (see shard_executor.hpp).
#include "groups/shard_executor.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "detail/cuda.hpp"
#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

namespace {

using Clock = StepClock;

constexpr std::size_t kMaxBcastBytes = std::size_t{1} << 30;  // per broadcast, below INT_MAX
// Times the ranks that read an older publish of a donor agent read again, in one attempt.
constexpr int kShardRereads = 3;

// Where each layer of @p layout starts in one buffer holding them all, each at a 64-byte
// boundary; the last entry is the buffer's size.
std::vector<std::size_t> padded_offsets(const Layout& layout) {
  std::vector<std::size_t> off;
  std::size_t at = 0;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    off.push_back(at);
    at += (layout[l].count * dtype_size(layout[l].dtype) + 63) / 64 * 64;
  }
  off.push_back(at);
  return off;
}

// Copies @p n bytes: memcpy between host memory, CUDA when either side is device memory.
void copy_bytes(void* dst, const void* src, std::size_t n, bool device) {
  if (device) {
    cuda::copy_blocking(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace

ShardExecutor::ShardExecutor(const AgentGroups& groups, Layout layout)
    : plan_(std::move(layout), groups.agent_size()),
      agent_(groups.agent()),
      agents_(groups.agents()),
      rank_in_agent_(groups.rank_in_agent()),
      g_(groups.agent_size()) {}

void ShardExecutor::open(const AgentGroups& groups, const WindowOptions& window_options,
                         const std::source_location& site) {
  agent_comm_ = Comm::dup(groups.agent_comm());
  const Comm node = Comm::split_shared(agent_comm_.get());
  // PARAMWIN_GROUP_GATHER=broadcast forces the path agents spread over nodes take (tests).
  const char* force = std::getenv("PARAMWIN_GROUP_GATHER");
  const bool broadcast = force != nullptr && std::string(force) == "broadcast";
  const bool all_local = node.size() == g_ && !broadcast;
  same_node_ = first_failing_rank(agent_comm_.get(), all_local) < 0 && g_ > 1;
  window_.emplace(groups.shard_comm(), plan_.shard_layout(rank_in_agent_), window_options, site);
  fingerprint_ = win().fingerprint();
  device_ = win().options().memory == Memory::cuda;
}

void ShardExecutor::check_params(std::span<const LayerRef> ordered) const {
  for (const LayerRef& r : ordered) {
    if (!r.contiguous() || r.host_accessible() == device_) {
      throw InvalidArgument(
          "paramwin: GroupAgent::step: layer \"" + std::string(r.name()) + "\" must be " +
          (device_ ? "contiguous device memory (paramwin::device_memory): this GroupAgent's "
                     "window is a device window (Memory::cuda)"
                   : "contiguous host memory: this GroupAgent's window holds host memory "
                     "(WindowOptions::memory = Memory::cuda for device memory)"));
    }
  }
}

StepAgreement ShardExecutor::agree(const std::string& local_error, double metric,
                                   bool publish_pending, bool paused) {
  // The bad-input agreement (detail::agree_or_throw's question) rides on the allreduce every
  // step needs anyway for the agent's metric, pending publishes and pause: one collective a
  // step.
  double in[4] = {local_error.empty() ? 0.0 : 1.0, metric, publish_pending ? 1.0 : 0.0,
                  paused ? 1.0 : 0.0};
  double sum[4] = {};
  check_mpi(MPI_Allreduce(in, sum, 4, MPI_DOUBLE, MPI_SUM, agent_comm_.get()),
            "MPI_Allreduce(step)");
  if (sum[0] > 0.0) {
    throw InvalidArgument(!local_error.empty()
                              ? local_error
                              : "paramwin: GroupAgent::step: another rank of agent " +
                                    std::to_string(agent_) +
                                    " passed bad parameters (see its error)");
  }
  const int paused_ranks = static_cast<int>(sum[3]);
  if (paused_ranks != 0 && paused_ranks != g_) {
    // Each rank advertises the pause in its own shard's roster: half-paused, readers of
    // different shards would disagree about the agent.
    throw InvalidArgument("paramwin: GroupAgent::step: agent " + std::to_string(agent_) +
                          " is paused on " + std::to_string(paused_ranks) + " of its " +
                          std::to_string(g_) +
                          " ranks (this rank: " + (paused ? "paused" : "not paused") +
                          "); call pause() and resume() on every rank of the agent");
  }
  return StepAgreement{.metric = sum[1] / g_,
                       .any_publish_pending = sum[2] > 0.0,
                       .paused = paused_ranks == g_};
}

RebirthPlan ShardExecutor::share(RebirthPlan plan, std::exception_ptr leader_error) {
  const auto capacity = static_cast<std::size_t>(agents_);
  std::vector<std::int64_t> words =
      leader() ? plan.to_wire(capacity)
               : std::vector<std::int64_t>(RebirthPlan::wire_words(capacity), 0);
  check_mpi(MPI_Bcast(words.data(), static_cast<int>(words.size()), MPI_INT64_T, 0,
                      agent_comm_.get()),
            "MPI_Bcast(plan)");
  RebirthPlan shared = RebirthPlan::from_wire(words);
  if (shared.action == PlanAction::error) {
    // The leader's custom trigger, roster read or donor selection threw: it rethrows; the
    // others throw too, so that nobody waits in a collective the leader will not enter.
    if (leader_error) std::rethrow_exception(leader_error);
    const std::string msg = "paramwin: GroupAgent::step: the leader of agent " +
                            std::to_string(agent_) + " failed to decide (see its error)";
    if (shared.donor_error) throw DonorError(-1, msg);
    throw Error(msg);
  }
  shared.note = std::move(plan.note);  // the leader's; not on the wire
  return shared;
}

void ShardExecutor::share_reset(std::span<const LayerRef> ordered,
                                std::exception_ptr leader_error) {
  int ok = leader_error ? 0 : 1;
  check_mpi(MPI_Bcast(&ok, 1, MPI_INT, 0, agent_comm_.get()), "MPI_Bcast(reset)");
  if (ok == 0) {
    if (leader_error) std::rethrow_exception(leader_error);
    throw Error("paramwin: GroupAgent::step: the reset callback of agent " +
                std::to_string(agent_) + " failed on its leader (see its error)");
  }
  // A device window: the leader's reset layers travel through the host image.
  std::vector<LayerRef> image;
  if (device_) image = host_image(ordered, leader());
  const std::span<const LayerRef> target = device_ ? std::span<const LayerRef>(image) : ordered;
  std::vector<Block> all;
  for (int s = 0; s < g_; ++s) {
    const std::vector<Block> b = blocks_of(s, target);
    all.insert(all.end(), b.begin(), b.end());
  }
  broadcast_blocks(all, 0);
  if (device_) store_image(ordered);
}

PullOutcome ShardExecutor::pull(const RebirthPlan& plan, const PullOptions& po,
                                const BoundLayers<LayerRef>& bound, StepEvent& event) {
  const std::span<const LayerRef> ordered = bound.refs();
  const std::size_t n = plan.donors.size();
  // One rank per agent: nothing to agree on or gather, and the window's pull is itself
  // transactional, so it writes straight into the caller's layers.
  // Library-made refs in the shard layout's order: bound by construction.
  const BoundLayers<LayerRef> scratch =
      BoundLayersAccess::make(g_ == 1 ? std::vector<LayerRef>(ordered.begin(), ordered.end())
                                      : scratch_refs(ordered),
                              win().layout().fingerprint());
  const std::size_t words = ShardOutcomes::words(n);
  std::vector<std::int64_t> out(words, 0);
  std::vector<std::int64_t> all(words * static_cast<std::size_t>(g_));
  const ShardOutcomes outcomes(all, n, g_);
  std::string pull_error;
  bool partial = false;  // only the caller's layers matter: g > 1 pulls into the scratch
  PullResult result;
  PullOutcome v;
  // A donor agent that keeps training publishes its shards one rank at a time, so the
  // agent's ranks may read two of its publishes. Then the ranks that read an older publish
  // read again, up to kShardRereads times, before the mix is refused (and the attempt
  // retried with a fresh plan): read right away, they mostly meet the publish the others saw.
  for (int round = 0;; ++round) {
    const auto t = Clock::now();
    if (round == 0 || outcomes.lagging(rank_in_agent_)) {
      pull_shard(plan, po, ordered, scratch, out, result, pull_error, partial);
    }
    if (scratch_win_) {
      check_mpi(MPI_Win_sync(scratch_win_.get()), "MPI_Win_sync(scratch)");  // before the allgather
    }
    check_mpi(MPI_Allgather(out.data(), static_cast<int>(words), MPI_INT64_T, all.data(),
                            static_cast<int>(words), MPI_INT64_T, agent_comm_.get()),
              "MPI_Allgather(pull outcomes)");
    v = verdict(outcomes, plan.donors, pull_error);
    event.seconds.pull += seconds_since(t);
    if (v.ok || round == kShardRereads || !outcomes.only_stamps_differ()) break;
  }
  if (!v.ok) {
    v.partial = partial;  // g == 1: this rank is the whole agent
    return v;
  }

  event.donors = donor_records(plan, result);
  std::size_t bytes = 0;
  for (int r = 0; r < g_; ++r)
    bytes += static_cast<std::size_t>(all[static_cast<std::size_t>(r) * words + 2]);
  for (std::size_t i = 0; i < n; ++i) {
    // Donors are agents: their version is the group publish stamp all shards carried.
    DonorRecord& d = event.donors[i];
    d.version = result.donors[i].stamp;
    d.metric = plan.metrics[i];
    d.bytes *= static_cast<std::size_t>(g_);
  }
  event.bytes = bytes;
  PullOutcome outcome = v;
  if (leader()) record_donor_hyper(result, outcome);
  if (g_ > 1) {
    const auto ta = Clock::now();
    assemble(ordered);
    event.seconds.assemble += seconds_since(ta);
  }
  return outcome;
}

void ShardExecutor::pull_shard(const RebirthPlan& plan, const PullOptions& po,
                               std::span<const LayerRef> ordered,
                               const BoundLayers<LayerRef>& scratch, std::vector<std::int64_t>& out,
                               PullResult& result, std::string& error, bool& partial) {
  const std::size_t n = plan.donors.size();
  std::fill(out.begin(), out.end(), 0);
  error.clear();
  partial = false;
  try {
    if (po.momentum > 0.0 && g_ > 1) start_from_current(ordered, scratch.refs());
    result = win().pull(plan.donors, scratch, po);
    out[0] = 1;
    out[1] = -1;
    out[2] = static_cast<std::int64_t>(result.bytes);
    for (std::size_t i = 0; i < n; ++i) {
      out[3 + i] = static_cast<std::int64_t>(result.donors[i].stamp);
      out[3 + n + i] = result.donors[i].skipped ? 1 : 0;
    }
  } catch (const DonorError& e) {
    out[1] = e.rank();
    error = e.what();
    partial = g_ == 1 && dynamic_cast<const PartialPullError*>(&e) != nullptr;
  }
  if (device_ && g_ > 1 && out[0] == 1) {
    // The own shard, pulled into the device scratch, out to the host scratch the agent's
    // ranks exchange (before the allgather that lets them read it).
    try {
      cuda::copy_blocking(scratch_, device_scratch_.get(), scratch_offset_.back());
    } catch (const std::exception& e) {
      out[0] = 0;
      out[1] = -1;
      error =
          std::string("paramwin: GroupAgent: copying the pulled shard to the host: ") + e.what();
    }
  }
}

// Every rank sees the same table of outcomes and reaches the same verdict.
PullOutcome ShardExecutor::verdict(const ShardOutcomes& outcomes, std::span<const int> donors,
                                   const std::string& own_error) const {
  for (int r = 0; r < g_; ++r) {
    const std::int64_t* o = outcomes.row(r);
    if (o[0] == 0) {
      const int failed = static_cast<int>(o[1]);
      return PullOutcome{.ok = false,
                         .blame = failed,
                         .retry = true,
                         .why = "in-agent rank " + std::to_string(r) + " could not pull its shard" +
                                (failed >= 0 ? " from donor agent " + std::to_string(failed)
                                             : std::string()) +
                                (r == rank_in_agent_ ? ": " + own_error : std::string())};
    }
  }
  for (std::size_t i = 0; i < donors.size(); ++i) {
    for (int r = 1; r < g_; ++r) {
      if (outcomes.stamp(r, i) != outcomes.stamp(0, i) ||
          outcomes.skipped(r, i) != outcomes.skipped(0, i)) {
        return PullOutcome{.ok = false,
                           .blame = -1,
                           .retry = true,
                           .why = "donor agent " + std::to_string(donors[i]) +
                                  ": its shards came from different publishes (stamps " +
                                  std::to_string(outcomes.stamp(0, i)) + " and " +
                                  std::to_string(outcomes.stamp(r, i)) + ") or one was skipped"};
      }
    }
  }
  return PullOutcome{.ok = true};
}

AgentCounters ShardExecutor::share_rebirth(const AgentCounters& leader_counters,
                                           Hyperparameters& hyper,
                                           std::exception_ptr leader_error) {
  // One broadcast: an ok flag, the counters, then the hyperparameters' words.
  const std::size_t nh = hyper.size();
  std::vector<std::int64_t> w(5 + nh, 0);
  w[0] = leader_error ? 0 : 1;
  w[1] = leader_counters.steps;
  w[2] = leader_counters.age;
  w[3] = leader_counters.max_age;
  w[4] = static_cast<std::int64_t>(leader_counters.generation);
  for (std::size_t i = 0; i < nh; ++i) w[5 + i] = std::bit_cast<std::int64_t>(hyper.words()[i]);
  check_mpi(MPI_Bcast(w.data(), static_cast<int>(w.size()), MPI_INT64_T, 0, agent_comm_.get()),
            "MPI_Bcast(rebirth)");
  if (w[0] == 0) {
    if (leader_error) std::rethrow_exception(leader_error);
    throw Error("paramwin: GroupAgent::step: the explore step of agent " + std::to_string(agent_) +
                " failed on its leader (see its error)");
  }
  for (std::size_t i = 0; i < nh; ++i) hyper.words()[i] = std::bit_cast<std::uint64_t>(w[5 + i]);
  return AgentCounters{.steps = w[1],
                       .age = w[2],
                       .max_age = w[3],
                       .generation = static_cast<std::uint64_t>(w[4])};
}

PublishResult ShardExecutor::publish(const BoundLayers<ConstLayerRef>& ordered,
                                     const Hyperparameters& hyper) {
  // This rank's shard of each layer, in the shard layout's order: bound by construction.
  return win().publish(BoundLayersAccess::make(shard_of(ordered.refs()),
                                               win().layout().fingerprint()),
                       hyper, epoch_);
}

std::vector<ConstLayerRef> ShardExecutor::shard_of(std::span<const ConstLayerRef> full) const {
  std::vector<ConstLayerRef> refs;
  refs.reserve(full.size());
  const Layout& layout = plan_.full();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const std::size_t esize = dtype_size(layout[l].dtype);
    const auto* base = static_cast<const std::byte*>(full[l].data());
    refs.emplace_back(std::string_view{}, base + plan_.first(l, rank_in_agent_) * esize,
                      plan_.count(l, rank_in_agent_), layout[l].dtype, full[l].host_accessible());
  }
  return refs;
}

// Momentum mixes into the current shard: the scratch starts from it.
void ShardExecutor::start_from_current(std::span<const LayerRef> ordered,
                                       std::span<const LayerRef> scratch) {
  const std::vector<ConstLayerRef> cur = shard_of(const_refs(ordered));
  for (std::size_t l = 0; l < cur.size(); ++l) {
    if (cur[l].count() == 0) continue;  // an empty layer's data() may be null
    copy_bytes(scratch[l].data(), cur[l].data(), cur[l].count() * dtype_size(cur[l].dtype()),
               device_);
  }
}

std::vector<std::size_t> ShardExecutor::offsets_of(int s) const {
  return padded_offsets(plan_.shard_layout(s));
}

// Allocates the scratch on first use (a device window's also on device @p ordinal). Every rank of
// the agent reaches the first rebirth pull together, so the shared window's collective creation is
// safe here.
void ShardExecutor::ensure_scratch(int ordinal) {
  if (scratch_ != nullptr) return;
  scratch_offset_ = offsets_of(rank_in_agent_);
  const std::size_t bytes = std::max<std::size_t>(scratch_offset_.back(), 64);
  std::string error;
  if (device_) {
    try {
      device_scratch_ = {cuda::allocate(bytes, ordinal), cuda::release};
    } catch (const std::exception& e) {
      error = std::string("paramwin: GroupAgent: the device scratch of a rebirth: ") + e.what();
    }
  }
  if (!same_node_) {
    private_scratch_.resize(bytes);
    scratch_ = private_scratch_.data();
  } else {
    void* base = nullptr;
    scratch_win_ =
        Win::allocate_shared_locked(static_cast<MPI_Aint>(bytes), agent_comm_.get(), &base);
    peer_scratch_.assign(static_cast<std::size_t>(g_), nullptr);
    for (int r = 0; r < g_; ++r) {
      peer_scratch_[static_cast<std::size_t>(r)] =
          static_cast<std::byte*>(scratch_win_.shared_query(r));
    }
    scratch_ = peer_scratch_[static_cast<std::size_t>(rank_in_agent_)];
  }
  if (!device_) return;
  try {
    agree_or_throw<Error>(agent_comm_.get(), error);  // on every rank of the agent
  } catch (...) {
    // Undone alike on every rank (freeing the shared scratch is collective): the next
    // rebirth tries again.
    device_scratch_.reset();
    scratch_win_ = Win();
    peer_scratch_.clear();
    private_scratch_.clear();
    scratch_ = nullptr;
    throw;
  }
}

std::vector<LayerRef> ShardExecutor::scratch_refs(std::span<const LayerRef> ordered) {
  if (scratch_ == nullptr) {
    // A device window's scratch goes on the device of the caller's layers.
    int ordinal = -1;
    for (const LayerRef& r : ordered) {
      if (device_ && ordinal < 0 && r.count() > 0) ordinal = cuda::classify(r.data()).ordinal;
    }
    if (device_ && ordinal < 0) ordinal = cuda::current_device();
    ensure_scratch(ordinal);
  }
  const Layout& shard = plan_.shard_layout(rank_in_agent_);
  auto* base = device_ ? static_cast<std::byte*>(device_scratch_.get()) : scratch_;
  std::vector<LayerRef> refs;
  for (std::size_t l = 0; l < shard.size(); ++l) {
    refs.emplace_back(std::string_view{}, base + scratch_offset_[l], shard[l].count, shard[l].dtype,
                      !device_);
  }
  return refs;
}

std::vector<LayerRef> ShardExecutor::host_image(std::span<const LayerRef> ordered, bool fill) {
  const Layout& full = plan_.full();
  if (image_offset_.empty()) {
    image_offset_ = padded_offsets(full);
    image_.resize(std::max<std::size_t>(image_offset_.back(), 64));
  }
  std::vector<LayerRef> refs;
  for (std::size_t l = 0; l < full.size(); ++l) {
    refs.emplace_back(std::string_view{}, image_.data() + image_offset_[l], full[l].count,
                      full[l].dtype);
    if (fill && full[l].count > 0) {
      cuda::copy_blocking(refs.back().data(), ordered[l].data(),
                          full[l].count * dtype_size(full[l].dtype));
    }
  }
  return refs;
}

void ShardExecutor::store_image(std::span<const LayerRef> ordered) const {
  const Layout& full = plan_.full();
  for (std::size_t l = 0; l < full.size(); ++l) {
    const std::size_t n = full[l].count * dtype_size(full[l].dtype);
    if (n > 0) cuda::copy_blocking(ordered[l].data(), image_.data() + image_offset_[l], n);
  }
}

std::vector<ShardExecutor::Block> ShardExecutor::blocks_of(
    int s, std::span<const LayerRef> ordered) const {
  std::vector<Block> blocks;
  const Layout& full = plan_.full();
  for (std::size_t l = 0; l < full.size(); ++l) {
    const std::size_t esize = dtype_size(full[l].dtype);
    const std::size_t n = plan_.count(l, s) * esize;
    if (n == 0) continue;
    blocks.push_back({static_cast<std::byte*>(ordered[l].data()) + plan_.first(l, s) * esize, n});
  }
  return blocks;
}

void ShardExecutor::copy_shard(int s, const std::byte* src,
                               std::span<const LayerRef> ordered) const {
  const std::vector<std::size_t> off = offsets_of(s);
  const Layout& full = plan_.full();
  for (std::size_t l = 0; l < full.size(); ++l) {
    const std::size_t esize = dtype_size(full[l].dtype);
    const std::size_t n = plan_.count(l, s) * esize;
    if (n == 0) continue;
    std::memcpy(static_cast<std::byte*>(ordered[l].data()) + plan_.first(l, s) * esize,
                src + off[l], n);
  }
}

// Every rank's scratch shard into every rank's layers. Called after the outcome allgather,
// which every rank entered after writing its scratch: the shards are complete. The next
// write to any scratch comes after the next step's allreduce, which no rank passes before
// every rank has finished copying here.
void ShardExecutor::assemble(std::span<const LayerRef> ordered) {
  // A device window assembles the replica in the host image, then copies it in.
  std::vector<LayerRef> image;
  if (device_) image = host_image(ordered, false);  // every element comes from some shard
  const std::span<const LayerRef> target = device_ ? std::span<const LayerRef>(image) : ordered;
  if (same_node_) {
    check_mpi(MPI_Win_sync(scratch_win_.get()), "MPI_Win_sync(scratch)");
    for (int s = 0; s < g_; ++s) copy_shard(s, peer_scratch_[static_cast<std::size_t>(s)], target);
  } else {
    copy_shard(rank_in_agent_, scratch_, target);
    for (int s = 0; s < g_; ++s) broadcast_blocks(blocks_of(s, target), s);
  }
  if (device_) store_image(ordered);
}

// Broadcasts @p blocks (same sizes on every rank, the root's contents win) over the agent,
// as few MPI_Bcast calls of one hindexed datatype each as the 1 GiB cap allows.
void ShardExecutor::broadcast_blocks(const std::vector<Block>& blocks, int root) const {
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
    Datatype type;
    check_mpi(MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(), addrs.data(),
                                       MPI_BYTE, type.out()),
              "MPI_Type_create_hindexed");
    check_mpi(MPI_Type_commit(type.out()), "MPI_Type_commit");
    check_mpi(MPI_Bcast(MPI_BOTTOM, 1, type.get(), root, agent_comm_.get()), "MPI_Bcast(shard)");
  }
}

}  // namespace paramwin::detail
