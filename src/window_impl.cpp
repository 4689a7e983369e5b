// Creation, self-verification, destruction and roster of a window.
#include "detail/window_impl.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {
namespace {

std::uint64_t verify_word(int rank, std::size_t i, std::uint64_t salt) {
  // splitmix64 of (rank, i): distinct per rank so a read of another rank's bytes shows.
  std::uint64_t z = salt + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(rank) * 64 + i + 1);
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

constexpr std::size_t kVerifyWords = 8;

void* align_page(void* p) {
  const auto u = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<void*>(round_up(u, kPage));
}
constexpr std::size_t kMaxRmaPiece = std::size_t{1} << 30;  // bytes per MPI_Rget

// --- windows still alive at MPI_Finalize --------------------------------------------------
//
// MPICH 4.0.2 + UCX 1.13 aborts inside MPI_Finalize when windows are still alive (their
// memory registrations are in use). MPI deletes the attributes of MPI_COMM_SELF at the very
// start of MPI_Finalize, while MPI still works (MPI standard, "Allowing User Functions at
// Process Termination"), so the first window a process creates hangs an attribute with a
// delete callback on MPI_COMM_SELF; the callback frees every window still alive.
//
// MPI_Win_free is collective, so every rank must free the same windows in the same order.
// Windows are created collectively, so the ranks of one communicator create theirs in the
// same order: freeing in reverse creation order matches across ranks. Assumption: windows
// whose communicators overlap were created in the same relative order on every rank they
// share (otherwise this can deadlock; that is finalising with live windows on top of
// creating them in different orders, see docs/reliability.md).

struct LiveWindows {
  std::mutex mutex;
  std::vector<WindowImpl*> windows;  // creation order; the impl, never the (movable) wrapper
  bool hooked = false;               // the MPI_COMM_SELF attribute is set (once per process)
};

LiveWindows& live_windows() {
  // Never destroyed: a window with static storage duration may outlive any static here.
  static auto* live = new LiveWindows;
  return *live;
}

int free_live_windows_at_finalize(MPI_Comm /*comm*/, int /*keyval*/, void* /*value*/,
                                  void* /*extra*/) {
  // A C callback: nothing may escape. free_at_finalize() never throws; the lock and the
  // report can (in theory), hence the catch.
  try {
    LiveWindows& live = live_windows();
    // Held throughout: a window destroyed meanwhile by another thread waits here instead of
    // being freed twice (its handles are null afterwards, so its destructor does nothing).
    const std::lock_guard lock(live.mutex);
    std::vector<WindowImpl*> doomed;
    doomed.swap(live.windows);
    // Progress threads first, all of them: MPICH's finalize turns its thread locking off
    // (isThreaded = 0) before it deletes these attributes, so no other thread may stay in
    // MPI while the collective frees below run. (A progress thread that was inside MPI when
    // MPI_Finalize began is a race inside MPICH that nothing here can undo; see
    // docs/reliability.md.)
    for (WindowImpl* w : doomed) {
      w->stop_progress_thread();
    }
    int failed = 0;
    std::string first;
    for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
      (*it)->free_at_finalize();
      if (!(*it)->finalize_error().empty() && failed++ == 0) {
        first = (*it)->finalize_error();
      }
    }
    if (failed != 0) {
      std::fprintf(stderr,
                   "paramwin: MPI_Finalize with %zu live window(s): freeing %d of them failed, "
                   "first: %s\n",
                   doomed.size(), failed, first.c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "paramwin: freeing live windows at MPI_Finalize failed\n");
  }
  return MPI_SUCCESS;  // an error here would make MPI_Finalize itself fail
}

/// Registers a freshly created window (hooking MPI_Finalize on the first one).
void remember_live(WindowImpl* w) {
  LiveWindows& live = live_windows();
  const std::lock_guard lock(live.mutex);
  if (!live.hooked) {
    int keyval = MPI_KEYVAL_INVALID;
    check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_live_windows_at_finalize,
                                     &keyval, nullptr),
              "MPI_Comm_create_keyval");
    check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr),
              "MPI_Comm_set_attr(MPI_COMM_SELF)");
    live.hooked = true;  // the keyval lives until MPI_Finalize deletes the attribute
  }
  live.windows.push_back(w);
}

