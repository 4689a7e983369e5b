// RmaBatch, the graveyard of abandoned requests and the pull scratch (see rma_batch.hpp).
#include "window/rma_batch.hpp"

#include <algorithm>
#include <new>
#include <string>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

constexpr std::size_t kMaxRmaPiece = std::size_t{1} << 30;  // bytes per MPI_Rget

}  // namespace

std::string timeout_text(const char* what, int rank) {
  const std::string r = std::to_string(rank);
  // On MPICH's ch4:ucx an MPI_Get is served only when its target enters MPI, so a late read
  // means one of two things, and the reader cannot tell which.
  return std::string("paramwin: ") + what + ": RMA read from rank " + r +
         " did not complete before the deadline (timeout_seconds): rank " + r +
         " has not entered MPI since the read began. Either it is busy computing without "
         "letting MPI progress (see docs/rma-semantics.md: progress() or "
         "WindowOptions::progress_thread), or its process is gone (exited or crashed)";
}

// --- Graveyard, Scratch -----------------------------------------------------------------

void Graveyard::reap(bool block) noexcept {
  if (requests.empty()) {
    arenas.clear();
    blocks.clear();
    return;
  }
  const int n = static_cast<int>(requests.size());
  int done = 0;
  if (block) {
    MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE);
    done = 1;
  } else {
    MPI_Testall(n, requests.data(), &done, MPI_STATUSES_IGNORE);
  }
  if (done != 0) {
    requests.clear();
    arenas.clear();
    blocks.clear();
  }
}

std::byte* Scratch::get(std::size_t bytes) {
  if (bytes > bytes_ || !data_) {
    data_.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})),
                [](std::byte* p) noexcept { ::operator delete[](p, std::align_val_t{64}); });
    bytes_ = bytes;
  }
  return data_.get();
}

void Scratch::retire(Graveyard& graveyard) noexcept {
  if (data_) {
    try {
      graveyard.blocks.push_back(std::move(data_));
    } catch (...) {  // no memory to record it: wait for the reads instead
      graveyard.reap(true);
    }
  }
  data_.reset();
  bytes_ = 0;
}

// --- RmaBatch ---------------------------------------------------------------------------

RmaBatch::~RmaBatch() {
  for (const int target : flush_targets_) {
    MPI_Win_flush(target, win_);  // unwinding: the destinations must not be written later
  }
  if (requests_.empty()) {
    return;
  }
  if (graveyard_ != nullptr) {
    abandon();
  } else {
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }
}

std::vector<std::pair<std::size_t, std::size_t>> split_pieces(std::size_t bytes,
                                                              std::size_t max_piece) {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  for (std::size_t done = 0; done < bytes; done += max_piece) {
    pieces.emplace_back(done, std::min(max_piece, bytes - done));
  }
  return pieces;
}

void RmaBatch::get(void* dst, std::size_t bytes, int target, std::size_t offset) {
  auto* out = static_cast<std::byte*>(dst);
  for (const auto& [at, piece] : split_pieces(bytes, kMaxRmaPiece)) {
    const int count = checked_int(piece, "RMA piece bytes");
    if (flush_) {
      check_mpi(MPI_Get(out + at, count, MPI_BYTE, target, static_cast<MPI_Aint>(offset + at),
                        count, MPI_BYTE, win_),
                "MPI_Get");
      if (std::find(flush_targets_.begin(), flush_targets_.end(), target) == flush_targets_.end()) {
        flush_targets_.push_back(target);
      }
      continue;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    const int code = MPI_Rget(out + at, count, MPI_BYTE, target, static_cast<MPI_Aint>(offset + at),
                              count, MPI_BYTE, win_, &request);
    if (code != MPI_SUCCESS) unreachable(target, code, "MPI_Rget");
    requests_.push_back(request);
    targets_.push_back(target);
  }
}

void RmaBatch::fetch_op(const std::uint64_t* operand, std::uint64_t* old, int target,
                        std::size_t offset, MPI_Op op) {
  MPI_Request request = MPI_REQUEST_NULL;
  // Same datatype as every other access to the pins: atomic with respect to them.
  const int code =
      MPI_Rget_accumulate(operand, 1, MPI_UINT64_T, old, 1, MPI_UINT64_T, target,
                          static_cast<MPI_Aint>(offset), 1, MPI_UINT64_T, op, win_, &request);
  if (code != MPI_SUCCESS) unreachable(target, code, "MPI_Rget_accumulate(pin)");
  requests_.push_back(request);
  targets_.push_back(target);
}

void RmaBatch::accumulate(const std::uint64_t* operand, int target, std::size_t offset, MPI_Op op) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int code = MPI_Raccumulate(operand, 1, MPI_UINT64_T, target, static_cast<MPI_Aint>(offset),
                                   1, MPI_UINT64_T, op, win_, &request);
  if (code != MPI_SUCCESS) unreachable(target, code, "MPI_Raccumulate(pin release)");
  requests_.push_back(request);
  targets_.push_back(target);
}

void RmaBatch::wait() {
  for (const int target : flush_targets_) {
    check_mpi(MPI_Win_flush(target, win_), "MPI_Win_flush");
  }
  flush_targets_.clear();
  if (requests_.empty()) {
    return;
  }
  if (deadline_ > 0.0) {
    wait_until_deadline();
    return;
  }
  std::vector<MPI_Status> statuses(requests_.size());
  const int code =
      MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), statuses.data());
  if (code != MPI_SUCCESS) completion_failed(code, statuses, "MPI_Waitall (RMA)");
  requests_.clear();
  targets_.clear();
}

void RmaBatch::unreachable(int target, int code, const char* call) {
  abandon();
  throw DonorError(target, "paramwin: " + std::string(call) + " to rank " + std::to_string(target) +
                               " failed: " + mpi_error_string(code) + " (its process may be gone)");
}

void RmaBatch::completion_failed(int code, const std::vector<MPI_Status>& statuses,
                                 const char* call) {
  int target = targets_.empty() ? -1 : targets_.front();
  int cause = code;
  if (code == MPI_ERR_IN_STATUS) {
    for (std::size_t i = 0; i < statuses.size() && i < targets_.size(); ++i) {
      const int e = statuses[i].MPI_ERROR;
      if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) {
        target = targets_[i];
        cause = e;
        break;
      }
    }
  }
  unreachable(target, cause, call);
}

void RmaBatch::wait_until_deadline() {
  const int n = static_cast<int>(requests_.size());
  std::vector<MPI_Status> statuses(requests_.size());
  for (;;) {
    int done = 0;
    const int code = MPI_Testall(n, requests_.data(), &done, statuses.data());
    if (code != MPI_SUCCESS) completion_failed(code, statuses, "MPI_Testall (RMA)");
    if (done != 0) {
      requests_.clear();
      targets_.clear();
      return;
    }
    if (MPI_Wtime() > deadline_) {
      int late = targets_.front();
      for (std::size_t i = 0; i < requests_.size(); ++i) {
        if (requests_[i] != MPI_REQUEST_NULL) {
          late = targets_[i];
          break;
        }
      }
      abandon();
      throw TimeoutError(late, timeout_text("pull", late));
    }
  }
}

void RmaBatch::abandon() noexcept {
  if (requests_.empty()) {
    return;
  }
  if (graveyard_ == nullptr) {
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  } else {
    for (MPI_Request r : requests_) {
      if (r != MPI_REQUEST_NULL) {
        graveyard_->requests.push_back(r);
      }
    }
    if (arena_) {
      graveyard_->arenas.push_back(arena_);
    }
  }
  requests_.clear();
  targets_.clear();
}

}  // namespace paramwin::detail
