// Creation, progress and destruction of a window (its checks: verify.cpp; its protocols:
// publish.cpp, pull.cpp, roster.cpp).
#include "window/window_impl.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <source_location>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"
#include "window/live_windows.hpp"

namespace paramwin::detail {
namespace {

void* align_page(void* p) {
  const auto u = reinterpret_cast<std::uintptr_t>(p);
  return static_cast<std::byte*>(p) + (round_up(u, kPage) - u);
}

/// The attribute key under which a communicator counts the windows created on it (created
/// once per process; the count is stored in the attribute value itself, so nothing needs
/// freeing, and MPI_Comm_dup does not copy it: a duplicate starts at 0).
int creation_keyval() {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, nullptr),
              "MPI_Comm_create_keyval");
    return k;
  }();
  return keyval;
}

/// Number of windows whose creation started on @p comm before this one; counts this one.
std::uint64_t count_creation(MPI_Comm comm) {
  const int keyval = creation_keyval();
  void* value = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm, keyval, &value, &found), "MPI_Comm_get_attr");
  const std::uintptr_t before = found != 0 ? reinterpret_cast<std::uintptr_t>(value) : 0;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the value is the count, never dereferenced
  check_mpi(MPI_Comm_set_attr(comm, keyval, reinterpret_cast<void*>(before + 1)),
            "MPI_Comm_set_attr");
  return before;
}

/// "file:line:column": the same text in every process of one program.
std::string site_text(const std::source_location& site) {
  return std::string(site.file_name()) + ":" + std::to_string(site.line()) + ":" +
         std::to_string(site.column());
}

/// How long abort_on_unwind waits between its message and MPI_Abort.
constexpr int kAbortPauseMs = 200;

/// PARAMWIN_ABORT_ON_UNWIND set to anything but "" or "0".
bool abort_on_unwind_from_environment() {
  const char* value = std::getenv("PARAMWIN_ABORT_ON_UNWIND");
  return value != nullptr && !std::string_view(value).empty() && std::string_view(value) != "0";
}

}  // namespace

// --- creation ---------------------------------------------------------------------------

WindowImpl::WindowImpl(MPI_Comm comm, Layout layout, const WindowOptions& options,
                       const std::source_location& site, const HostStaging& staging)
    : layout_(std::move(layout)),
      options_(options),
      site_(site_text(site)),
      abort_on_unwind_(options.abort_on_unwind || abort_on_unwind_from_environment()),
      placement_(make_placement(options, staging)),
      hyper_(layout_.make_hyperparameters()),
      roster_hyper_(hyper_.words().begin(), hyper_.words().end()) {
  if (options.memory != Memory::host) {
    gpu_ = placement_.get();
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0 || mpi_finalized()) {
    throw Error("paramwin: ParameterWindow needs MPI to be initialized and not finalized");
  }
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument("paramwin: ParameterWindow created on MPI_COMM_NULL");
  }
  // Counted on every rank before anything that can fail, so that the counts stay in step
  // whatever happens to this creation.
  creation_ = count_creation(comm);
  try {
    create(comm);
    if (options_.name.empty()) {
      note_live_window(live_entry(slots_.fingerprint));
    }
    remember_client(this);
  } catch (...) {
    release();
    throw;
  }
}

void WindowImpl::check_options() const {
  const WindowOptions& o = options_;
  if (o.transport > Transport::rma || o.wire > WireFormat::float16 ||
      o.layout_check > LayoutCheck::per_donor || o.exposure > Exposure::live ||
      !enum_valid(o.memory)) {
    throw InvalidArgument("paramwin: WindowOptions holds an out-of-range enumerator");
  }
  if (o.exposure == Exposure::live && o.wire != WireFormat::native) {
    throw InvalidArgument("paramwin: Exposure::live exposes the trainer's own memory, so its "
                          "wire format must be WireFormat::native");
  }
  placement_->check_options(o);
  if (o.progress_thread) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided != MPI_THREAD_MULTIPLE) {
      throw InvalidArgument("paramwin: WindowOptions::progress_thread needs MPI initialized with "
                            "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
    }
    if (o.progress_interval_us == 0 || o.progress_interval_us > kMaxProgressIntervalUs) {
      throw InvalidArgument("paramwin: progress_interval_us must be in [1, 1000000]");
    }
  }
  const LivenessOptions& l = o.liveness;
  if (!std::isfinite(l.suspect_seconds) || l.suspect_seconds < 0.0 ||
      !std::isfinite(l.suspect_beats) || l.suspect_beats < 0.0) {
    throw InvalidArgument("paramwin: WindowOptions::liveness: suspect_seconds and suspect_beats "
                          "must be finite and >= 0, got " +
                          std::to_string(l.suspect_seconds) + " and " +
                          std::to_string(l.suspect_beats));
  }
}

