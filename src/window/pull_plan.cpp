// Pull planning: checks of the request, the donors' headers (never published, incompatible),
// the chunk plan and scratch size, weights, and the non-finite policy.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "detail/mpi_check.hpp"
#include "paramwin/error.hpp"
#include "window/pull_engine.hpp"

namespace paramwin::detail {

void PullEngine::validate(std::span<const int> donors) const {
  const std::string where = "paramwin: pull: ";
  if (donors.empty()) {
    throw InvalidArgument(where + "the donor list is empty");
  }
  for (std::size_t i = 0; i < donors.size(); ++i) {
    w_.check_rank(donors[i], "pull: donor");
    if (donors[i] == w_.rank()) {
      throw InvalidArgument(where + "donor " + std::to_string(donors[i]) + " is this rank itself");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (donors[j] == donors[i]) {
        throw InvalidArgument(where + "donor " + std::to_string(donors[i]) +
                              " is listed twice (positions " + std::to_string(j) + " and " +
                              std::to_string(i) + ")");
      }
    }
  }
  if (options_.reduction == Reduction::mean && !options_.weights.empty()) {
    throw InvalidArgument(where + "weights given with Reduction::mean; use Reduction::weighted");
  }
  if (options_.reduction == Reduction::weighted) {
    if (options_.weights.size() != donors.size()) {
      throw InvalidArgument(where + "got " + std::to_string(options_.weights.size()) +
                            " weights for " + std::to_string(donors.size()) + " donors");
    }
    double sum = 0.0;
    for (std::size_t i = 0; i < donors.size(); ++i) {
      const double wi = options_.weights[i];
      if (!std::isfinite(wi) || wi < 0.0) {
        throw InvalidArgument(where + "weight " + std::to_string(i) + " (donor " +
                              std::to_string(donors[i]) + ") is " + std::to_string(wi) +
                              "; weights must be finite and >= 0");
      }
      sum += wi;
    }
    if (!(sum > 0.0)) {
      throw InvalidArgument(where + "weights sum to 0");
    }
    if (!std::isfinite(sum)) {
      throw InvalidArgument(where + "weights sum to infinity (their sum overflows a double); " +
                            "scale them down: only their ratios matter");
    }
  } else if (options_.reduction != Reduction::mean) {
    throw InvalidArgument(where + "unknown reduction");
  }
  if (!std::isfinite(options_.momentum) || options_.momentum < 0.0 || options_.momentum >= 1.0) {
    throw InvalidArgument(where + "momentum " + std::to_string(options_.momentum) +
                          " is outside [0, 1)");
  }
  if (options_.non_finite > NonFinitePolicy::allow) {
    throw InvalidArgument(where + "unknown non-finite policy");
  }
  if (options_.read_mode > ReadMode::pinned) {
    throw InvalidArgument(where + "unknown read mode");
  }
  if (options_.landing > Landing::direct) {
    throw InvalidArgument(where + "unknown landing (valid: automatic, transactional, direct)");
  }
  if (options_.landing == Landing::direct && options_.read_mode == ReadMode::optimistic) {
    throw InvalidArgument(where + "Landing::direct reads pinned slots; ReadMode::optimistic "
                                  "never pins first (use ReadMode::automatic or pinned)");
  }
  if (const std::string e = output_->donor_limit_error(donors.size()); !e.empty()) {
    throw InvalidArgument(where + e);
  }
  if (!std::isfinite(options_.timeout_seconds) || options_.timeout_seconds < 0.0) {
    throw InvalidArgument(where + "timeout_seconds " + std::to_string(options_.timeout_seconds) +
                          " must be finite and >= 0 (0: no deadline)");
  }
  if (options_.chunk_bytes != 0 &&
      (options_.chunk_bytes < kMinChunkBytes || options_.chunk_bytes > kMaxChunkBytes)) {
    throw InvalidArgument(where + "chunk_bytes " + std::to_string(options_.chunk_bytes) +
                          " is outside [256, 2^30] (0 picks the default)");
  }
}

void PullEngine::read_heads(bool pin) {
  HeadWords* heads = arena_->make<HeadWords>(donors_.size());
  std::uint64_t* metrics = arena_->make<std::uint64_t>(donors_.size());
  {
    const InFlight in_flight(*this);
    for (std::size_t i = 0; i < donors_.size(); ++i) {
      donors_[i].reader->start_head(donors_[i], heads[i], metrics[i], pin);
    }
    wait_lane(0);
  }
  for (std::size_t i = 0; i < donors_.size(); ++i) {
    Donor& d = donors_[i];
    if (heads[i].magic != kMagic) {
      throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                   " has no valid window header");
    }
    if (heads[i].fingerprint != w_.slots().fingerprint) {
      throw DonorError(d.rank, "paramwin: pull: donor " + std::to_string(d.rank) +
                                   " has an incompatible layout or wire format (fingerprint " +
                                   std::to_string(heads[i].fingerprint) + ", this rank " +
                                   std::to_string(w_.slots().fingerprint) + ")");
    }
    if (heads[i].version == 0) {
      throw DonorError(d.rank,
                       "paramwin: pull: donor " + std::to_string(d.rank) + " has never published");
    }
    d.live = heads[i].exposure == static_cast<std::uint64_t>(Exposure::live);
    d.version = heads[i].version;
    d.bad_layer = heads[i].bad_layer[heads[i].version & 1U];
    d.stamp = heads[i].stamp[heads[i].version & 1U];
    d.metric = std::bit_cast<double>(metrics[i]);
  }
}

