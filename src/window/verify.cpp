// Creation-time checks of a window: layout agreement across ranks (LayoutCheck::strict) and
// the self-check (every rank reads its peers' patterns through MPI_Get and shared memory).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"
#include "window/rma_batch.hpp"
#include "window/window_impl.hpp"

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
constexpr std::size_t kWords = 2 * kVerifyWords;  // per peer: head pattern, tail pattern
// Independent of the layout: under LayoutCheck::per_donor ranks differ in layout and size.
constexpr std::uint64_t kSalt = kMagic;

bool sane(const HeadWords& head) {
  return head.stride != 0 && head.stride % kPage == 0 && head.exposure <= 1;
}

std::size_t tail_of(const HeadWords& head) {
  return kPage + slot_count(static_cast<Exposure>(head.exposure)) * head.stride - kVerifyWords * 8;
}

/// The peers a rank checks: all of them up to 64 ranks, four otherwise.
std::vector<int> peers_of(int rank, int size) {
  std::vector<int> peers;
  if (size <= 64) {
    for (int r = 0; r < size; ++r) {
      peers.push_back(r);
    }
  } else {
    for (int d : {0, 1, size - 1, size / 2}) {
      peers.push_back((rank + d) % size);
    }
  }
  return peers;
}

/// The peers' patterns read over RMA: header and head pattern, then (knowing the stride)
/// the tail pattern.
struct PeerReads {
  std::vector<std::uint64_t> got;  // kWords per peer
  std::vector<HeadWords> heads;
};

PeerReads read_peers(MPI_Win win, const std::vector<int>& peers) {
  PeerReads r{std::vector<std::uint64_t>(peers.size() * kWords),
              std::vector<HeadWords>(peers.size())};
  RmaBatch batch(win);
  for (std::size_t p = 0; p < peers.size(); ++p) {
    batch.get(&r.heads[p], sizeof(HeadWords), peers[p], 0);
    batch.get(&r.got[p * kWords], kVerifyWords * 8, peers[p], kVerifyOffset);
  }
  batch.wait();
  for (std::size_t p = 0; p < peers.size(); ++p) {
    if (sane(r.heads[p])) {
      batch.get(&r.got[p * kWords + kVerifyWords], kVerifyWords * 8, peers[p], tail_of(r.heads[p]));
    }
  }
  batch.wait();
  return r;
}

/// How the pattern of @p target read wrong ("" if it read right): over RMA (@p got, @p head)
/// or through shared memory (@p peer, nullptr if not on this node).
std::string check_peer(int target, const HeadWords& head, const std::uint64_t* got,
                       const std::byte* peer) {
  if (!sane(head)) {
    return "MPI_Get of the header";
  }
  const std::size_t peer_tail = tail_of(head);
  for (std::size_t i = 0; i < kVerifyWords; ++i) {
    const std::uint64_t want = verify_word(target, i, kSalt);
    if (got[i] != want || got[kVerifyWords + i] != ~want) {
      return "MPI_Get";
    }
    if (peer != nullptr) {
      const auto* ph = reinterpret_cast<const SegmentHeader*>(peer);
      std::uint64_t tail_word = 0;
      std::memcpy(&tail_word, peer + peer_tail + i * 8, 8);
      if (ph->verify[i].load(std::memory_order_relaxed) != want || tail_word != ~want) {
        return "shared-memory load";
      }
    }
  }
  return {};
}

}  // namespace

void WindowImpl::verify() {
  // Each rank writes a rank-specific pattern at both ends of its segment; every rank then
  // reads its peers' patterns through shared memory and through MPI_Get. MPICH 4.0.2 + UCX
  // has been seen to return other ranks' bytes silently for misaligned windows.
  SegmentHeader& h = header();
  std::byte* tail = segment_.data() + segment_.extent(0) - kVerifyWords * 8;
  for (std::size_t i = 0; i < kVerifyWords; ++i) {
    h.verify[i].store(verify_word(rank_, i, kSalt), std::memory_order_relaxed);
    const std::uint64_t w = ~verify_word(rank_, i, kSalt);
    std::memcpy(tail + i * 8, &w, 8);
  }
  check_mpi(MPI_Win_sync(shm_win_.get()), "MPI_Win_sync");
  check_mpi(MPI_Win_sync(rma_win_.get()), "MPI_Win_sync");
  check_mpi(MPI_Barrier(comm_.get()), "MPI_Barrier");

  // A local failure must not skip the agreement below: it is recorded, not thrown.
  std::string error;
  try {
    const std::vector<int> peers = peers_of(rank_, size_);
    const PeerReads reads = read_peers(rma_win_.get(), peers);
    for (std::size_t p = 0; p < peers.size() && error.empty(); ++p) {
      const int target = peers[p];
      const std::string how = check_peer(target, reads.heads[p], &reads.got[p * kWords],
                                         shm_base_[static_cast<std::size_t>(target)]);
      if (!how.empty()) {
        error = "paramwin: window self-check failed: rank " + std::to_string(rank_) +
                " read bytes from rank " + std::to_string(target) +
                " that the owner did not write (via " + how +
                "); the MPI library returns wrong data for this window (known for MPICH 4.0.2 "
                "+ UCX with misaligned segments)";
      }
    }
  } catch (const std::exception& e) {
    error = "paramwin: window self-check failed on rank " + std::to_string(rank_) + " (via " +
            e.what() + ")";
  }
  const int failing = first_failing_rank(comm_.get(), error.empty());
  // Slot memory is the owner's again; nobody reads it before the first publish.
  std::memset(tail, 0, kVerifyWords * 8);
  if (failing >= 0) {
    std::string text = failure_text(comm_.get(), failing, error);
    throw VerificationError(error.empty() ? text : error);
  }
}

void WindowImpl::check_layouts_strict(std::uint64_t slot_fingerprint) {
  if (same_on_all_ranks(comm_.get(), slot_fingerprint)) {
    return;
  }
  // Every rank saw the disagreement, so every rank takes this path: exchange the layouts and
  // explain the first difference identically everywhere.
  const std::vector<std::string> texts =
      allgather_text(comm_.get(), layout_.serialize() + "wire " +
                                      std::to_string(static_cast<int>(options_.wire)) + "\n");
  const auto differs = std::find_if(texts.begin(), texts.end(),
                                    [&](const std::string& t) { return t != texts.front(); });
  const int other = differs == texts.end() ? 0 : static_cast<int>(differs - texts.begin());
  auto layout_of = [&](int r) {
    const std::string& s = texts[static_cast<std::size_t>(r)];
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

}  // namespace paramwin::detail
