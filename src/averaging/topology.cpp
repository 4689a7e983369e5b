// Topologies of averaging rounds (which peers a round reads) and the checks of
// AveragingOptions: no MPI, every rank can evaluate them for itself.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "paramwin/averaging.hpp"

namespace paramwin {

namespace {

/// SplitMix64: the seeded stream of TopologyKind::random (portable, unlike std's
/// distributions, so that a topology is the same on every standard library).
std::uint64_t splitmix64(std::uint64_t& state) {
  state += std::uint64_t{0x9E3779B97F4A7C15};
  std::uint64_t z = state;
  z = (z ^ (z >> 30U)) * std::uint64_t{0xBF58476D1CE4E5B9};
  z = (z ^ (z >> 27U)) * std::uint64_t{0x94D049BB133111EB};
  return z ^ (z >> 31U);
}

std::vector<int> others(int rank, int size) {
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(std::max(size - 1, 0)));
  for (int r = 0; r < size; ++r) {
    if (r != rank) {
      out.push_back(r);
    }
  }
  return out;
}

/// k distinct other ranks: a partial Fisher-Yates shuffle driven by a stream that depends only
/// on (seed, rank, round).
std::vector<int> draw_random(std::uint64_t seed, int k, std::int64_t round, int rank, int size) {
  std::vector<int> pool = others(rank, size);
  std::uint64_t state = seed;
  (void)splitmix64(state);
  state ^= static_cast<std::uint64_t>(rank) * std::uint64_t{0xD1B54A32D192ED03};
  (void)splitmix64(state);
  state ^= static_cast<std::uint64_t>(round) * std::uint64_t{0x8CB92BA72F3D8DD7};
  const std::size_t take = std::min(pool.size(), static_cast<std::size_t>(std::max(k, 0)));
  for (std::size_t i = 0; i < take; ++i) {
    const std::size_t left = pool.size() - i;
    const std::size_t j = i + static_cast<std::size_t>(splitmix64(state) % left);
    std::swap(pool[i], pool[j]);
  }
  pool.resize(take);
  return pool;
}

std::vector<int> ring_of(int rank, int size) {
  if (size <= 1) {
    return {};
  }
  if (size == 2) {
    return {1 - rank};
  }
  return {(rank + size - 1) % size, (rank + 1) % size};
}

std::vector<int> exponential_of(std::int64_t round, int rank, int size) {
  if (size <= 1) {
    return {};
  }
  std::int64_t hops = 0;  // number of i with 2^i < size
  while ((std::int64_t{1} << hops) < size) {
    ++hops;
  }
  const std::int64_t i = ((round % hops) + hops) % hops;
  return {static_cast<int>((rank + (std::int64_t{1} << i)) % size)};
}

std::string number(double value) {
  std::string text = std::to_string(value);
  return text;
}

/// The weights' checks: ranges, self_weight given with peer_weights, the sum.
std::string check_weights(const AveragingOptions& o) {
  const bool self_given = !std::isnan(o.self_weight);
  const bool scaled = o.normalize_weights && !o.peer_weights.empty();
  if (self_given &&
      (!std::isfinite(o.self_weight) || o.self_weight < 0.0 || (!scaled && o.self_weight >= 1.0))) {
    return "AveragingOptions::self_weight must be in [0, 1) (got " + number(o.self_weight) + ")";
  }
  if (o.peer_weights.empty()) {
    return {};
  }
  if (!self_given) {
    return "AveragingOptions::peer_weights need AveragingOptions::self_weight (the weights of a "
           "round are self_weight and peer_weights, summing to 1)";
  }
  for (std::size_t i = 0; i < o.peer_weights.size(); ++i) {
    const double w = o.peer_weights[i];
    if (!std::isfinite(w) || w < 0.0) {
      return "AveragingOptions::peer_weights[" + std::to_string(i) +
             "] must be finite and >= 0 (got " + number(w) + ")";
    }
  }
  const double sum = std::accumulate(o.peer_weights.begin(), o.peer_weights.end(), o.self_weight);
  if (o.normalize_weights) {
    return sum > o.self_weight ? std::string{}
                               : "AveragingOptions: normalize_weights needs a positive peer weight";
  }
  if (std::abs(sum - 1.0) > 1e-9) {
    return "AveragingOptions: self_weight + peer_weights sum to " + number(sum) +
           ", not 1 (set normalize_weights to scale them)";
  }
  return {};
}

/// The counts and intervals.
std::string check_schedule(const AveragingOptions& o) {
  if (o.interval < 1) {
    return "AveragingOptions::interval must be >= 1 (got " + std::to_string(o.interval) + ")";
  }
  if (!std::isfinite(o.interval_ms) || o.interval_ms < 0.0) {
    return "AveragingOptions::interval_ms must be finite and >= 0 (got " + number(o.interval_ms) +
           ")";
  }
  if (o.warmup_steps < 0 || o.cooldown_steps < 0 || o.total_steps < 0 || o.stale_steps < 0) {
    return "AveragingOptions: warmup_steps, cooldown_steps, total_steps and stale_steps must be "
           ">= 0";
  }
  if (o.cooldown_steps > 0 && o.total_steps < o.cooldown_steps) {
    return "AveragingOptions::cooldown_steps (" + std::to_string(o.cooldown_steps) +
           ") needs total_steps >= cooldown_steps (got " + std::to_string(o.total_steps) + ")";
  }
  if (o.publish_every < 1) {
    return "AveragingOptions::publish_every must be >= 1 (got " + std::to_string(o.publish_every) +
           ")";
  }
  if (!std::isfinite(o.stale_seconds) || o.stale_seconds < 0.0 ||
      !std::isfinite(o.timeout_seconds) || o.timeout_seconds < 0.0) {
    return "AveragingOptions: stale_seconds and timeout_seconds must be finite and >= 0";
  }
  if (o.symmetric && o.background) {
    return "AveragingOptions: symmetric averaging runs its rounds inline: set background to "
           "false (a background correction lands after the peer's half of the exchange)";
  }
  return {};
}

/// The topology's own checks for @p rank (every list for TopologyKind::neighbours, the first
/// rounds of a custom callable), and the peer count peer_weights must match.
std::string check_topology(const AveragingOptions& o, int rank, int size) {
  const Topology& t = o.topology;
  if (!enum_valid(t.kind)) {
    return "AveragingOptions::topology: unknown kind";
  }
  if (t.kind == TopologyKind::random && (t.k < 1 || (size > 1 && t.k > size - 1))) {
    return "topology random: k must be in 1.." + std::to_string(size - 1) + " (got " +
           std::to_string(t.k) + ")";
  }
  if (t.kind == TopologyKind::neighbours) {
    if (t.neighbours.size() != static_cast<std::size_t>(size)) {
      return "topology neighbours: " + std::to_string(t.neighbours.size()) + " lists for " +
             std::to_string(size) + " ranks";
    }
    for (int r = 0; r < size; ++r) {
      std::string bad = check_peers(t.neighbours[static_cast<std::size_t>(r)], r, size);
      if (!bad.empty()) {
        return "topology neighbours: rank " + std::to_string(r) + ": " + bad;
      }
    }
  }
  if (t.kind == TopologyKind::custom && !t.custom) {
    return "topology custom: no callable";
  }
  const std::int64_t probes = t.kind == TopologyKind::custom ? std::max(size, 4) : 1;
  for (std::int64_t round = 0; round < probes; ++round) {
    std::vector<int> peers;
    try {
      peers = t.peers(round, rank, size);
    } catch (const std::exception& e) {
      return "topology " + std::string(enum_name(t.kind)) + ": round " + std::to_string(round) +
             " threw: " + e.what();
    }
    std::string bad = check_peers(peers, rank, size);
    if (!bad.empty()) {
      return "topology " + std::string(enum_name(t.kind)) + ": round " + std::to_string(round) +
             ": " + bad;
    }
    if (!o.peer_weights.empty() && peers.size() != o.peer_weights.size()) {
      return "AveragingOptions::peer_weights has " + std::to_string(o.peer_weights.size()) +
             " weights but topology " + std::string(enum_name(t.kind)) + " gives rank " +
             std::to_string(rank) + " " + std::to_string(peers.size()) + " peers";
    }
  }
  return {};
}

}  // namespace

