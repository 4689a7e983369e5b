#pragma once
// Owners of MPI handles: Comm (communicator), Win (window), Info (info object), Group and
// Datatype (short-lived local handles), and
// MpiStatus, the first failure of a sequence of MPI calls that must all be attempted.
//
// Every owner is move-only with the rule of five written out: a move leaves the source
// empty, a move-assignment over a live owner frees the old handle first, self-move does
// nothing. Destructors never throw and do nothing once MPI is finalized; free() is the path
// that reports errors (MpiError through check_mpi). Communicators and windows get
// MPI_ERRORS_RETURN as soon as they are owned, so an MPI error on them becomes an exception,
// never an abort. Every Win is listed in the finalize registry (finalize_registry.hpp) while
// its handle lives, so that a window still alive at MPI_Finalize is freed by it, through
// the same code as Win::free().

#include <mpi.h>

#include <utility>

namespace paramwin::detail {

/// True once MPI_Finalize has been called (or MPI_Finalized fails).
[[nodiscard]] bool mpi_finalized() noexcept;

/// The first failure among MPI calls that must all be attempted (freeing several handles).
struct MpiStatus {
  int code = MPI_SUCCESS;
  const char* call = "";
  /// Keeps @p code of @p what_call if it failed and nothing failed before.
  void note(int error_code, const char* what_call) noexcept {
    if (error_code != MPI_SUCCESS && code == MPI_SUCCESS) {
      code = error_code;
      call = what_call;
    }
  }
  /// Keeps @p other's failure if nothing failed before.
  void note(const MpiStatus& other) noexcept { note(other.code, other.call); }
  [[nodiscard]] bool ok() const noexcept { return code == MPI_SUCCESS; }
  /// Throws MpiError for the recorded failure, if any.
  void check() const;
};

/// Owns a communicator (a duplicate or a split result) with MPI_ERRORS_RETURN set.
class Comm {
 public:
  Comm() noexcept = default;
  /// MPI_Comm_dup of @p comm. @note Collective over @p comm.
  [[nodiscard]] static Comm dup(MPI_Comm comm);
  /// MPI_Comm_split of @p comm; empty when @p color is MPI_UNDEFINED. @note Collective.
  [[nodiscard]] static Comm split(MPI_Comm comm, int color, int key);
  /// The ranks of @p comm sharing memory with this one (MPI_COMM_TYPE_SHARED). @note Collective.
  [[nodiscard]] static Comm split_shared(MPI_Comm comm);
  /// Takes ownership of @p comm (one this process created and may free); sets
  /// MPI_ERRORS_RETURN, and frees it again if that fails.
  [[nodiscard]] static Comm adopt(MPI_Comm comm);

  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept;
  Comm& operator=(Comm&& other) noexcept;
  /// Frees the communicator; never throws, does nothing after MPI_Finalize.
  ~Comm();

  /// Frees now; throws MpiError if MPI_Comm_free fails (the owner is empty either way).
  /// @note Collective over the communicator.
  void free();
  /// Frees now without throwing; returns what failed.
  MpiStatus free_noexcept() noexcept;
  /// Forgets the communicator without freeing it (one that holds a dead rank, whose
  /// collective free would never return: docs/elastic.md). Local; the owner is empty.
  void leak() noexcept { comm_ = MPI_COMM_NULL; }

  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }
  [[nodiscard]] explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }
  [[nodiscard]] int rank() const;  ///< MPI_Comm_rank (throws MpiError)
  [[nodiscard]] int size() const;  ///< MPI_Comm_size (throws MpiError)

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

/// Owns an info object.
class Info {
 public:
  Info() noexcept = default;
  /// An empty info object (MPI_Info_create).
  [[nodiscard]] static Info create();
  /// alloc_shared_noncontig=true: every rank's shared segment allocated separately and
  /// page-aligned (MPICH 4.0.2 + UCX returns other ranks' bytes for windows whose per-rank
  /// base is not 16-byte aligned).
  [[nodiscard]] static Info shared_noncontig();

  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  Info(Info&& other) noexcept;
  Info& operator=(Info&& other) noexcept;
  ~Info();

  /// Sets @p key to @p value (throws MpiError).
  void set(const char* key, const char* value);
  [[nodiscard]] MPI_Info get() const noexcept { return info_; }

 private:
  void reset() noexcept;
  MPI_Info info_ = MPI_INFO_NULL;
};

/// The finalize registry's MPI_COMM_SELF delete callback (finalize_registry.cpp).
int finalize_registry_hook(MPI_Comm comm, int keyval, void* value, void* extra);

