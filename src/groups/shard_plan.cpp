// ShardPlan: every layer cut into g contiguous, nearly equal element ranges.
#include "paramwin/shard_plan.hpp"

#include <algorithm>
#include <string>

#include "paramwin/error.hpp"

namespace paramwin {

ShardPlan::ShardPlan(Layout full, int shards) : full_(std::move(full)), shards_(shards) {
  if (shards < 1) {
    throw InvalidArgument("paramwin: ShardPlan: shards = " + std::to_string(shards) +
                          " must be >= 1");
  }
  layouts_.resize(static_cast<std::size_t>(shards));
  for (int s = 0; s < shards; ++s) {
    for (std::size_t l = 0; l < full_.size(); ++l) {
      layouts_[static_cast<std::size_t>(s)].add(full_[l].name, count(l, s), full_[l].dtype);
    }
    // Every shard carries the agent's hyperparameters: a pull of any shard reads them.
    for (const HyperSpec& h : full_.hyperparameters()) {
      layouts_[static_cast<std::size_t>(s)].add_hyperparameter(h.name, h.type);
    }
  }
}

void ShardPlan::check(int s) const {
  if (s < 0 || s >= shards_) {
    throw InvalidArgument("paramwin: ShardPlan: no shard " + std::to_string(s) + " (there are " +
                          std::to_string(shards_) + ")");
  }
}

const Layout& ShardPlan::shard_layout(int s) const {
  check(s);
  return layouts_[static_cast<std::size_t>(s)];
}

std::size_t ShardPlan::first(std::size_t layer, int s) const {
  check(s);
  const std::size_t n = full_[layer].count;
  const auto g = static_cast<std::size_t>(shards_);
  const auto u = static_cast<std::size_t>(s);
  return u * (n / g) + std::min(u, n % g);
}

std::size_t ShardPlan::count(std::size_t layer, int s) const {
  check(s);
  const std::size_t n = full_[layer].count;
  const auto g = static_cast<std::size_t>(shards_);
  return n / g + (static_cast<std::size_t>(s) < n % g ? 1U : 0U);
}

}  // namespace paramwin
