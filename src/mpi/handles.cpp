// Comm, Info, Win: the MPI handle owners (see handles.hpp).
#include "mpi/handles.hpp"

#include <utility>

#include "detail/mpi_check.hpp"
#include "mpi/finalize_registry.hpp"

namespace paramwin::detail {

bool mpi_finalized() noexcept {
  int finalized = 0;
  return MPI_Finalized(&finalized) != MPI_SUCCESS || finalized != 0;
}

void MpiStatus::check() const { check_mpi(code, call); }

// --- Comm -------------------------------------------------------------------------------

Comm Comm::adopt(MPI_Comm comm) {
  Comm owned;
  owned.comm_ = comm;  // owned from here: freed again if the next call fails
  if (comm != MPI_COMM_NULL) {
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  return owned;
}

Comm Comm::dup(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm, &out), "MPI_Comm_dup");
  return adopt(out);
}

Comm Comm::split(MPI_Comm comm, int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm, color, key, &out), "MPI_Comm_split");
  return adopt(out);
}

Comm Comm::split_shared(MPI_Comm comm) {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &out),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  return adopt(out);
}

Comm::Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}

Comm& Comm::operator=(Comm&& other) noexcept {
  if (this != &other) {
    (void)free_noexcept();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
  }
  return *this;
}

Comm::~Comm() { (void)free_noexcept(); }

MpiStatus Comm::free_noexcept() noexcept {
  MpiStatus status;
  if (comm_ != MPI_COMM_NULL && !mpi_finalized()) {
    status.note(MPI_Comm_free(&comm_), "MPI_Comm_free");
  }
  comm_ = MPI_COMM_NULL;  // freed once: a failed (collective) free is not retried
  return status;
}

void Comm::free() { free_noexcept().check(); }

int Comm::rank() const {
  int r = -1;
  check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
  return r;
}

int Comm::size() const {
  int s = 0;
  check_mpi(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
  return s;
}

// --- Info -------------------------------------------------------------------------------

Info Info::create() {
  Info info;
  check_mpi(MPI_Info_create(&info.info_), "MPI_Info_create");
  return info;
}

Info Info::shared_noncontig() {
  Info info = create();
  info.set("alloc_shared_noncontig", "true");
  return info;
}

Info::Info(Info&& other) noexcept : info_(std::exchange(other.info_, MPI_INFO_NULL)) {}

Info& Info::operator=(Info&& other) noexcept {
  if (this != &other) {
    reset();
    info_ = std::exchange(other.info_, MPI_INFO_NULL);
  }
  return *this;
}

Info::~Info() { reset(); }

void Info::reset() noexcept {
  if (info_ != MPI_INFO_NULL && !mpi_finalized()) {
    MPI_Info_free(&info_);
  }
  info_ = MPI_INFO_NULL;
}

void Info::set(const char* key, const char* value) {
  check_mpi(MPI_Info_set(info_, key, value), "MPI_Info_set");
}

// --- Win --------------------------------------------------------------------------------

Win Win::adopt(MPI_Win win) {
  Win owned;
  owned.win_ = win;  // owned from here: freed again if the next calls fail
  try {
    remember_win(&owned);
  } catch (...) {
    (void)owned.free_now();
    throw;
  }
  check_mpi(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  return owned;
}

Win Win::allocate_shared(MPI_Aint bytes, MPI_Info info, MPI_Comm comm, void** base) {
  MPI_Win win = MPI_WIN_NULL;
  check_mpi(MPI_Win_allocate_shared(bytes, 1, info, comm, base, &win), "MPI_Win_allocate_shared");
  return adopt(win);
}

Win Win::allocate_shared_locked(MPI_Aint bytes, MPI_Comm comm, void** base) {
  const Info info = Info::shared_noncontig();
  Win win = allocate_shared(bytes, info.get(), comm, base);
  win.lock_all(MPI_MODE_NOCHECK);
  return win;
}

Win Win::create(void* base, MPI_Aint bytes, MPI_Info info, MPI_Comm comm) {
  MPI_Win win = MPI_WIN_NULL;
  check_mpi(MPI_Win_create(base, bytes, 1, info, comm, &win), "MPI_Win_create");
  return adopt(win);
}

Win::Win(Win&& other) noexcept
    : win_(std::exchange(other.win_, MPI_WIN_NULL)), locked_(std::exchange(other.locked_, false)) {
  if (win_ != MPI_WIN_NULL) {
    replace_win(&other, this);
  }
}

Win& Win::operator=(Win&& other) noexcept {
  if (this != &other) {
    (void)free_noexcept();
    win_ = std::exchange(other.win_, MPI_WIN_NULL);
    locked_ = std::exchange(other.locked_, false);
    if (win_ != MPI_WIN_NULL) {
      replace_win(&other, this);
    }
  }
  return *this;
}

Win::~Win() { (void)free_noexcept(); }

void Win::lock_all(int assert_flags) {
  check_mpi(MPI_Win_lock_all(assert_flags, win_), "MPI_Win_lock_all");
  locked_ = true;
}

void* Win::shared_query(int rank, MPI_Aint* bytes) const {
  MPI_Aint size = 0;
  int disp_unit = 0;
  void* ptr = nullptr;
  check_mpi(MPI_Win_shared_query(win_, rank, &size, &disp_unit, &ptr), "MPI_Win_shared_query");
  if (bytes != nullptr) {
    *bytes = size;
  }
  return ptr;
}

MpiStatus Win::free_noexcept() noexcept {
  if (win_ != MPI_WIN_NULL && mpi_finalized()) {
    // MPI is gone; a window alive at MPI_Finalize was freed by the registry already, and
    // anything left can no longer be freed.
    forget_win(this);
    win_ = MPI_WIN_NULL;
    locked_ = false;
    return {};
  }
  return free_now();
}

void Win::leak() noexcept {
  if (win_ != MPI_WIN_NULL) forget_win(this);
  win_ = MPI_WIN_NULL;
  locked_ = false;
}

MpiStatus Win::free_now() noexcept {
  MpiStatus status;
  if (win_ == MPI_WIN_NULL) {
    return status;
  }
  forget_win(this);
  if (locked_) {
    status.note(MPI_Win_unlock_all(win_), "MPI_Win_unlock_all");
    locked_ = false;
  }
  const MPI_Win doomed = std::exchange(win_, MPI_WIN_NULL);
  MPI_Win handle = doomed;
  // Freed once: a failed (collective) free is not retried later.
  status.note(MPI_Win_free(&handle), "MPI_Win_free");
  return status;
}

void Win::free() { free_noexcept().check(); }

}  // namespace paramwin::detail
