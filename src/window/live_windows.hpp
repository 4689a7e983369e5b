#pragma once
// The unnamed windows alive in this process, so that a second unnamed window that could pair
// crosswise with one of them is refused at creation (live_windows.cpp).
//
// Unnamed windows have no identity across ranks but the order of their creation on their
// communicator: window creation is collective and pairs the k-th creation of every rank.
// Two live unnamed windows of one layout over the same ranks, created in opposite orders on
// two ranks, would pair crosswise (a pull from one reads the other; freeing them in scope
// order hangs), and the creation site cannot tell them apart when they are made through
// std::optional::emplace, std::make_unique, a container or the Python binding (every window
// then carries the library's site). So, whatever the call path, this process refuses the
// second such window; named windows are never listed (their name is their identity).

#include <mpi.h>

#include <cstdint>
#include <string>

#include "paramwin/options.hpp"

namespace paramwin::detail {

/// What a live unnamed window is compared by. @p comm is the window's own communicator
/// (valid while the window is listed); @p owner identifies the entry (the WindowImpl, which
/// never moves: moving a ParameterWindow moves the pointer to it).
struct LiveWindow {
  const void* owner = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  LayoutCheck layout_check = LayoutCheck::strict;
  Memory memory = Memory::host;   ///< (other memory: a crosswise pair throws at creation)
  bool verify = true;             ///< (other verify: a crosswise pair throws at creation)
  std::uint64_t fingerprint = 0;  ///< layout and wire format (SlotLayout::fingerprint)
  std::string site;               ///< "file:line:column" of its creation, for the message
};

/// The refusal for a new unnamed window @p candidate (its owner may be null: it is not
/// listed yet), or "" when it may be created: "" for a communicator of one process (no other
/// rank to pair with), else a message naming the first listed window with the same layout
/// check, memory and verify (windows that differ in these cannot pair without an error at
/// creation), over the same processes (MPI_Comm_compare: congruent or similar, whatever the
/// handle), and, under LayoutCheck::strict, the same fingerprint (under per_donor layouts may
/// differ across ranks, so any two such windows could pair crosswise unseen). Local: the
/// caller agrees on the outcome with the other ranks before it allocates anything.
[[nodiscard]] std::string live_window_conflict(const LiveWindow& candidate);

/// Lists a created unnamed window (a named one is not listed). Throws std::bad_alloc only.
void note_live_window(LiveWindow window);

/// Unlists the window of @p owner (no-op if not listed): before its communicator is freed.
void forget_live_window(const void* owner) noexcept;

}  // namespace paramwin::detail