/// Unregisters a window that is being freed (or failed to be created); no-op if absent.
void forget_live(WindowImpl* w) noexcept {
  LiveWindows& live = live_windows();
  const std::lock_guard lock(live.mutex);
  std::erase(live.windows, w);
}

}  // namespace

// --- RmaBatch ---------------------------------------------------------------------------

RmaBatch::~RmaBatch() {
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
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Rget(out + at, count, MPI_BYTE, target, static_cast<MPI_Aint>(offset + at),
                       count, MPI_BYTE, win_, &request),
              "MPI_Rget");
    requests_.push_back(request);
    targets_.push_back(target);
  }
}

void RmaBatch::fetch_add(const std::int64_t* delta, std::int64_t* old, int target,
                         std::size_t offset) {
  MPI_Request request = MPI_REQUEST_NULL;
  // Same datatype and op as every other access to the pins: atomic with respect to them.
  check_mpi(MPI_Rget_accumulate(delta, 1, MPI_INT64_T, old, 1, MPI_INT64_T, target,
                                static_cast<MPI_Aint>(offset), 1, MPI_INT64_T, MPI_SUM, win_,
                                &request),
            "MPI_Rget_accumulate(pin)");
  requests_.push_back(request);
  targets_.push_back(target);
}

void RmaBatch::wait() {
  if (requests_.empty()) {
    return;
  }
  const int n = static_cast<int>(requests_.size());
  if (deadline_ <= 0.0) {
    const int code = MPI_Waitall(n, requests_.data(), MPI_STATUSES_IGNORE);
    requests_.clear();
    targets_.clear();
    check_mpi(code, "MPI_Waitall (RMA)");
    return;
  }
  for (;;) {
    int done = 0;
    const int code = MPI_Testall(n, requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) {
      abandon();
      check_mpi(code, "MPI_Testall (RMA)");
    }
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
      throw TimeoutError(late, "paramwin: pull: RMA read from donor " + std::to_string(late) +
                                   " did not complete before the deadline (timeout_seconds); the "
                                   "donor has not entered MPI since (see docs/rma-semantics.md: "
                                   "progress() or WindowOptions::progress_thread)");
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

void WindowImpl::reap(bool block) noexcept {
  Graveyard& g = graveyard_;
  if (g.requests.empty()) {
    g.arenas.clear();
    g.blocks.clear();
    return;
  }
  const int n = static_cast<int>(g.requests.size());
  int done = 0;
  if (block) {
    MPI_Waitall(n, g.requests.data(), MPI_STATUSES_IGNORE);
    done = 1;
  } else {
    MPI_Testall(n, g.requests.data(), &done, MPI_STATUSES_IGNORE);
  }
  if (done != 0) {
    g.requests.clear();
    g.arenas.clear();
    g.blocks.clear();
  }
}

// --- creation ---------------------------------------------------------------------------

WindowImpl::WindowImpl(MPI_Comm comm, Layout layout, const WindowOptions& options)
    : layout_(std::move(layout)), options_(options) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) {
    throw Error("paramwin: ParameterWindow needs MPI to be initialized and not finalized");
  }
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument("paramwin: ParameterWindow created on MPI_COMM_NULL");
  }
  if (options.transport > Transport::rma || options.wire > WireFormat::float16 ||
      options.layout_check > LayoutCheck::per_donor || options.exposure > Exposure::live) {
    throw InvalidArgument("paramwin: WindowOptions holds an out-of-range enumerator");
  }
  if (options.exposure == Exposure::live && options.wire != WireFormat::native) {
    throw InvalidArgument("paramwin: Exposure::live exposes the trainer's own memory, so its "
                          "wire format must be WireFormat::native");
  }
  if (options.progress_thread) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      throw InvalidArgument("paramwin: WindowOptions::progress_thread needs MPI initialized with "
                            "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
    }
    if (options.progress_interval_us == 0 || options.progress_interval_us > 1000000) {
      throw InvalidArgument("paramwin: progress_interval_us must be in [1, 1000000]");
    }
  }
  try {
    create(comm);
    remember_live(this);
  } catch (...) {
    release();
    throw;
  }
}

