// RebirthPlan: the planner shared by Agent and GroupAgent, and the plan's wire form.
#include "decision/rebirth_plan.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <type_traits>

#include "paramwin/error.hpp"
#include "paramwin/event.hpp"

namespace paramwin::detail {

namespace {

/// The wire form's fixed head. Every field is one int64 word, so the head is an array of
/// words with names; the per-donor blocks follow (donors, then weights, metrics, staleness
/// as the bits of doubles), each `capacity` words long.
struct WireHead {
  std::int64_t version;
  std::int64_t action;
  std::int64_t reason;
  std::int64_t publish_due;
  std::int64_t donor_error;
  std::int64_t steps;
  std::int64_t age;
  std::int64_t max_age;
  std::int64_t generation;
  std::int64_t reset_seed;
  std::int64_t weighted;
  std::int64_t donors;
};
// Bump when the head or the blocks change: a rank that receives another version refuses it.
constexpr std::int64_t kWireVersion = 1;
constexpr std::size_t kHeadWords = sizeof(WireHead) / sizeof(std::int64_t);
static_assert(std::is_trivially_copyable_v<WireHead>);
static_assert(sizeof(WireHead) == 12 * sizeof(std::int64_t), "one int64 word per head field");
constexpr std::size_t kBlocks = 4;  // donors, weights, metrics, staleness

double staleness_of(std::span<const RosterEntry> rosters, int rank, double now) {
  for (const RosterEntry& e : rosters) {
    if (e.rank == rank) return staleness_seconds(e, now);
  }
  return 0.0;
}

void choose_donors(Policy& policy, const PlanInput& in, const Policy::RosterReader& read,
                   RebirthPlan& plan) {
  std::vector<RosterEntry> rosters = read();
  // The roster holds this agent's previous report until the step ends: truncation ranks it
  // with the metric this step judged, as the trigger did (and Ray Tune does).
  for (RosterEntry& e : rosters) {
    if (e.rank == policy.rank()) {
      e.status.iteration = in.iteration;
      e.status.metric = in.metric;
    }
  }
  const double now = in.now();
  const DonorChoice choice = policy.select_donors(rosters, in.fingerprint, in.exclude, now);
  if (choice.ranks.empty()) {
    plan.action = PlanAction::defer;
    plan.note = choice.shortfall;
    return;
  }
  if (!choice.shortfall.empty()) plan.note = "clamped: " + choice.shortfall;
  plan.action = PlanAction::pull;
  plan.donors = choice.ranks;  // best first
  const MixingKind kind = policy.options().mixing.kind;
  if (kind == MixingKind::best) {
    plan.donors.resize(1);
  } else if (kind == MixingKind::weighted) {
    plan.weights = policy.mixing_weights(choice.metrics);
  }
  plan.metrics.assign(choice.metrics.begin(),
                      choice.metrics.begin() + static_cast<std::ptrdiff_t>(plan.donors.size()));
  for (const int d : plan.donors) plan.staleness.push_back(staleness_of(rosters, d, now));
}

}  // namespace

std::size_t RebirthPlan::wire_words(std::size_t capacity) noexcept {
  return kHeadWords + kBlocks * capacity;
}

std::vector<std::int64_t> RebirthPlan::to_wire(std::size_t capacity) const {
  if (donors.size() > capacity) {
    throw InvalidArgument("paramwin: RebirthPlan::to_wire: " + std::to_string(donors.size()) +
                          " donors do not fit a plan for " + std::to_string(capacity) + " agents");
  }
  const WireHead head{.version = kWireVersion,
                      .action = static_cast<std::int64_t>(action),
                      .reason = static_cast<std::int64_t>(reason),
                      .publish_due = publish_due ? 1 : 0,
                      .donor_error = donor_error ? 1 : 0,
                      .steps = counters.steps,
                      .age = counters.age,
                      .max_age = counters.max_age,
                      .generation = static_cast<std::int64_t>(counters.generation),
                      .reset_seed = static_cast<std::int64_t>(reset_seed),
                      .weighted = weights.empty() ? 0 : 1,
                      .donors = static_cast<std::int64_t>(donors.size())};
  std::vector<std::int64_t> words(wire_words(capacity), 0);
  const auto head_words = std::bit_cast<std::array<std::int64_t, kHeadWords>>(head);
  std::copy(head_words.begin(), head_words.end(), words.begin());
  const auto block = [&](std::size_t b, std::size_t i) -> std::int64_t& {
    return words[kHeadWords + b * capacity + i];
  };
  for (std::size_t i = 0; i < donors.size(); ++i) {
    block(0, i) = donors[i];
    block(1, i) = std::bit_cast<std::int64_t>(weights.empty() ? 1.0 : weights[i]);
    block(2, i) = std::bit_cast<std::int64_t>(i < metrics.size() ? metrics[i] : 0.0);
    block(3, i) = std::bit_cast<std::int64_t>(i < staleness.size() ? staleness[i] : 0.0);
  }
  return words;
}

RebirthPlan RebirthPlan::from_wire(std::span<const std::int64_t> words) {
  if (words.size() < kHeadWords || (words.size() - kHeadWords) % kBlocks != 0) {
    throw Error("paramwin: RebirthPlan::from_wire: a message of " + std::to_string(words.size()) +
                " words is no plan");
  }
  std::array<std::int64_t, kHeadWords> head_words{};
  std::copy_n(words.begin(), kHeadWords, head_words.begin());
  const auto head = std::bit_cast<WireHead>(head_words);
  const std::size_t capacity = (words.size() - kHeadWords) / kBlocks;
  if (head.version != kWireVersion) {
    throw Error("paramwin: RebirthPlan::from_wire: plan version " + std::to_string(head.version) +
                ", this library speaks version " + std::to_string(kWireVersion));
  }
  if (head.donors < 0 || static_cast<std::size_t>(head.donors) > capacity || head.action < 0 ||
      head.action > static_cast<std::int64_t>(PlanAction::error)) {
    throw Error("paramwin: RebirthPlan::from_wire: malformed plan (action " +
                std::to_string(head.action) + ", " + std::to_string(head.donors) + " donors)");
  }
  RebirthPlan plan;
  plan.action = static_cast<PlanAction>(head.action);
  plan.reason = static_cast<DeathReason>(head.reason);
  plan.publish_due = head.publish_due != 0;
  plan.donor_error = head.donor_error != 0;
  plan.counters = AgentCounters{.steps = head.steps,
                                .age = head.age,
                                .max_age = head.max_age,
                                .generation = static_cast<std::uint64_t>(head.generation)};
  plan.reset_seed = static_cast<std::uint64_t>(head.reset_seed);
  const auto block = [&](std::size_t b, std::size_t i) {
    return words[kHeadWords + b * capacity + i];
  };
  for (std::size_t i = 0; i < static_cast<std::size_t>(head.donors); ++i) {
    plan.donors.push_back(static_cast<int>(block(0, i)));
    if (head.weighted != 0) plan.weights.push_back(std::bit_cast<double>(block(1, i)));
    plan.metrics.push_back(std::bit_cast<double>(block(2, i)));
    plan.staleness.push_back(std::bit_cast<double>(block(3, i)));
  }
  return plan;
}

RebirthPlan plan_rebirth(Policy& policy, const PlanInput& in) {
  // Every roster read of the step also feeds the policy's model-based explore (PB2).
  Policy::RosterReader read;
  if (in.rosters) {
    read = [&policy, &in] {
      std::vector<RosterEntry> rosters = in.rosters();
      policy.observe(rosters, in.fingerprint);
      return rosters;
    };
  }
  RebirthPlan plan;
  plan.reason = in.first_attempt ? policy.decide(in.iteration, in.metric, read, in.fingerprint)
                                 : policy.pending();
  plan.publish_due = in.first_attempt && in.publish_due;
  plan.counters = AgentCounters{.steps = policy.steps(),
                                .age = policy.age(),
                                .max_age = policy.max_age(),
                                .generation = policy.generation()};
  if (plan.reason == DeathReason::none) return plan;
  if (in.hold_deaths) {
    // Paused with PausedDeaths::defer: the policy keeps the death pending until resumed.
    plan.action = PlanAction::defer;
    plan.note = "paused";
    return plan;
  }
  if (policy.options().mixing.kind == MixingKind::reset) {
    plan.action = PlanAction::reset;
    plan.reset_seed = policy.next_reset_seed();
    return plan;
  }
  choose_donors(policy, in, read, plan);
  return plan;
}

PullOptions pull_options(const RebirthPlan& plan, const MixingOptions& mixing,
                         const ReadOptions& read, double timeout_seconds) {
  PullOptions po;
  po.momentum = mixing.momentum;
  po.non_finite = mixing.non_finite;
  po.read_mode = read.read_mode;
  po.optimistic_attempts = read.optimistic_attempts;
  po.chunk_bytes = read.chunk_bytes;
  po.timeout_seconds = timeout_seconds;
  if (!plan.weights.empty()) {
    po.reduction = Reduction::weighted;
    po.weights = plan.weights;
  }
  return po;
}

std::vector<DonorRecord> donor_records(const RebirthPlan& plan, const PullResult& result) {
  std::vector<DonorRecord> records;
  records.reserve(result.donors.size());
  for (std::size_t i = 0; i < result.donors.size(); ++i) {
    const DonorRead& d = result.donors[i];
    records.push_back(
        DonorRecord{.rank = d.rank,
                    .version = d.version,
                    .metric = d.metric,
                    .weight = d.weight,
                    .bytes = d.bytes,
                    .transport = d.transport,
                    .skipped = d.skipped,
                    .staleness_seconds = i < plan.staleness.size() ? plan.staleness[i] : 0.0});
  }
  return records;
}

void append_note(std::string& note, const std::string& piece) {
  if (piece.empty()) return;
  if (!note.empty()) note += "; ";
  note += piece;
}

}  // namespace paramwin::detail