void WindowImpl::create(MPI_Comm comm) {
  comm_ = Comm::dup(comm);
  rank_ = comm_.rank();
  size_ = comm_.size();
  if (size_ > kMaxPinReaders) {
    throw InvalidArgument("paramwin: a window holds at most " + std::to_string(kMaxPinReaders) +
                          " ranks (the readers' pin bits fill its header page), got " +
                          std::to_string(size_));
  }
  judge_ = std::make_unique<LivenessJudge>(size_, rank_, options_.liveness);
  pin_book_ = std::make_unique<PinBook>(size_, rank_);

  // Everything that decides which collectives follow is agreed on first, in one collective:
  // a rank with bad options, other options or another window throws with all the others,
  // and so does every rank when one of them already holds a live unnamed window that this
  // unnamed one could pair crosswise with (live_windows.hpp).
  std::string creation_error;
  try {
    check_options();
    if (options_.name.empty()) {
      creation_error =
          live_window_conflict(live_entry(make_slot_layout(layout_, options_.wire).fingerprint));
    }
  } catch (const Error& e) {
    creation_error = e.what();
  }
  const bool any_rma = agree_on_creation(creation_error);
  // Every rank's slots live in the same kind of memory: a reader maps or reads its donors'
  // slots as it keeps its own.
  if (!same_on_all_ranks(comm_.get(), static_cast<std::uint64_t>(options_.memory))) {
    throw InvalidArgument("paramwin: WindowOptions::memory differs across ranks (this rank: " +
                          std::string(enum_name(options_.memory)) +
                          "); every rank of a window must create it with the same memory");
  }

  slots_ = make_slot_layout(layout_, options_.wire);
  if (options_.layout_check == LayoutCheck::strict) {
    check_layouts_strict(slots_.fingerprint);
  }
  node_comm_ = Comm::split_shared(comm_.get());
  check_node_split();
  // Whether anyone reads this rank over RMA (its owner must then let MPI progress): a rank
  // on another node, or a rank whose transport is rma (transports may differ across ranks).
  rma_readers_ = size_ > 1 && (any_rma || node_comm_.size() < size_);
  host_slots_ = placement_->host_slots(options_.exposure, rma_readers_);
  check_memory();
  create_windows();
  // What follows the collective creations is local until verify(): a rank that fails here
  // must not leave the others waiting in verify()'s collectives.
  std::exception_ptr local_error;
  try {
    init_segment();
    map_node_segments();
  } catch (...) {
    local_error = std::current_exception();
  }
  agree_or_rethrow<VerificationError>(comm_.get(), local_error);
  placement_->create(PlacementSetup{.comm = comm_.get(),
                                    .node_comm = node_comm_.get(),
                                    .node_to_comm = node_to_comm_,
                                    .rank = rank_,
                                    .size = size_,
                                    .options = &options_,
                                    .slots = &slots_,
                                    .site = &site_});

  if (options_.verify) {
    verify();
  } else {
    check_mpi(MPI_Barrier(comm_.get()), "MPI_Barrier");
  }
  if (options_.progress_thread) {
    start_progress_thread();
  }
}