void WindowImpl::create(MPI_Comm comm) {
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");

  slots_ = make_slot_layout(layout_, options_.wire);
  if (options_.layout_check == LayoutCheck::strict) {
    check_layouts_strict(slots_.fingerprint);
  }

  check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_comm_),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  check_mpi(MPI_Comm_set_errhandler(node_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int node_size = 0;
  check_mpi(MPI_Comm_size(node_comm_, &node_size), "MPI_Comm_size(node)");

  const std::size_t bytes = segment_bytes(slots_, options_.exposure);
  SharedInfo info;
  void* raw = nullptr;
  // One spare page: MPICH does not always hand out page-aligned segments (seen with one
  // rank per node), so align inside the allocation. Offsets within a page are the same in
  // every process that maps the segment, so peers align their view of it identically.
  check_mpi(MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes + kPage), 1, info.get(),
                                    node_comm_, &raw, &shm_win_),
            "MPI_Win_allocate_shared");
  check_mpi(MPI_Win_set_errhandler(shm_win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  void* base = align_page(raw);
  segment_ = ByteView(static_cast<std::byte*>(base), bytes);
  check_mpi(MPI_Win_create(base, static_cast<MPI_Aint>(bytes), 1, info.get(), comm_, &rma_win_),
            "MPI_Win_create");
  check_mpi(MPI_Win_set_errhandler(rma_win_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  int* model = nullptr;
  int has_model = 0;
  check_mpi(MPI_Win_get_attr(rma_win_, MPI_WIN_MODEL, &model, &has_model), "MPI_Win_get_attr");
  if (has_model == 0 || model == nullptr || *model != MPI_WIN_UNIFIED) {
    throw Error("paramwin: the MPI library offers only the separate RMA memory model; "
                "paramwin's lock-free snapshots need MPI_WIN_UNIFIED");
  }

  auto* h = new (base) SegmentHeader();
  h->magic.store(kMagic, std::memory_order_relaxed);
  h->fingerprint.store(slots_.fingerprint, std::memory_order_relaxed);
  h->slot_bytes.store(slots_.payload_bytes, std::memory_order_relaxed);
  h->slot_stride.store(slots_.stride, std::memory_order_relaxed);
  h->exposure.store(static_cast<std::uint64_t>(options_.exposure), std::memory_order_relaxed);
  h->state.store(static_cast<std::uint64_t>(AgentState::fresh), std::memory_order_relaxed);

  check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, shm_win_), "MPI_Win_lock_all(shm)");
  shm_locked_ = true;
  check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, rma_win_), "MPI_Win_lock_all(rma)");
  rma_locked_ = true;

  // Map every comm rank on this node to its segment.
  shm_base_.assign(static_cast<std::size_t>(size_), nullptr);
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Group node_group = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(comm_, &world_group), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(node_comm_, &node_group), "MPI_Comm_group(node)");
  std::vector<int> node_ranks(static_cast<std::size_t>(node_size));
  std::vector<int> comm_ranks(static_cast<std::size_t>(node_size));
  for (int i = 0; i < node_size; ++i) {
    node_ranks[static_cast<std::size_t>(i)] = i;
  }
  const int translated = MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(),
                                                   world_group, comm_ranks.data());
  MPI_Group_free(&world_group);
  MPI_Group_free(&node_group);
  check_mpi(translated, "MPI_Group_translate_ranks");
  for (int i = 0; i < node_size; ++i) {
    MPI_Aint seg_size = 0;
    int disp_unit = 0;
    void* ptr = nullptr;
    check_mpi(MPI_Win_shared_query(shm_win_, i, &seg_size, &disp_unit, &ptr),
              "MPI_Win_shared_query");
    if (ptr == nullptr || static_cast<std::size_t>(seg_size) < 2 * kPage) {
      throw VerificationError("paramwin: MPI_Win_shared_query returned no usable segment for "
                              "node rank " + std::to_string(i));
    }
    shm_base_[static_cast<std::size_t>(comm_ranks[static_cast<std::size_t>(i)])] =
        static_cast<std::byte*>(align_page(ptr));
  }

  if (options_.verify) {
    verify();
  } else {
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  }
  if (options_.progress_thread) {
    start_progress_thread();
  }
}