void PullEngine::plan_chunks() {
  std::size_t reader_chunk = 0;  // the largest chunk a reader of the pull asks for
  for (const Reader* r : readers_) {
    reader_chunk = std::max(reader_chunk, r->chunk_bytes());
    any_fetch_ = any_fetch_ || r->fetches();
  }
  const std::size_t chunk_bytes = options_.chunk_bytes != 0 ? options_.chunk_bytes : reader_chunk;
  const Layout& layout = w_.layout();
  acc_offset_.resize(layout.size());
  std::size_t acc_bytes = 0;
  std::size_t max_chunk_wire = 0;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    acc_offset_[l] = acc_bytes;
    const LayerSpec& spec = layout[l];
    acc_bytes = round_up(acc_bytes + spec.count * acc_size(spec.dtype), kLayerAlign);
    const std::size_t wsize = dtype_size(w_.slots().entries[l].wire);
    const std::size_t per_chunk = std::max<std::size_t>(1, chunk_bytes / wsize);
    for (std::size_t first = 0; first < spec.count; first += per_chunk) {
      const std::size_t n = std::min(per_chunk, spec.count - first);
      chunks_.push_back(Chunk{l, first, n});
      max_chunk_wire = std::max(max_chunk_wire, n * wsize);
    }
  }
  scratch_bytes_ = std::max<std::size_t>(acc_bytes, 64);
  if (const std::size_t nh = w_.slots().hyper_count; nh != 0) {
    std::uint64_t* hyper = arena_->make<std::uint64_t>(donors_.size() * nh);
    for (std::size_t i = 0; i < donors_.size(); ++i) donors_[i].hyper = hyper + i * nh;
  }
  if (any_fetch_) {
    const std::size_t stride = round_up(max_chunk_wire, kLayerAlign);
    const auto n_fetched =
        static_cast<std::size_t>(std::count_if(donors_.begin(), donors_.end(),
                                               [](const Donor& d) { return d.reader->fetches(); }));
    std::byte* buffers = arena_->make_for_overwrite<std::byte>(2 * n_fetched * stride);
    std::size_t k = 0;
    for (Donor& d : donors_) {
      if (d.reader->fetches()) {
        d.buffers[0] = buffers + (2 * k) * stride;
        d.buffers[1] = buffers + (2 * k + 1) * stride;
        ++k;
      }
    }
  }
}

void PullEngine::normalise_weights() {
  double sum = 0.0;
  for (const Donor& d : donors_) {
    sum += d.skipped ? 0.0 : d.user_weight;
  }
  if (!(sum > 0.0)) {
    const Donor& last = donors_.back();
    throw DonorError(last.rank, "paramwin: pull: every donor was left out for non-finite "
                                "values (NonFinitePolicy::skip_donor); nothing to average");
  }
  for (Donor& d : donors_) {
    d.weight = d.skipped ? 0.0 : d.user_weight / sum;
  }
}

/// Marks @p d non-finite from its slot's finiteness record (live slots have none).
void PullEngine::note_record(Donor& d) const {
  if (d.live || d.bad_layer == 0 || d.bad_layer == kUnknownFinite) {
    return;
  }
  d.non_finite = true;
  d.bad_index = static_cast<std::size_t>(d.bad_layer - 1);
}

/// Applies NonFinitePolicy to donors marked non-finite; returns true if one was dropped.
bool PullEngine::apply_non_finite() {
  bool dropped = false;
  for (Donor& d : donors_) {
    if (d.skipped || !d.non_finite || d.torn || options_.non_finite == NonFinitePolicy::allow) {
      continue;
    }
    if (options_.non_finite == NonFinitePolicy::fail) {
      throw DonorError(d.rank,
                       "paramwin: pull: donor " + std::to_string(d.rank) + " (version " +
                           std::to_string(d.version) + ") holds NaN or infinity in layer " +
                           w_.layout()[std::min(d.bad_index, w_.layout().size() - 1)].describe());
    }
    d.skipped = true;
    dropped = true;
    unpin(d);
  }
  return dropped;
}

void PullEngine::issue_hyper(unsigned lane) {
  for (Donor& d : donors_) d.reader->start_hyper(d, lane);
}

void PullEngine::wait_lane(unsigned lane) {
  for (Reader* r : readers_) r->wait(lane);
}

}  // namespace paramwin::detail
