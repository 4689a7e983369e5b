#pragma once
/// @file options.hpp
/// Options of a window and of a pull, and the records publish and pull return.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/hyper.hpp"

namespace paramwin {

/// How a donor's memory is read.
enum class Transport : std::uint8_t {
  automatic = 0,  ///< shared memory for donors on this node, RMA (MPI_Get) for the others
  shm = 1,        ///< shared memory only; a donor on another node is an error
  rma = 2,        ///< MPI_Get for every donor (the multi-node path, testable on one node)
};

/// Lower-case name of @p transport ("auto", "shm", "rma").
[[nodiscard]] std::string_view transport_name(Transport transport) noexcept;

/// Element format of the published copy (the bytes readers move).
enum class WireFormat : std::uint8_t {
  native = 0,    ///< each layer in its own dtype
  bfloat16 = 1,  ///< float32 layers stored as bfloat16 (float64/16-bit layers stay native)
  float16 = 2,   ///< float32 layers stored as IEEE float16 (float64/16-bit layers stay native)
};

/// How an agent exposes its parameters.
enum class Exposure : std::uint8_t {
  snapshot = 0,  ///< publish copies into a versioned double buffer: readers never see a torn state
  live = 1,      ///< the window memory *is* the trainer's parameters (live_span): publish is free,
                 ///< readers see whatever is there, with no snapshot guarantee
};

/// How a pull reads its donors.
enum class ReadMode : std::uint8_t {
  automatic = 0,   ///< same-node-only pulls pin and stream into the output in one pass;
                   ///< pulls with RMA donors read optimistically and pin only after retries
  optimistic = 1,  ///< never pin first: read, validate, retry (pin after optimistic_attempts)
  pinned = 2,      ///< pin every donor before reading (its owner skips the publish that would
                   ///< overwrite the slot being read)
};

/// Where a pull's RMA reads land (docs/rma-semantics.md, "Direct landing").
enum class Landing : std::uint8_t {
  /// ParameterWindow::pull: transactional. An Agent picks per rebirth (ReadOptions::landing):
  /// direct when a pull that fails midway cannot leave it training on partly written
  /// parameters (mixing.momentum 0 and a reset callback), else transactional.
  automatic = 0,
  /// Read into a library scratch, validate, then copy into the caller's memory: if the pull
  /// throws, the caller's memory is unchanged.
  transactional = 1,
  /// Pin every donor's slot first (it then cannot tear), then land its bytes straight in the
  /// caller's memory (same wire type as the layer, one donor, no deadline) or widen/accumulate
  /// chunk buffers into it as they land: no whole-model scratch, no final copy. Given up: a
  /// pull that fails after its first write (deadline, MPI error, donor gone) leaves the
  /// caller's memory partly written and throws PartialPullError. Pulls whose donors are all on
  /// this node already read pinned slots straight into the caller's memory without that risk
  /// and stay transactional; live donors (Exposure::live) are read transactionally.
  direct = 2,
};

/// Lower-case name of @p landing ("auto", "transactional", "direct").
[[nodiscard]] std::string_view landing_name(Landing landing) noexcept;

/// How strictly window creation compares layouts across ranks.
enum class LayoutCheck : std::uint8_t {
  strict = 0,     ///< every rank must have the same layout (else LayoutMismatch everywhere)
  per_donor = 1,  ///< layouts may differ; a pull from an incompatible donor is a DonorError
};

/// Largest WindowOptions::progress_interval_us (one second).
inline constexpr unsigned kMaxProgressIntervalUs = 1000000;
/// Smallest PullOptions::chunk_bytes other than 0 (the library default).
inline constexpr std::size_t kMinChunkBytes = 256;
/// Largest PullOptions::chunk_bytes.
inline constexpr std::size_t kMaxChunkBytes = std::size_t{1} << 30;

/// Options fixed when a window is created.
///
/// Window creation agrees on some fields across the ranks before anything else (one
/// MPI_Allreduce) and throws InvalidArgument on every rank when they differ: verify,
/// layout_check and the window's identity (name, or creation site when unnamed, and creation
/// count, see name). The others are this rank's own choice and may differ between ranks:
/// transport, exposure (readers learn each donor's exposure from its header),
/// stage_through_host, progress_thread, progress_interval_us and abort_on_unwind; wire is compared
/// with the layout (LayoutMismatch under LayoutCheck::strict, an incompatible donor under
/// LayoutCheck::per_donor).
struct WindowOptions {
  Transport transport = Transport::automatic;      ///< donor transport
  WireFormat wire = WireFormat::native;            ///< published element format
  LayoutCheck layout_check = LayoutCheck::strict;  ///< when layouts are compared
  bool verify = true;                      ///< self-check remote reads at creation (recommended)
  bool stage_through_host = false;         ///< force the host staging path (tests the device path)
  Exposure exposure = Exposure::snapshot;  ///< snapshot (copying publish) or live (zero-copy)
  /// Start a thread that polls MPI so that RMA readers are served while this rank computes
  /// (needs MPI_THREAD_MULTIPLE). See docs/rma-semantics.md.
  bool progress_thread = false;
  unsigned progress_interval_us = 200;  ///< sleep between two polls of the progress thread
  /// The window's name, for its identity check and its error messages (default: unnamed).
  /// Window creation is collective, so the windows of one communicator pair up by the
  /// order in which they are created; creation compares each window's identity and the
  /// number of windows created on the communicator so far across ranks, and throws
  /// InvalidArgument on every rank ("windows must be created in the same order on every
  /// rank") when they differ, before any memory is allocated. A named window's identity is
  /// its name alone, so the ranks may create it from different places in the code. An
  /// unnamed window's identity is the place that created it (the constructor's
  /// std::source_location: file, line and column), so unnamed windows must be created at the
  /// same place on every rank (the same program); name windows that the ranks create from
  /// different places (different branches, MPMD programs).
  std::string name{};
  /// When an exception unwinds this rank past the window (its destructor runs during stack
  /// unwinding) on a communicator of more than one rank, print the diagnostic the
  /// destructor prints then (see ~ParameterWindow) and end the whole job with
  /// MPI_Abort(MPI_COMM_WORLD, 1) instead of waiting in the collective free for ranks that
  /// may never come (for batch jobs that should fail fast; it aborts even when every rank
  /// unwinds together). Setting the
  /// environment variable PARAMWIN_ABORT_ON_UNWIND to anything but "" or "0" when the window
  /// is created turns it on too. This rank's own choice (not compared across ranks).
  bool abort_on_unwind = false;
};

/// How donors are combined.
enum class Reduction : std::uint8_t {
  mean = 0,      ///< arithmetic mean of the donors
  weighted = 1,  ///< sum(w_i x_i) / sum(w_i); weights finite, >= 0, positive sum
};

/// What a pull does with a donor whose snapshot holds NaN or infinity.
enum class NonFinitePolicy : std::uint8_t {
  fail = 0,        ///< throw DonorError, output untouched
  skip_donor = 1,  ///< leave that donor out (fails if none is left)
  allow = 2,       ///< no check: non-finite values propagate
};

/// Options of one pull.
struct PullOptions {
  Reduction reduction = Reduction::mean;  ///< how the donors are combined
  /// One per donor, for Reduction::weighted: finite and >= 0, with a finite sum > 0.
  std::vector<double> weights{};
  double momentum = 0.0;  ///< out = momentum*out + (1-momentum)*mix, in [0, 1)
  NonFinitePolicy non_finite = NonFinitePolicy::fail;  ///< donors holding NaN/inf
  ReadMode read_mode = ReadMode::automatic;            ///< pin, optimistic, or chosen per donor
  unsigned optimistic_attempts = 4;  ///< lock-free tries before a donor is pinned (0: pin at once)
  /// Bytes per chunk of the staged pass (RMA donors, live donors, ReadMode::optimistic);
  /// 0: library default (4 MiB with RMA donors, else 32 KiB). Direct same-node pulls read
  /// each layer in one pass whatever this says.
  std::size_t chunk_bytes = 0;
  /// Deadline for the RMA part of the pull, in seconds (0: none). Past it the pull throws
  /// TimeoutError with the output unchanged; reads still in flight complete in the
  /// background (the window keeps their buffers) and the window stays usable. Same-node
  /// (shared-memory) reads never wait for a donor, so no deadline applies to them.
  double timeout_seconds = 0.0;
  /// Where RMA reads land: Landing::transactional (and automatic) reads into a scratch and
  /// commits once everything is validated; Landing::direct lands in the caller's memory under
  /// pins (needs ReadMode::automatic or pinned) and, if it fails after its first write, throws
  /// PartialPullError instead of leaving the memory unchanged.
  Landing landing = Landing::automatic;
};

/// What one pull read from one donor.
struct DonorRead {
  int rank = -1;                         ///< donor rank in the window's communicator
  std::uint64_t version = 0;             ///< the donor's publish version that was read
  std::uint64_t stamp = 0;               ///< the stamp the donor published with that version
  Transport transport = Transport::shm;  ///< how it was read (shm or rma)
  std::size_t bytes = 0;                 ///< bytes moved from the donor
  unsigned attempts = 0;                 ///< reads started (1 unless a publish overlapped)
  bool pinned = false;                   ///< the final read pinned the donor's slot
  bool skipped = false;  ///< left out (non-finite values, NonFinitePolicy::skip_donor)
  double weight = 0.0;   ///< normalised weight applied (0 if skipped)
  double metric = 0.0;   ///< donor's roster metric when it was read
  /// The hyperparameters the donor published with that very version (read inside the same
  /// seqlock as its layers; empty when the layout declares none).
  Hyperparameters hyper{};
};

/// What a pull did.
struct PullResult {
  std::vector<DonorRead> donors{};  ///< in the order the donors were given
  std::size_t bytes = 0;            ///< bytes moved from all donors
  double seconds = 0.0;             ///< wall time of the pull
  /// Landing::direct when the pull landed RMA reads straight in the caller's memory (it could
  /// have left it partly written); else Landing::transactional.
  Landing landing = Landing::transactional;
};

/// What a publish did.
struct PublishResult {
  bool published = false;     ///< false when skipped because a reader pinned the slot
  std::uint64_t version = 0;  ///< the owner's version after this call
  double seconds = 0.0;       ///< wall time of the publish
};

}  // namespace paramwin