void WindowImpl::start_progress_thread() {
  const auto interval = std::chrono::microseconds(options_.progress_interval_us);
  MPI_Comm comm = comm_;
  progress_thread_ = std::jthread([comm, interval](const std::stop_token& stop) {
    // Any MPI call drives MPICH's progress engine, which serves the active messages that
    // emulate other ranks' MPI_Get / MPI_Fetch_and_op on this rank's window.
    while (!stop.stop_requested()) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
      std::this_thread::sleep_for(interval);
    }
  });
}

void WindowImpl::stop_progress_thread() noexcept {
  if (progress_thread_.joinable()) {
    progress_thread_.request_stop();
    progress_thread_.join();
  }
}

void WindowImpl::progress() {
  int flag = 0;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE),
            "MPI_Iprobe (progress)");
  reap(false);
}

void WindowImpl::check_layouts_strict(std::uint64_t slot_fingerprint) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&slot_fingerprint, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_),
            "MPI_Allgather(fingerprints)");
  const auto differs = std::find_if(all.begin(), all.end(),
                                    [&](std::uint64_t f) { return f != all.front(); });
  if (differs == all.end()) {
    return;
  }
  // Every rank saw the same fingerprints, so every rank takes this path: exchange the
  // layouts and explain the first difference identically everywhere.
  const int other = static_cast<int>(differs - all.begin());
  std::string mine = layout_.serialize() + "wire " +
                     std::to_string(static_cast<int>(options_.wire)) + "\n";
  int my_len = checked_int(mine.size(), "serialized layout bytes");
  std::vector<int> lens(static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  std::vector<int> displs(static_cast<std::size_t>(size_), 0);
  for (std::size_t i = 1; i < displs.size(); ++i) {
    displs[i] = displs[i - 1] + lens[i - 1];
  }
  std::string text(static_cast<std::size_t>(displs.back() + lens.back()), '\0');
  check_mpi(MPI_Allgatherv(mine.data(), my_len, MPI_CHAR, text.data(), lens.data(),
                           displs.data(), MPI_CHAR, comm_),
            "MPI_Allgatherv(layouts)");
  auto layout_of = [&](int r) {
    std::string s = text.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                                static_cast<std::size_t>(lens[static_cast<std::size_t>(r)]));
    const std::size_t wire_pos = s.rfind("wire ");
    const std::string wire = s.substr(wire_pos + 5, s.size() - wire_pos - 6);
    return std::pair{Layout::deserialize(std::string_view(s).substr(0, wire_pos)), wire};
  };
  const auto [first, first_wire] = layout_of(0);
  const auto [second, second_wire] = layout_of(other);
  std::string why = Layout::first_difference(first, second);
  if (why.empty()) {
    auto wire_name = [](const std::string& w) {
      static const char* names[] = {"native", "bfloat16", "float16"};
      const int i = std::stoi(w);
      return std::string(i >= 0 && i < 3 ? names[i] : "?");
    };
    why = "wire format " + wire_name(first_wire) + " vs " + wire_name(second_wire);
  }
  throw LayoutMismatch("paramwin: layouts differ across ranks: rank 0 vs rank " +
                       std::to_string(other) + " differ at " + why + " (this is rank " +
                       std::to_string(rank_) + ")");
}