std::vector<int> Topology::peers(std::int64_t round, int rank, int size) const {
  switch (kind) {
    case TopologyKind::all: return others(rank, size);
    case TopologyKind::random: return draw_random(seed, k, round, rank, size);
    case TopologyKind::ring: return ring_of(rank, size);
    case TopologyKind::exponential: return exponential_of(round, rank, size);
    case TopologyKind::neighbours:
      return rank >= 0 && static_cast<std::size_t>(rank) < neighbours.size()
                 ? neighbours[static_cast<std::size_t>(rank)]
                 : std::vector<int>{};
    case TopologyKind::custom: return custom ? custom(round, rank, size) : std::vector<int>{};
  }
  return {};
}

std::string check_peers(std::span<const int> peers, int rank, int size) {
  std::vector<int> seen;
  seen.reserve(peers.size());
  for (const int p : peers) {
    if (p < 0 || p >= size) {
      return "peer " + std::to_string(p) + " is outside the population (ranks 0.." +
             std::to_string(size - 1) + ")";
    }
    if (p == rank) {
      return "peer " + std::to_string(p) + " is the agent itself";
    }
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) {
      return "peer " + std::to_string(p) + " is named twice";
    }
    seen.push_back(p);
  }
  return {};
}

std::string check_options(const AveragingOptions& options, int rank, int size) {
  std::string bad = check_schedule(options);
  if (bad.empty()) {
    bad = check_weights(options);
  }
  if (bad.empty()) {
    bad = check_topology(options, rank, size);
  }
  return bad.empty() ? bad : "paramwin: " + bad;
}

}  // namespace paramwin
