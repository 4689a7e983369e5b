#pragma once
// What the elastic spare tests (elastic_spare.cpp, elastic_refill.cpp, elastic_join.cpp) share:
// parameters whose values follow from their slot and snapshot version, the hooks that keep
// them so, the check that a joined spare's first rebirth holds the exact mix of its donors'
// recorded versions, and the tests' membership and window options.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "death_test_util.hpp"

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

/// One snapshot a mix read: its slot, the version encoded in it, its weight.
struct SlotRead {
  int slot = -1;
  std::uint64_t version = 0;
  double weight = 0.0;
};

/// Whether @p w and @p v are the exact weighted mix of the encoded snapshots @p reads
/// (encode_slot's values; float32 rounding allowed).
inline bool exact_encoded_mix(std::span<const SlotRead> reads, const std::vector<float>& w,
                              const std::vector<float>& v) {
  if (reads.empty()) return false;
  std::vector<double> want_v(v.size(), 0.0);
  double base = 0.0;
  for (const SlotRead& r : reads) {
    if (r.slot < 0 || static_cast<std::size_t>(r.slot) >= v.size()) return false;
    want_v[static_cast<std::size_t>(r.slot)] += r.weight;
    base += r.weight * (1000.0 * r.slot + static_cast<double>(r.version));
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

/// The slot of window rank @p rank: the rank itself (a new window per epoch: rank = slot), or
/// with the standing window its index in @p members (the world rank of each slot); -1 when it
/// holds none.
inline int slot_of_rank(int rank, const std::vector<int>& members, bool standing) {
  if (!standing) return rank >= 0 && static_cast<std::size_t>(rank) < members.size() ? rank : -1;
  const auto at = std::find(members.begin(), members.end(), rank);
  return at == members.end() ? -1 : static_cast<int>(at - members.begin());
}

/// Whether @p w and @p v (as on_rebirth saw them) are the exact mix of @p e's donors' encoded
/// versions. @p members: the rank of each slot (a donor's window rank is its slot, or its rank
/// in the standing window when @p standing).
inline bool exact_slot_mix(const StepEvent& e, const std::vector<float>& w,
                           const std::vector<float>& v, const std::vector<int>& members,
                           bool standing) {
  std::vector<SlotRead> reads;
  for (const DonorRecord& d : e.donors) {
    reads.push_back({slot_of_rank(d.rank, members, standing), d.version, d.weight});
  }
  return exact_encoded_mix(reads, w, v);
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

/// The spare tests' faults (elastic_averaging, torch_elastic_spare): the last slot after its
/// iteration 30, slot 1 after its 70, only in a process of the start still in its first slot
/// (@p first_life: neither joined nor a resigned one given a slot again). When one is due it
/// prints "fault: world rank R (slot S) HOW at iteration I at T" (T: steady_clock seconds,
/// system-wide), then throws std::runtime_error (--resign) or ends the process (--exit,
/// --kill: SIGKILL); otherwise it returns.
inline void spare_test_fault(const std::string& how, bool first_life, int world_rank, int slot,
                             int members, std::int64_t it) {
  if (!first_life || !((it == 30 && slot == members - 1) || (it == 70 && slot == 1))) return;
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  std::printf("fault: world rank %d (slot %d) %s at iteration %lld at %.6f\n", world_rank, slot,
              how.c_str(), static_cast<long long>(it), now);
  std::fflush(stdout);
  if (how == "--resign") throw std::runtime_error("the trainer's exception");
  die(how == "--kill");
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