void WindowImpl::verify() {
  // Each rank writes a rank-specific pattern at both ends of its segment; every rank then
  // reads its peers' patterns through shared memory and through MPI_Get. MPICH 4.0.2 + UCX
  // has been seen to return other ranks' bytes silently for misaligned windows.
  SegmentHeader& h = header();
  // Independent of the layout: under LayoutCheck::per_donor ranks differ in layout and size.
  const std::uint64_t salt = kMagic;
  const std::size_t my_tail = segment_.extent(0) - kVerifyWords * 8;
  std::byte* tail = segment_.data() + my_tail;
  for (std::size_t i = 0; i < kVerifyWords; ++i) {
    h.verify[i].store(verify_word(rank_, i, salt), std::memory_order_relaxed);
    const std::uint64_t w = ~verify_word(rank_, i, salt);
    std::memcpy(tail + i * 8, &w, 8);
  }
  check_mpi(MPI_Win_sync(shm_win_), "MPI_Win_sync");
  check_mpi(MPI_Win_sync(rma_win_), "MPI_Win_sync");
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");

  std::vector<int> peers;
  if (size_ <= 64) {
    for (int r = 0; r < size_; ++r) {
      peers.push_back(r);
    }
  } else {
    for (int d : {0, 1, size_ - 1, size_ / 2}) {
      peers.push_back((rank_ + d) % size_);
    }
  }
  // Phase 1: each peer's header (for its slot stride) and head pattern; phase 2: its tail.
  constexpr std::size_t kWords = 2 * kVerifyWords;
  std::vector<std::uint64_t> got(peers.size() * kWords);
  std::vector<HeadWords> heads(peers.size());
  auto sane = [](const HeadWords& head) {
    return head.stride != 0 && head.stride % kPage == 0 && head.exposure <= 1;
  };
  auto tail_of = [](const HeadWords& head) {
    return kPage + slot_count(static_cast<Exposure>(head.exposure)) * head.stride -
           kVerifyWords * 8;
  };
  std::string read_error;  // a local MPI failure must not skip the collective below
  try {
    RmaBatch batch(rma_win_);
    for (std::size_t p = 0; p < peers.size(); ++p) {
      batch.get(&heads[p], sizeof(HeadWords), peers[p], 0);
      batch.get(&got[p * kWords], kVerifyWords * 8, peers[p], kVerifyOffset);
    }
    batch.wait();
    for (std::size_t p = 0; p < peers.size(); ++p) {
      if (sane(heads[p])) {
        batch.get(&got[p * kWords + kVerifyWords], kVerifyWords * 8, peers[p], tail_of(heads[p]));
      }
    }
    batch.wait();
  } catch (const std::exception& e) {
    read_error = e.what();
  }
  int bad = INT_MAX;  // encoded (reader * size + target) of the first failure, INT_MAX if none
  std::string how;
  if (!read_error.empty()) {
    bad = rank_ * size_ + rank_;
    how = read_error;
  }
  for (std::size_t p = 0; p < peers.size() && bad == INT_MAX; ++p) {
    const int target = peers[p];
    if (!sane(heads[p])) {
      bad = rank_ * size_ + target;
      how = "MPI_Get of the header";
      break;
    }
    const std::byte* peer = shm_base_[static_cast<std::size_t>(target)];
    const std::size_t peer_tail = tail_of(heads[p]);
    for (std::size_t i = 0; i < kVerifyWords; ++i) {
      const std::uint64_t want = verify_word(target, i, salt);
      if (got[p * kWords + i] != want || got[p * kWords + kVerifyWords + i] != ~want) {
        bad = rank_ * size_ + target;
        how = "MPI_Get";
        break;
      }
      if (peer != nullptr) {
        const auto* ph = reinterpret_cast<const SegmentHeader*>(peer);
        std::uint64_t tail_word = 0;
        std::memcpy(&tail_word, peer + peer_tail + i * 8, 8);
        if (ph->verify[i].load(std::memory_order_relaxed) != want || tail_word != ~want) {
          bad = rank_ * size_ + target;
          how = "shared-memory load";
          break;
        }
      }
    }
  }
  int first_bad = INT_MAX;
  check_mpi(MPI_Allreduce(&bad, &first_bad, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  // Slot memory is the owner's again; nobody reads it before the first publish.
  std::memset(tail, 0, kVerifyWords * 8);
  if (first_bad != INT_MAX) {
    throw VerificationError(
        "paramwin: window self-check failed: rank " + std::to_string(first_bad / size_) +
        " read bytes from rank " + std::to_string(first_bad % size_) +
        " that the owner did not write" + (how.empty() ? "" : " (via " + how + ")") +
        "; the MPI library returns wrong data for this window (known for MPICH 4.0.2 + UCX "
        "with misaligned segments)");
  }
}

// --- destruction ------------------------------------------------------------------------

WindowImpl::FreeResult WindowImpl::free_mpi() noexcept {
  stop_progress_thread();
  // Reads abandoned at a deadline complete now: every peer is in MPI (the free is collective).
  reap(true);
  FreeResult first;
  auto note = [&](int code, const char* call) {
    if (code != MPI_SUCCESS && first.code == MPI_SUCCESS) {
      first = {code, call};
    }
  };
  if (rma_locked_) {
    note(MPI_Win_unlock_all(rma_win_), "MPI_Win_unlock_all(rma)");
    rma_locked_ = false;
  }
  if (shm_locked_) {
    note(MPI_Win_unlock_all(shm_win_), "MPI_Win_unlock_all(shm)");
    shm_locked_ = false;
  }
  // Each handle is freed once: a failed (collective) free is not retried later.
  if (rma_win_ != MPI_WIN_NULL) {
    note(MPI_Win_free(&rma_win_), "MPI_Win_free(rma)");
    rma_win_ = MPI_WIN_NULL;
  }
  if (shm_win_ != MPI_WIN_NULL) {
    note(MPI_Win_free(&shm_win_), "MPI_Win_free(shm)");
    shm_win_ = MPI_WIN_NULL;
  }
  if (node_comm_ != MPI_COMM_NULL) {
    note(MPI_Comm_free(&node_comm_), "MPI_Comm_free(node)");
    node_comm_ = MPI_COMM_NULL;
  }
  if (comm_ != MPI_COMM_NULL) {
    note(MPI_Comm_free(&comm_), "MPI_Comm_free");
    comm_ = MPI_COMM_NULL;
  }
  return first;
}

void WindowImpl::release() noexcept {
  forget_live(this);
  stop_progress_thread();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) {
    // MPI is gone. Windows alive at MPI_Finalize were freed by its hook (free_at_finalize);
    // anything left cannot be freed any more.
    comm_ = node_comm_ = MPI_COMM_NULL;
    shm_win_ = rma_win_ = MPI_WIN_NULL;
    return;
  }
  (void)free_mpi();
}

WindowImpl::~WindowImpl() { release(); }

void WindowImpl::free_at_finalize() noexcept {
  // Called by the MPI_Finalize hook with the registry's lock held: must not forget_live().
  const FreeResult result = free_mpi();
  // Everything that pointed into the (now freed) segments goes too.
  segment_ = ByteView();
  std::fill(shm_base_.begin(), shm_base_.end(), nullptr);
  if (result.code != MPI_SUCCESS) {
    try {
      finalize_error_ = std::string(result.call) + " failed: " + mpi_error_string(result.code) +
                        " (MPI error code " + std::to_string(result.code) + ")";
    } catch (...) {
      // Out of memory while describing the failure: leave the message empty.
    }
  }
  freed_at_finalize_.store(true, std::memory_order_release);
}

void WindowImpl::close() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0 || freed_at_finalize()) {
    release();
    if (freed_at_finalize()) {
      throw Error("paramwin: ParameterWindow::close() called after MPI_Finalize; MPI_Finalize " +
                  std::string(finalize_error_.empty()
                                  ? "had already freed the window's MPI resources"
                                  : "tried to free the window's MPI resources and failed: " +
                                        finalize_error_));
    }
    throw Error("paramwin: ParameterWindow::close() called after MPI_Finalize; the window's "
                "MPI resources could not be freed");
  }
  forget_live(this);
  const FreeResult result = free_mpi();
  check_mpi(result.code, result.call);
}