/// Owns a window with MPI_ERRORS_RETURN set, remembers whether it holds a lock_all epoch,
/// and is listed in the finalize registry while alive.
class Win {
 public:
  Win() noexcept = default;
  /// MPI_Win_allocate_shared of @p bytes (disp unit 1) on @p comm; @p base receives this
  /// rank's segment. @note Collective over @p comm.
  [[nodiscard]] static Win allocate_shared(MPI_Aint bytes, MPI_Info info, MPI_Comm comm,
                                           void** base);
  /// A shared scratch: allocate_shared with alloc_shared_noncontig, then
  /// lock_all(MPI_MODE_NOCHECK) for the window's life. @note Collective over @p comm.
  [[nodiscard]] static Win allocate_shared_locked(MPI_Aint bytes, MPI_Comm comm, void** base);
  /// MPI_Win_create over @p bytes at @p base (disp unit 1). @note Collective over @p comm.
  [[nodiscard]] static Win create(void* base, MPI_Aint bytes, MPI_Info info, MPI_Comm comm);

  Win(const Win&) = delete;
  Win& operator=(const Win&) = delete;
  Win(Win&& other) noexcept;
  Win& operator=(Win&& other) noexcept;
  /// Unlocks and frees the window; never throws, does nothing after MPI_Finalize.
  ~Win();

  /// Opens the passive-target epoch on every rank (MPI_Win_lock_all); throws MpiError.
  void lock_all(int assert_flags = MPI_MODE_NOCHECK);
  /// Base address of @p rank's segment of a shared window (MPI_Win_shared_query); throws
  /// MpiError. @p bytes, if given, receives the segment size.
  [[nodiscard]] void* shared_query(int rank, MPI_Aint* bytes = nullptr) const;

  /// Unlocks (if locked) and frees now; throws MpiError naming the first failing call (the
  /// owner is empty either way). @note Collective over the window's communicator.
  void free();
  /// The one freeing path (free(), the destructor, the finalize registry): unlock if
  /// locked, MPI_Win_free, leave the registry. Never throws; returns what failed.
  MpiStatus free_noexcept() noexcept;
  /// Forgets the window without unlocking or freeing it (one that holds a dead rank: its
  /// unlock may wait for operations on it, and its collective free never returns). Leaves
  /// the registry; local; the owner is empty and the memory stays mapped.
  void leak() noexcept;

  [[nodiscard]] MPI_Win get() const noexcept { return win_; }
  [[nodiscard]] explicit operator bool() const noexcept { return win_ != MPI_WIN_NULL; }
  [[nodiscard]] bool locked() const noexcept { return locked_; }

 private:
  friend int finalize_registry_hook(MPI_Comm, int, void*, void*);
  /// Takes ownership of @p win: registers it, then sets MPI_ERRORS_RETURN.
  [[nodiscard]] static Win adopt(MPI_Win win);
  /// free_noexcept() without the MPI_Finalized check (the registry runs inside MPI_Finalize).
  MpiStatus free_now() noexcept;

  MPI_Win win_ = MPI_WIN_NULL;
  bool locked_ = false;
};

/// Owns a local MPI handle that needs no agreement to free (a group, a derived datatype):
/// freed with Traits::release on scope exit, never after MPI_Finalize. Move-only.
template <class Traits>
class LocalHandle {
 public:
  using handle_type = typename Traits::handle_type;  ///< the MPI handle type

  LocalHandle() noexcept = default;
  /// Takes ownership of @p h.
  explicit LocalHandle(handle_type h) noexcept : h_(h) {}
  LocalHandle(const LocalHandle&) = delete;
  LocalHandle& operator=(const LocalHandle&) = delete;
  LocalHandle(LocalHandle&& other) noexcept : h_(std::exchange(other.h_, Traits::null())) {}
  LocalHandle& operator=(LocalHandle&& other) noexcept {
    if (this != &other) {
      reset();
      h_ = std::exchange(other.h_, Traits::null());
    }
    return *this;
  }
  ~LocalHandle() { reset(); }

  [[nodiscard]] handle_type get() const noexcept { return h_; }
  /// Where an MPI call that creates the handle writes it (the owner must be empty).
  [[nodiscard]] handle_type* out() noexcept { return &h_; }

 private:
  void reset() noexcept {
    if (h_ != Traits::null() && !mpi_finalized()) Traits::release(&h_);
    h_ = Traits::null();
  }
  handle_type h_ = Traits::null();
};

/// LocalHandle traits of an MPI_Group.
struct GroupTraits {
  using handle_type = MPI_Group;
  static MPI_Group null() noexcept { return MPI_GROUP_NULL; }
  static void release(MPI_Group* g) noexcept { MPI_Group_free(g); }
};
/// LocalHandle traits of an MPI_Datatype.
struct DatatypeTraits {
  using handle_type = MPI_Datatype;
  static MPI_Datatype null() noexcept { return MPI_DATATYPE_NULL; }
  static void release(MPI_Datatype* t) noexcept { MPI_Type_free(t); }
};
using Group = LocalHandle<GroupTraits>;        ///< a communicator's group, freed on scope exit
using Datatype = LocalHandle<DatatypeTraits>;  ///< a derived datatype, freed on scope exit

}  // namespace paramwin::detail