void WindowImpl::create_windows() {
  const std::size_t bytes = segment_bytes(slots_, host_slots_);
  const Info info = Info::shared_noncontig();
  void* raw = nullptr;
  // One spare page: MPICH does not always hand out page-aligned segments (seen with one
  // rank per node), so align inside the allocation. Offsets within a page are the same in
  // every process that maps the segment, so peers align their view of it identically.
  // check_memory() has refused what the node cannot hold; should MPI fail anyway, every
  // rank throws (the failing ones MpiError, the others Error naming them) rather than wait
  // in the next collective. (MPICH agrees on the outcome within the node communicator, so
  // the ranks holding a shared window to free are all the ranks of their node.)
  std::exception_ptr error;
  try {
    shm_win_ = Win::allocate_shared(static_cast<MPI_Aint>(bytes + kPage), info.get(),
                                    node_comm_.get(), &raw);
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(comm_.get(), error);
  void* base = align_page(raw);
  segment_ = ByteView(static_cast<std::byte*>(base), bytes);
  // A communicator of one process has no remote reader, so it gets no RMA window: Open MPI
  // 4.1 cannot create one there under MPI_THREAD_MULTIPLE (osc/rdma needs a BTL with RDMA
  // to every member, and btl/self has none; osc/pt2pt refuses MPI_THREAD_MULTIPLE), and
  // MPI_Win_create fails with MPI_ERR_WIN (docs/rma-semantics.md).
  if (size_ == 1) {
    return;
  }
  try {
    rma_win_ = Win::create(base, static_cast<MPI_Aint>(bytes), info.get(), comm_.get());
  } catch (...) {
    error = std::current_exception();
  }
  agree_or_rethrow<Error>(comm_.get(), error);
}

void WindowImpl::init_segment() {
  int* model = nullptr;
  int has_model = 0;
  const MPI_Win model_win = rma_win_ ? rma_win_.get() : shm_win_.get();
  check_mpi(MPI_Win_get_attr(model_win, MPI_WIN_MODEL, &model, &has_model), "MPI_Win_get_attr");
  if (has_model == 0 || model == nullptr || *model != MPI_WIN_UNIFIED) {
    throw Error("paramwin: the MPI library offers only the separate RMA memory model; "
                "paramwin's lock-free snapshots need MPI_WIN_UNIFIED");
  }

  auto* h = new (segment_.data()) SegmentHeader();
  h->magic.store(kMagic, std::memory_order_relaxed);
  h->fingerprint.store(slots_.fingerprint, std::memory_order_relaxed);
  h->slot_bytes.store(slots_.payload_bytes, std::memory_order_relaxed);
  h->slot_stride.store(slots_.stride, std::memory_order_relaxed);
  h->exposure.store(static_cast<std::uint64_t>(options_.exposure), std::memory_order_relaxed);
  h->host_slots.store(host_slots_, std::memory_order_relaxed);
  h->memory.store(static_cast<std::uint64_t>(options_.memory), std::memory_order_relaxed);
  h->state.store(static_cast<std::uint64_t>(AgentState::fresh), std::memory_order_relaxed);
  h->previous_iteration.store(kNoReport, std::memory_order_relaxed);
  init_liveness(*h);

  shm_win_.lock_all(MPI_MODE_NOCHECK);
  if (rma_win_) {
    rma_win_.lock_all(MPI_MODE_NOCHECK);
  }
}

void WindowImpl::map_node_segments() {
  const int node_size = node_comm_.size();
  shm_base_.assign(static_cast<std::size_t>(size_), nullptr);
  Group world_group;
  Group node_group;
  check_mpi(MPI_Comm_group(comm_.get(), world_group.out()), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(node_comm_.get(), node_group.out()), "MPI_Comm_group(node)");
  std::vector<int> node_ranks(static_cast<std::size_t>(node_size));
  std::vector<int> comm_ranks(static_cast<std::size_t>(node_size));
  for (int i = 0; i < node_size; ++i) {
    node_ranks[static_cast<std::size_t>(i)] = i;
  }
  const int translated = MPI_Group_translate_ranks(node_group.get(), node_size, node_ranks.data(),
                                                   world_group.get(), comm_ranks.data());
  check_mpi(translated, "MPI_Group_translate_ranks");
  node_to_comm_ = comm_ranks;
  for (int i = 0; i < node_size; ++i) {
    MPI_Aint seg_size = 0;
    void* ptr = shm_win_.shared_query(i, &seg_size);
    if (ptr == nullptr || static_cast<std::size_t>(seg_size) < 2 * kPage) {
      throw VerificationError("paramwin: MPI_Win_shared_query returned no usable segment for "
                              "node rank " +
                              std::to_string(i));
    }
    shm_base_[static_cast<std::size_t>(comm_ranks[static_cast<std::size_t>(i)])] =
        static_cast<std::byte*>(align_page(ptr));
  }
}

// --- progress ---------------------------------------------------------------------------

void WindowImpl::start_progress_thread() {
  const auto interval = std::chrono::microseconds(options_.progress_interval_us);
  MPI_Comm comm = comm_.get();
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
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_.get(), &flag, MPI_STATUS_IGNORE),
            "MPI_Iprobe (progress)");
  graveyard_.reap(false);
}

void WindowImpl::adopt(Graveyard& other) {
  // Room first: the inserts below then cannot throw halfway (copies of handles and pointers).
  graveyard_.requests.reserve(graveyard_.requests.size() + other.requests.size());
  graveyard_.arenas.reserve(graveyard_.arenas.size() + other.arenas.size());
  graveyard_.blocks.reserve(graveyard_.blocks.size() + other.blocks.size());
  graveyard_.requests.insert(graveyard_.requests.end(), other.requests.begin(),
                             other.requests.end());
  graveyard_.arenas.insert(graveyard_.arenas.end(), other.arenas.begin(), other.arenas.end());
  graveyard_.blocks.insert(graveyard_.blocks.end(), other.blocks.begin(), other.blocks.end());
  other.requests.clear();
  other.arenas.clear();
  other.blocks.clear();
}

// --- destruction ------------------------------------------------------------------------