// --- queries ----------------------------------------------------------------------------

void WindowImpl::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= size_) {
    throw InvalidArgument(std::string("paramwin: ") + what + " rank " + std::to_string(rank) +
                          " is out of range (window has " + std::to_string(size_) + " ranks)");
  }
}

Transport WindowImpl::transport_for(int rank) const {
  check_rank(rank, "transport_for:");
  const bool same_node = shm_base_[static_cast<std::size_t>(rank)] != nullptr;
  switch (options_.transport) {
    case Transport::rma: return Transport::rma;
    case Transport::shm:
      if (!same_node) {
        throw InvalidArgument("paramwin: rank " + std::to_string(rank) +
                              " is on another node but the window was created with "
                              "Transport::shm; use Transport::automatic or Transport::rma");
      }
      return Transport::shm;
    case Transport::automatic: break;
  }
  return same_node ? Transport::shm : Transport::rma;
}

std::byte* WindowImpl::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_ || !scratch_) {
    scratch_.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})),
                   [](std::byte* p) noexcept { ::operator delete[](p, std::align_val_t{64}); });
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

void WindowImpl::retire_scratch() noexcept {
  if (scratch_) {
    try {
      graveyard_.blocks.push_back(std::move(scratch_));
    } catch (...) {  // no memory to record it: wait for the reads instead
      reap(true);
    }
  }
  scratch_.reset();
  scratch_bytes_ = 0;
}

