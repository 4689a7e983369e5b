#pragma once
// What the elastic spare tests (elastic_spare.cpp, elastic_refill.cpp, elastic_join.cpp) share:
// parameters whose values follow from their slot and snapshot version, the hooks that keep
// them so, the check that a joined spare's first rebirth holds the exact mix of its donors'
// recorded versions, and the tests' membership and window options.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "paramwin/paramwin.hpp"

namespace paramwin::test {

/// Sets the parameters of @p slot for the publish of version @p version: w[j] = 1000 * slot +
/// version + 0.001 * j, and v is 1 at the slot, 0 elsewhere.
inline void encode_slot(std::vector<float>& w, std::vector<float>& v, int slot,
                        std::uint64_t version) {
  for (std::size_t j = 0; j < w.size(); ++j) {
    w[j] = static_cast<float>(1000.0 * slot + static_cast<double>(version) +
                              0.001 * static_cast<double>(j));
  }
  std::fill(v.begin(), v.end(), 0.0F);
  v[static_cast<std::size_t>(slot)] = 1.0F;
}

/// Whether @p w and @p v (as on_rebirth saw them) are the exact mix of @p e's donors' encoded
/// versions. @p members: the rank of each slot (a donor's window rank is its slot, or its rank
/// in the standing window when @p standing).
inline bool exact_slot_mix(const StepEvent& e, const std::vector<float>& w,
                           const std::vector<float>& v, const std::vector<int>& members,
                           bool standing) {
  if (e.donors.empty()) return false;
  std::vector<double> want_v(members.size(), 0.0);
  double base = 0.0;
  for (const DonorRecord& d : e.donors) {
    int slot = d.rank;
    if (standing) {
      const auto at = std::find(members.begin(), members.end(), d.rank);
      if (at == members.end()) return false;  // a donor that holds no slot
      slot = static_cast<int>(at - members.begin());
    }
    want_v[static_cast<std::size_t>(slot)] += d.weight;
    base += d.weight * (1000.0 * slot + static_cast<double>(d.version));
  }
  for (std::size_t s = 0; s < want_v.size(); ++s) {
    if (std::abs(v[s] - want_v[s]) > 1e-6) return false;
  }
  for (std::size_t j = 0; j < w.size(); ++j) {
    const double want = base + 0.001 * static_cast<double>(j);
    if (std::abs(w[j] - want) > 2e-6 * std::abs(want) + 1e-6) return false;
  }
  return true;
}

/// A slot's encoded parameters (w: @p n floats, v: one per slot) and what a rebirth left in
/// them. hook() sets an agent's prepare_params (encode_slot with the agent's slot and next
/// version) and on_rebirth (captures w and v); set `agent` once it is made. The hooks hold
/// this object: it does not move.
struct EncodedSlot {
  std::vector<float> w;
  std::vector<float> v;
  std::vector<float> captured_w;
  std::vector<float> captured_v;
  ElasticAgent<>* agent = nullptr;

  EncodedSlot(std::size_t n, int slots) : w(n), v(static_cast<std::size_t>(slots)) {}
  EncodedSlot(const EncodedSlot&) = delete;
  EncodedSlot& operator=(const EncodedSlot&) = delete;
  EncodedSlot(EncodedSlot&&) = delete;
  EncodedSlot& operator=(EncodedSlot&&) = delete;
  ~EncodedSlot() = default;

  void hook(AgentOptions& options) {
    options.prepare_params = [this] {
      encode_slot(w, v, agent->membership().slot(), agent->agent().window().version() + 1);
    };
    options.on_rebirth = [this](const StepEvent&, std::span<const LayerRef>) {
      captured_w = w;
      captured_v = v;
    };
  }
};

/// A joined process's first step @p e (at iteration @p it) in a population of new windows:
/// whether it was a rebirth (reason joined) that left in @p p the exact mix of its donors'
/// recorded versions. Prints a line saying so; @p who says what process it is.
inline bool check_first_step(const ElasticAgent<>& agent, const StepEvent& e, const EncodedSlot& p,
                             const char* who, std::int64_t it) {
  const Membership& m = agent.membership();
  const bool ok = e.died && e.reason == DeathReason::joined &&
                  exact_slot_mix(e, p.captured_w, p.captured_v, m.members(), false);
  std::printf("rank %d (%s): joined slot %d at iteration %lld, epoch %llu, first step %s from "
              "%zu donors%s\n",
              m.world_rank(), who, m.slot(), static_cast<long long>(it),
              static_cast<unsigned long long>(m.epoch()),
              e.died ? reason_name(e.reason).data() : "no rebirth", e.donors.size(),
              ok ? "" : " (FAILED: not the exact mix of its donors)");
  std::fflush(stdout);
  return ok;
}

/// The tests' membership: @p members, checks every 0.02 s, dead after 1.5 s of silence,
/// agreements given up after 20 s.
inline MembershipOptions test_membership(int members) {
  MembershipOptions m;
  m.members = members;
  m.check_seconds = 0.02;
  m.dead_after_seconds = 1.5;
  m.agree_seconds = 20.0;
  return m;
}

/// The tests' window: @p name, a reader's suspect bound of 1 s.
inline WindowOptions test_window(const char* name) {
  WindowOptions w;
  w.name = name;
  w.liveness.suspect_seconds = 1.0;
  return w;
}

}  // namespace paramwin::test