LiveWindow WindowImpl::live_entry(std::uint64_t fingerprint) const {
  return LiveWindow{this,
                    comm_.get(),
                    options_.layout_check,
                    options_.memory,
                    options_.verify,
                    fingerprint,
                    site_};
}

MpiStatus WindowImpl::free_mpi() noexcept {
  forget_live_window(this);  // while its communicator is still valid
  stop_progress_thread();
  // Reads abandoned at a deadline complete now: every peer is in MPI (the free is collective).
  graveyard_.reap(true);
  MpiStatus first;
  first.note(placement_->free());
  first.note(rma_win_.free_noexcept());
  first.note(shm_win_.free_noexcept());
  first.note(node_comm_.free_noexcept());
  first.note(comm_.free_noexcept());
  return first;
}

void WindowImpl::release() noexcept {
  if (abandoned_) return;
  forget_client(this);
  if (mpi_finalized()) {
    // MPI is gone. Windows alive at MPI_Finalize were freed by the registry
    // (free_at_finalize); the handles left only forget themselves, without MPI calls.
    forget_live_window(this);
    stop_progress_thread();
    placement_->abandon();
    (void)rma_win_.free_noexcept();
    (void)shm_win_.free_noexcept();
    (void)node_comm_.free_noexcept();
    (void)comm_.free_noexcept();
    return;
  }
  (void)free_mpi();
}

void WindowImpl::renew_incarnation() noexcept { detail::renew_incarnation(header()); }

void WindowImpl::abandon() noexcept {
  if (abandoned_) return;
  forget_client(this);
  forget_live_window(this);
  stop_progress_thread();
  placement_->abandon();
  try {
    // Reads abandoned at a deadline may still land in their buffers (a live target's) or
    // never complete (a dead one's): the buffers are kept until the process ends.
    static std::mutex mutex;
    static auto* kept = new std::vector<Graveyard>();  // never freed, on purpose
    scratch_.retire(graveyard_);
    const std::lock_guard<std::mutex> lock(mutex);
    kept->push_back(std::move(graveyard_));
  } catch (...) {
    // Out of memory: the buffers go with the window (a read still in flight would then
    // write into freed memory; nothing better is possible without waiting for it).
  }
  rma_win_.leak();
  shm_win_.leak();
  node_comm_.leak();
  comm_.leak();
  abandoned_ = true;
}

WindowImpl::~WindowImpl() {
  if (std::uncaught_exceptions() > uncaught_at_creation_) {
    report_unwinding();
  }
  release();
}

void WindowImpl::report_unwinding() const noexcept {
  // Nothing collective is left to wait for after MPI_Finalize or on a communicator of one.
  if (size_ <= 1 || freed_at_finalize() || mpi_finalized()) {
    return;
  }
  try {
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    const std::string window = (options_.name.empty() ? std::string("an unnamed window")
                                                      : "window '" + options_.name + "'") +
                               " created at " + site_;
    std::string text =
        "paramwin: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
        " (world rank " + std::to_string(world_rank) + ") leaves " + window +
        " with an exception in flight (its destructor runs during stack unwinding); ";
    if (abort_on_unwind_) {
      text += "abort_on_unwind is set (WindowOptions::abort_on_unwind or "
              "PARAMWIN_ABORT_ON_UNWIND), so it aborts the job now (MPI_Abort)\n";
    } else {
      text += "freeing a window is collective, so this rank now waits until the other " +
              std::to_string(size_ - 1) +
              " rank(s) of its communicator free it too, and hangs if they carry on "
              "(WindowOptions::abort_on_unwind or PARAMWIN_ABORT_ON_UNWIND=1 abort the job "
              "instead)\n";
    }
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  } catch (...) {
    // Out of memory while describing it: the free below still happens (or the abort).
    std::fputs("paramwin: a window is being freed while an exception propagates\n", stderr);
  }
  if (abort_on_unwind_) {
    // MPICH's Hydra dropped every line of the job's output (this one and MPI_Abort's own)
    // in about 1 abort in 7 when MPI_Abort followed the write at once: give the launcher a
    // moment to forward it first.
    std::this_thread::sleep_for(std::chrono::milliseconds(kAbortPauseMs));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void WindowImpl::free_at_finalize() noexcept {
  // Called by the finalize registry, which has unlisted this window already.
  const MpiStatus result = free_mpi();
  // Everything that pointed into the (now freed) segments goes too.
  segment_ = ByteView();
  std::fill(shm_base_.begin(), shm_base_.end(), nullptr);
  if (!result.ok()) {
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
  if (mpi_finalized() || freed_at_finalize()) {
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
  forget_client(this);
  free_mpi().check();
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

}  // namespace paramwin::detail