// --- roster -----------------------------------------------------------------------------

void WindowImpl::set_status(const AgentStatus& status) {
  if (status.state > AgentState::left) {
    throw InvalidArgument("paramwin: set_status with an out-of-range AgentState");
  }
  SegmentHeader& h = header();
  const std::uint64_t seq = h.status_seq.load(std::memory_order_relaxed);
  h.status_seq.store(seq + 1, std::memory_order_relaxed);  // odd: writing
  std::atomic_thread_fence(std::memory_order_release);
  h.iteration.store(static_cast<std::uint64_t>(status.iteration), std::memory_order_relaxed);
  h.age.store(static_cast<std::uint64_t>(status.age), std::memory_order_relaxed);
  h.metric.store(std::bit_cast<std::uint64_t>(status.metric), std::memory_order_relaxed);
  h.generation.store(status.generation, std::memory_order_relaxed);
  h.state.store(static_cast<std::uint64_t>(status.state), std::memory_order_relaxed);
  h.status_seq.store(seq + 2, std::memory_order_release);
  status_ = status;
}

namespace {

RosterEntry make_entry(int rank, const HeadWords& head, const StatusWords& s) {
  RosterEntry e;
  e.rank = rank;
  e.version = head.version;
  e.fingerprint = head.fingerprint;
  e.publish_time = std::bit_cast<double>(head.publish_time);
  e.status_updates = s.seq / 2;
  e.status.iteration = static_cast<std::int64_t>(s.iteration);
  e.status.age = static_cast<std::int64_t>(s.age);
  e.status.metric = std::bit_cast<double>(s.metric);
  e.status.generation = s.generation;
  e.status.state = s.state <= 3 ? static_cast<AgentState>(s.state) : AgentState::left;
  return e;
}

}  // namespace

RosterEntry WindowImpl::read_local_roster(int rank, const SegmentHeader& h) const {
  HeadWords head{};
  StatusWords s{};
  for (;;) {
    s.seq = h.status_seq.load(std::memory_order_acquire);
    if ((s.seq & 1U) != 0) {
      continue;  // the owner is between two stores; it never blocks, so this is brief
    }
    s.iteration = h.iteration.load(std::memory_order_relaxed);
    s.age = h.age.load(std::memory_order_relaxed);
    s.metric = h.metric.load(std::memory_order_relaxed);
    s.generation = h.generation.load(std::memory_order_relaxed);
    s.state = h.state.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.status_seq.load(std::memory_order_relaxed) == s.seq) {
      break;
    }
  }
  head.magic = h.magic.load(std::memory_order_relaxed);
  head.fingerprint = h.fingerprint.load(std::memory_order_relaxed);
  head.version = h.version.load(std::memory_order_acquire);
  head.publish_time = h.publish_time.load(std::memory_order_relaxed);
  return make_entry(rank, head, s);
}

RosterEntry WindowImpl::roster(int rank) const {
  check_rank(rank, "roster:");
  if (rank == rank_ || transport_for(rank) == Transport::shm) {
    return read_local_roster(rank, rank == rank_ ? header() : *shm_header(rank));
  }
  std::vector<RosterEntry> all = roster_all();
  return all[static_cast<std::size_t>(rank)];
}

