#pragma once
// What the elastic spare tests (elastic_spare.cpp, elastic_refill.cpp) share: parameters whose
// values follow from their slot and snapshot version, and the check that a joined spare's
// first rebirth holds the exact mix of its donors' recorded versions.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

}  // namespace paramwin::test
