// The finalize registry (see finalize_registry.hpp): the lists, the MPI_COMM_SELF hook.
#include "mpi/finalize_registry.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/handles.hpp"

namespace paramwin::detail {
namespace {

struct Registry {
  // Recursive: the hook holds it throughout, and the frees it calls unlist themselves.
  std::recursive_mutex mutex;
  std::vector<FinalizeClient*> clients;  // creation order
  std::vector<Win*> wins;                // creation order; the owner object, updated on move
  bool hooked = false;                   // the MPI_COMM_SELF attribute is set (once)
};

Registry& registry() {
  // Never destroyed: an owner with static storage duration may outlive any static here.
  static auto* r = new Registry;
  return *r;
}

void hook_locked(Registry& r) {
  if (r.hooked) {
    return;
  }
  int keyval = MPI_KEYVAL_INVALID;
  check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &finalize_registry_hook, &keyval,
                                   nullptr),
            "MPI_Comm_create_keyval");
  check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr(MPI_COMM_SELF)");
  r.hooked = true;  // the keyval lives until MPI_Finalize deletes the attribute
}

}  // namespace

int finalize_registry_hook(MPI_Comm /*comm*/, int /*keyval*/, void* /*value*/, void* /*extra*/) {
  // A C callback: nothing may escape. The frees never throw; the lock and the report can (in
  // theory), hence the catch.
  try {
    Registry& r = registry();
    // Held throughout: an owner destroyed meanwhile by another thread waits here instead of
    // being freed twice (its handles are null afterwards, so its destructor does nothing).
    const std::lock_guard lock(r.mutex);
    std::vector<FinalizeClient*> clients;
    std::vector<Win*> wins;
    clients.swap(r.clients);
    wins.swap(r.wins);
    // Threads first, all of them (a progress thread that was inside MPI when MPI_Finalize
    // began is a race inside MPICH that nothing here can undo; docs/reliability.md).
    for (FinalizeClient* c : clients) {
      c->stop_threads_at_finalize();
    }
    int failed = 0;
    std::string first;
    auto record = [&](const std::string& error) {
      if (!error.empty() && failed++ == 0) {
        first = error;
      }
    };
    for (auto it = clients.rbegin(); it != clients.rend(); ++it) {
      (*it)->free_at_finalize();
      record((*it)->finalize_error());
    }
    for (auto it = wins.rbegin(); it != wins.rend(); ++it) {
      if (**it) {  // not already freed by its client above
        const MpiStatus s = (*it)->free_now();
        if (!s.ok()) {
          record(std::string(s.call) + " failed: " + mpi_error_string(s.code));
        }
      }
    }
    if (failed != 0) {
      std::fprintf(stderr,
                   "paramwin: MPI_Finalize with %zu live window owner(s) and %zu window(s): "
                   "freeing failed %d time(s), first: %s\n",
                   clients.size(), wins.size(), failed, first.c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "paramwin: freeing live windows at MPI_Finalize failed\n");
  }
  return MPI_SUCCESS;  // an error here would make MPI_Finalize itself fail
}

void remember_client(FinalizeClient* client) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  hook_locked(r);
  r.clients.push_back(client);
}

void forget_client(FinalizeClient* client) noexcept {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::erase(r.clients, client);
}

void remember_win(Win* win) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  hook_locked(r);
  r.wins.push_back(win);
}

void replace_win(const Win* from, Win* to) noexcept {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::replace(r.wins.begin(), r.wins.end(), const_cast<Win*>(from), to);
}

void forget_win(const Win* win) noexcept {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  std::erase(r.wins, win);
}

}  // namespace paramwin::detail