std::vector<RosterEntry> WindowImpl::roster_all() const {
  std::vector<RosterEntry> out(static_cast<std::size_t>(size_));
  std::vector<int> remote;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || transport_for(r) == Transport::shm) {
      out[static_cast<std::size_t>(r)] =
          read_local_roster(r, r == rank_ ? header() : *shm_header(r));
    } else {
      remote.push_back(r);
    }
  }
  if (remote.empty()) {
    return out;
  }
  // Remote seqlock read in three pipelined phases over all remote ranks: sequence word,
  // header and status block, sequence word again. Retry the ranks whose sequence moved.
  const std::size_t n = remote.size();
  std::vector<std::uint64_t> seq_after(n);
  std::vector<HeadWords> heads(n);
  std::vector<StatusWords> status(n);
  std::vector<int> pending = remote;
  for (int round = 0; !pending.empty(); ++round) {
    if (round > 10000) {
      throw Error("paramwin: roster read did not settle after 10000 rounds");
    }
    std::vector<std::uint64_t> seq_before(pending.size());
    RmaBatch batch(rma_win_);
    for (std::size_t i = 0; i < pending.size(); ++i) {
      batch.get(&seq_before[i], 8, pending[i], kStatusOffset);
    }
    batch.wait();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      batch.get(&heads[slot], sizeof(HeadWords), pending[i], 0);
      batch.get(&status[slot], sizeof(StatusWords), pending[i], kStatusOffset);
    }
    batch.wait();
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      batch.get(&seq_after[slot], 8, pending[i], kStatusOffset);
    }
    batch.wait();
    std::vector<int> again;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const std::size_t slot = static_cast<std::size_t>(std::find(remote.begin(), remote.end(), pending[i]) - remote.begin());
      const std::uint64_t before = seq_before[i];
      if ((before & 1U) != 0 || before != seq_after[slot] || status[slot].seq != before) {
        again.push_back(pending[i]);
      } else {
        out[static_cast<std::size_t>(pending[i])] = make_entry(pending[i], heads[slot], status[slot]);
      }
    }
    pending.swap(again);
  }
  return out;
}

// --- layer binding ----------------------------------------------------------------------

namespace {

template <class Ref>
std::vector<std::size_t> bind_impl(const Layout& layout, std::span<const Ref> refs,
                                   const char* op) {
  const std::string where = std::string("paramwin: ") + op + ": ";
  if (refs.size() != layout.size()) {
    throw InvalidArgument(where + "got " + std::to_string(refs.size()) + " layers, the layout has " +
                          std::to_string(layout.size()));
  }
  std::size_t named = 0;
  for (const Ref& r : refs) {
    named += r.name().empty() ? std::size_t{0} : std::size_t{1};
  }
  if (named != 0 && named != refs.size()) {
    throw InvalidArgument(where + "either name every layer or none (" + std::to_string(named) +
                          " of " + std::to_string(refs.size()) + " are named)");
  }
  std::vector<std::size_t> order(layout.size(), static_cast<std::size_t>(-1));
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const std::size_t layer = named != 0 ? layout.index_of(refs[i].name()) : i;
    if (order[layer] != static_cast<std::size_t>(-1)) {
      throw InvalidArgument(where + "layer '" + layout[layer].name + "' given twice");
    }
    order[layer] = i;
    const LayerSpec& spec = layout[layer];
    const Ref& r = refs[i];
    if (r.count() != spec.count) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects " +
                            std::to_string(spec.count) + " elements, got " +
                            std::to_string(r.count()));
    }
    if (r.dtype() != spec.dtype) {
      throw InvalidArgument(where + "layer " + spec.describe() + " expects dtype " +
                            std::string(dtype_name(spec.dtype)) + ", got " +
                            std::string(dtype_name(r.dtype())));
    }
    if (!r.contiguous()) {
      throw InvalidArgument(where + "layer " + spec.describe() + " is not contiguous");
    }
    if (r.count() != 0 && r.data() == nullptr) {
      throw InvalidArgument(where + "layer " + spec.describe() + " has a null data pointer");
    }
  }
  return order;
}

}  // namespace

std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const ConstLayerRef> refs,
                                     const char* operation) {
  return bind_impl(layout, refs, operation);
}

std::vector<std::size_t> bind_layers(const Layout& layout, std::span<const LayerRef> refs,
                                     const char* operation) {
  return bind_impl(layout, refs, operation);
}

}  // namespace paramwin::detail
