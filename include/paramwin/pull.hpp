#pragma once
/// @file pull.hpp
/// What a pull takes (read mode, landing, reduction, non-finite policy: PullOptions) and
/// returns (PullResult, one DonorRead per donor), and what a publish returns.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "paramwin/enum_names.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/window_options.hpp"

namespace paramwin {

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

/// Smallest PullOptions::chunk_bytes other than 0 (the library default).
inline constexpr std::size_t kMinChunkBytes = 256;
/// Largest PullOptions::chunk_bytes.
inline constexpr std::size_t kMaxChunkBytes = std::size_t{1} << 30;

namespace detail {
inline constexpr EnumName<ReadMode> kReadModeNames[] = {{ReadMode::automatic, "auto"},
                                                        {ReadMode::optimistic, "optimistic"},
                                                        {ReadMode::pinned, "pinned"}};
inline constexpr EnumName<ReadMode> kReadModeAliases[] = {{ReadMode::automatic, "automatic"}};
inline constexpr EnumName<Landing> kLandingNames[] = {{Landing::automatic, "auto"},
                                                      {Landing::transactional, "transactional"},
                                                      {Landing::direct, "direct"}};
inline constexpr EnumName<Landing> kLandingAliases[] = {{Landing::automatic, "automatic"}};
inline constexpr EnumName<Reduction> kReductionNames[] = {{Reduction::mean, "mean"},
                                                          {Reduction::weighted, "weighted"}};
inline constexpr EnumName<NonFinitePolicy> kNonFiniteNames[] = {{NonFinitePolicy::fail, "fail"},
                                                                {NonFinitePolicy::skip_donor,
                                                                 "skip_donor"},
                                                                {NonFinitePolicy::allow, "allow"}};
inline constexpr EnumName<NonFinitePolicy> kNonFiniteAliases[] = {
    {NonFinitePolicy::skip_donor, "skip"}};
}  // namespace detail
/// Names of ReadMode.
template <>
inline constexpr EnumTable<ReadMode> enum_table<ReadMode>{"read mode", detail::kReadModeNames,
                                                          detail::kReadModeAliases};
/// Names of Landing.
template <>
inline constexpr EnumTable<Landing> enum_table<Landing>{"landing", detail::kLandingNames,
                                                        detail::kLandingAliases};
/// Names of Reduction.
template <>
inline constexpr EnumTable<Reduction> enum_table<Reduction>{"reduction", detail::kReductionNames};
/// Names of NonFinitePolicy.
template <>
inline constexpr EnumTable<NonFinitePolicy> enum_table<NonFinitePolicy>{"non-finite policy",
                                                                        detail::kNonFiniteNames,
                                                                        detail::kNonFiniteAliases};

/// Lower-case name of @p landing ("auto", "transactional", "direct").
[[nodiscard]] constexpr std::string_view landing_name(Landing landing) noexcept {
  return enum_name(landing);
}

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
