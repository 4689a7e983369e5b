// The registry of live unnamed windows (live_windows.hpp): one list per process, guarded by
// a mutex (windows are single-threaded, but different threads may own different windows).
#include "window/live_windows.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace paramwin::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<LiveWindow> windows;
};

Registry& registry() {
  // Never destroyed: windows may be freed during static destruction.
  static auto* const r = new Registry();  // NOLINT(cppcoreguidelines-owning-memory)
  return *r;
}

/// Same processes in both communicators, in any order (MPI_Comm_compare).
bool same_processes(MPI_Comm a, MPI_Comm b) {
  int result = MPI_UNEQUAL;
  if (MPI_Comm_compare(a, b, &result) != MPI_SUCCESS) {
    return false;
  }
  return result == MPI_IDENT || result == MPI_CONGRUENT || result == MPI_SIMILAR;
}

}  // namespace

std::string live_window_conflict(const LiveWindow& candidate) {
  int size = 0;
  if (candidate.comm == MPI_COMM_NULL || MPI_Comm_size(candidate.comm, &size) != MPI_SUCCESS ||
      size <= 1) {
    return {};
  }
  Registry& r = registry();
  const std::scoped_lock lock(r.mutex);
  for (const LiveWindow& live : r.windows) {
    if (live.owner == candidate.owner || live.layout_check != candidate.layout_check ||
        live.memory != candidate.memory || live.verify != candidate.verify) {
      continue;
    }
    const bool strict = candidate.layout_check == LayoutCheck::strict;
    if (strict && live.fingerprint != candidate.fingerprint) {
      continue;
    }
    if (!same_processes(live.comm, candidate.comm)) {
      continue;
    }
    return "paramwin: a second unnamed window " +
           std::string(strict ? "with the same layout"
                              : "under LayoutCheck::per_donor (layouts may differ across ranks)") +
           " over the same ranks while the unnamed window created at " + live.site +
           " is still alive: unnamed windows pair across ranks only by the order in which they "
           "are created, so two of them created in different orders on different ranks would "
           "pair crosswise (a pull from one would return the other's data); name your windows "
           "(WindowOptions::name), or free the first one before creating the second";
  }
  return {};
}

void note_live_window(LiveWindow window) {
  Registry& r = registry();
  const std::scoped_lock lock(r.mutex);
  r.windows.push_back(std::move(window));
}

void forget_live_window(const void* owner) noexcept {
  Registry& r = registry();
  const std::scoped_lock lock(r.mutex);
  std::erase_if(r.windows, [owner](const LiveWindow& w) { return w.owner == owner; });
}

}  // namespace paramwin::detail
