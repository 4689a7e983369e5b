// Creation-time checks of a window: options and identity agreed across ranks, layout
// agreement (LayoutCheck::strict), whether the node can hold the segments, and the self-check
// (every rank reads its peers' patterns through MPI_Get and shared memory).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
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
  return head.stride != 0 && head.stride % kPage == 0 && head.exposure <= 1 && head.host_slots <= 2;
}

std::size_t tail_of(const HeadWords& head) {
  return kPage + head.host_slots * head.stride - kVerifyWords * 8;
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

/// The same words as read_peers(), loaded from the peers' shared segments (@p shm_base, by
/// rank): the self-check of a window without an RMA window (a communicator of one process).
PeerReads load_peers(const std::vector<int>& peers, const std::vector<std::byte*>& shm_base) {
  PeerReads r{std::vector<std::uint64_t>(peers.size() * kWords),
              std::vector<HeadWords>(peers.size())};
  for (std::size_t p = 0; p < peers.size(); ++p) {
    const std::byte* seg = shm_base[static_cast<std::size_t>(peers[p])];
    std::memcpy(&r.heads[p], seg, sizeof(HeadWords));
    std::memcpy(&r.got[p * kWords], seg + kVerifyOffset, kVerifyWords * 8);
    if (sane(r.heads[p])) {
      std::memcpy(&r.got[p * kWords + kVerifyWords], seg + tail_of(r.heads[p]), kVerifyWords * 8);
    }
  }
  return r;
}

/// How the pattern of @p target read wrong ("" if it read right): as read by @p via (@p got,
/// @p head) and through shared memory (@p peer, nullptr if not on this node).
std::string check_peer(int target, const HeadWords& head, const std::uint64_t* got,
                       const std::byte* peer, const std::string& via) {
  if (!sane(head)) {
    return via + " of the header";
  }
  const std::size_t peer_tail = tail_of(head);
  for (std::size_t i = 0; i < kVerifyWords; ++i) {
    const std::uint64_t want = verify_word(target, i, kSalt);
    if (got[i] != want || got[kVerifyWords + i] != ~want) {
      return via;
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

// --- options and identity ------------------------------------------------------------

/// FNV-1a: a hash of the window name that is the same in every process (std::hash need not).
std::uint64_t name_hash(std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : name) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  }
  return h;
}

/// The window's identity as one word: its name, or where it was created when it has none
/// (the site does not count for a named window, which the ranks may create anywhere).
std::uint64_t identity_hash(const std::string& name, const std::string& site) noexcept {
  return name.empty() ? name_hash("unnamed window created at " + site) : name_hash(name);
}

/// What every rank must share, in the order of the agreement's allreduce.
enum Agreed : std::size_t { kVerify, kLayoutCheck, kIdentity, kCreation, kAgreed };

/// One rank's agreed fields, as exchanged to explain a disagreement.
struct Identity {
  bool verify = true;
  std::uint64_t layout_check = 0;
  std::uint64_t creation = 0;
  std::string site;
  std::string name;

  /// "verify layout_check creation site_size\nsite name" (the strings last: a name may
  /// hold any byte).
  [[nodiscard]] std::string encode() const {
    return std::to_string(verify ? 1 : 0) + " " + std::to_string(layout_check) + " " +
           std::to_string(creation) + " " + std::to_string(site.size()) + "\n" + site + name;
  }
  static Identity decode(const std::string& text) {
    Identity id;
    const std::size_t nl = text.find('\n');
    std::istringstream head(text.substr(0, nl));
    int verify = 1;
    std::size_t site_size = 0;
    head >> verify >> id.layout_check >> id.creation >> site_size;
    id.verify = verify != 0;
    const std::string rest = nl == std::string::npos ? std::string() : text.substr(nl + 1);
    id.site = rest.substr(0, std::min(site_size, rest.size()));
    id.name = rest.substr(id.site.size());
    return id;
  }
  /// Whether @p other is another window: another name, or (both unnamed) another site,
  /// or another position on the communicator.
  [[nodiscard]] bool differs_from(const Identity& other) const {
    return name != other.name || creation != other.creation || (name.empty() && site != other.site);
  }
  /// "window 'A' (#2 created on this communicator)" or "an unnamed window created at
  /// f.cpp:12:7 (#2 ...)".
  [[nodiscard]] std::string window() const {
    return (name.empty() ? "an unnamed window created at " + site : "window '" + name + "'") +
           " (#" + std::to_string(creation + 1) + " created on this communicator)";
  }
};

std::string layout_check_name(std::uint64_t value) {
  const auto check = static_cast<LayoutCheck>(value);
  return value <= 0xff && enum_valid(check) ? std::string(enum_name(check))
                                            : "out of range (" + std::to_string(value) + ")";
}

/// The lowest rank whose @p differs(rank 0's, its) holds (0 if none).
template <class Differs>
int first_other(const std::vector<Identity>& ids, Differs differs) {
  for (std::size_t r = 1; r < ids.size(); ++r) {
    if (differs(ids.front(), ids[r])) {
      return static_cast<int>(r);
    }
  }
  return 0;
}

// --- memory -----------------------------------------------------------------------------

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) noexcept {
  return a > kMax - b ? kMax : a + b;
}

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) noexcept {
  return b != 0 && a > kMax / b ? kMax : a * b;
}

/// "8.0 TiB" (binary units, one decimal; plain bytes below 1 KiB).
std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) {
    return std::to_string(bytes) + " bytes";
  }
  static constexpr std::array<const char*, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  auto value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%.1f %s", value, kUnits[unit]);
  return text.data();
}

/// Physical memory plus swap of this node (0 when unknown).
std::uint64_t memory_and_swap() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) {
    return 0;
  }
  std::uint64_t total =
      mul_sat(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page));
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("SwapTotal:", 0) == 0) {
      std::istringstream in(line.substr(10));
      std::uint64_t kib = 0;
      if (in >> kib) {
        total = add_sat(total, mul_sat(kib, 1024));
      }
      break;
    }
  }
  return total;
}

/// Free bytes in /dev/shm, where MPICH and Open MPI put the file behind a shared window whose
/// node has more than one rank (MPICH: mkstemp there, /tmp only when /dev/shm is not writable;
/// Open MPI 4.1: osc/sm's backing directory, /dev/shm by default; measured in both). tmpfs
/// grants pages when they are first written: a segment larger than the space left is
/// created without complaint and the first publish into it dies of SIGBUS. kMax (no limit)
/// for another MPI or when /dev/shm is not usable.
std::uint64_t dev_shm_free() {
#if defined(MPICH_VERSION) || defined(OPEN_MPI)
  struct statvfs st {};
  if (access("/dev/shm", W_OK) == 0 && statvfs("/dev/shm", &st) == 0) {
    return mul_sat(static_cast<std::uint64_t>(st.f_bavail),
                   static_cast<std::uint64_t>(st.f_frsize));
  }
#endif
  return kMax;
}

}  // namespace

bool WindowImpl::agree_on_creation(const std::string& local_error) {
  const WindowOptions& o = options_;
  const std::array<std::uint64_t, kAgreed> mine = {o.verify ? 1U : 0U,
                                                   static_cast<std::uint64_t>(o.layout_check),
                                                   identity_hash(o.name, site_), creation_};
  // One allreduce (max): the lowest failing rank as size - rank (0: none), then each field
  // and its complement (max of ~v is ~min of v: a field agrees iff its max and min are
  // equal). Both hold whether MPI orders the words as unsigned or as signed numbers: MPICH
  // 4.0.2 here takes MPI_MAX of MPI_UINT64_T as signed (max(2^64 - 1, 0) is 0). Last, not
  // agreed but told: whether any rank reads with Transport::rma (0 or 1, so max is any).
  constexpr std::size_t kAnyRma = 1 + 2 * kAgreed;
  std::array<std::uint64_t, kAnyRma + 1> in{};
  std::array<std::uint64_t, kAnyRma + 1> out{};
  in[0] = local_error.empty() ? 0 : static_cast<std::uint64_t>(size_ - rank_);
  for (std::size_t f = 0; f < kAgreed; ++f) {
    in[1 + 2 * f] = mine[f];
    in[2 + 2 * f] = ~mine[f];
  }
  in[kAnyRma] = o.transport == Transport::rma ? 1 : 0;
  check_mpi(MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_UINT64_T, MPI_MAX,
                          comm_.get()),
            "MPI_Allreduce(window creation)");
  if (out[0] != 0) {
    // Bad options (check_options) or a live unnamed window this one could pair crosswise
    // with (live_window_conflict) on some rank: its own message there, "rank N failed: ..."
    // on the others. Nothing else is compared: an out-of-range option explains itself.
    const int failing = size_ - static_cast<int>(out[0]);
    std::string text = failure_text(comm_.get(), failing, local_error);
    throw InvalidArgument(local_error.empty() ? text : local_error);
  }
  std::array<bool, kAgreed> differs{};
  bool any = false;
  for (std::size_t f = 0; f < kAgreed; ++f) {
    differs[f] = out[1 + 2 * f] != ~out[2 + 2 * f];
    any = any || differs[f];
  }
  if (!any) {
    return out[kAnyRma] != 0;
  }
  // Every rank saw the same disagreement, so every rank takes this path: exchange the values
  // and explain them, rank 0 against the lowest rank that differs.
  const Identity me{o.verify, static_cast<std::uint64_t>(o.layout_check), creation_, site_, o.name};
  std::vector<Identity> ids;
  for (const std::string& text : allgather_text(comm_.get(), me.encode())) {
    ids.push_back(Identity::decode(text));
  }
  std::string options_text;
  auto note_option = [&](const char* field, auto value_of) {
    const int r = first_other(ids, [&](const Identity& a, const Identity& b) {
      return value_of(a) != value_of(b);
    });
    options_text += (options_text.empty() ? "" : "; ") + std::string(field) + " is " +
                    value_of(ids.front()) + " on rank 0, " +
                    value_of(ids[static_cast<std::size_t>(r)]) + " on rank " + std::to_string(r);
  };
  if (differs[kVerify]) {
    note_option("verify",
                [](const Identity& id) { return std::string(id.verify ? "true" : "false"); });
  }
  if (differs[kLayoutCheck]) {
    note_option("layout_check",
                [](const Identity& id) { return layout_check_name(id.layout_check); });
  }
  std::string message;
  if (differs[kIdentity] || differs[kCreation]) {
    const int r =
        first_other(ids, [](const Identity& a, const Identity& b) { return a.differs_from(b); });
    message = "paramwin: ranks are creating different windows: rank 0 creates " +
              ids.front().window() + ", rank " + std::to_string(r) + " creates " +
              ids[static_cast<std::size_t>(r)].window() +
              "; windows must be created in the same order on every rank (creation is "
              "collective and pairs windows by their order), and an unnamed window at the "
              "same place in the code on every rank (name windows that the ranks create from "
              "different places)";
    if (!options_text.empty()) {
      message += "; their WindowOptions differ too: " + options_text;
    }
  } else {
    message = "paramwin: WindowOptions differ across ranks: " + options_text +
              " (verify and layout_check must be the same on every rank)";
  }
  throw InvalidArgument(message);
}

void WindowImpl::check_node_split() const {
  // Per rank: its node communicator's first rank (as a rank of comm_) and its size. The
  // split is consistent when every rank's node is the set of ranks naming the same first
  // rank, and that rank names itself.
  MPI_Group node_group = MPI_GROUP_NULL;
  MPI_Group comm_group = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(node_comm_.get(), &node_group), "MPI_Comm_group");
  check_mpi(MPI_Comm_group(comm_.get(), &comm_group), "MPI_Comm_group");
  const int zero = 0;
  int first = 0;
  const int rc = MPI_Group_translate_ranks(node_group, 1, &zero, comm_group, &first);
  MPI_Group_free(&node_group);
  MPI_Group_free(&comm_group);
  check_mpi(rc, "MPI_Group_translate_ranks");
  const int mine[2] = {first, node_comm_.size()};
  std::vector<int> all(2 * static_cast<std::size_t>(size_));
  check_mpi(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm_.get()),
            "MPI_Allgather(node split)");
  for (int r = 0; r < size_; ++r) {
    const int lead = all[2 * static_cast<std::size_t>(r)];
    const int n = all[2 * static_cast<std::size_t>(r) + 1];
    int same = 0;
    for (int q = 0; q < size_; ++q) same += all[2 * static_cast<std::size_t>(q)] == lead ? 1 : 0;
    if (lead >= 0 && lead < size_ && all[2 * static_cast<std::size_t>(lead)] == lead && same == n) {
      continue;
    }
    throw Error("paramwin: the MPI's node communicators disagree (MPI_Comm_split_type("
                "MPI_COMM_TYPE_SHARED)): rank " +
                std::to_string(r) + " finds " + std::to_string(n) +
                " ranks on its node, first rank " + std::to_string(lead) + ", but " +
                std::to_string(same) +
                " ranks name that first rank; a shared-memory "
                "window cannot be built over them. Seen with Open MPI 4.1 when the communicator "
                "holds processes of several jobs started by MPI_Comm_spawn (docs/elastic.md, "
                "\"Refilling the spares\")");
  }
}

void WindowImpl::check_memory() const {
  // This rank's segment as create_windows() allocates it (header page, slots, spare page),
  // computed without overflow: a layout near 2^64 bytes must fail here, not wrap.
  const std::uint64_t slot_bytes =
      slots_.payload_bytes > kMax - kPage
          ? kMax
          : round_up(std::max<std::size_t>(slots_.payload_bytes, 1), kPage);
  const std::uint64_t slots = host_slots_;
  const std::uint64_t mine = add_sat(add_sat(kPage, mul_sat(slots, slot_bytes)), kPage);
  const int node_size = node_comm_.size();
  std::vector<std::uint64_t> on_node(static_cast<std::size_t>(node_size));
  check_mpi(MPI_Allgather(&mine, 1, MPI_UINT64_T, on_node.data(), 1, MPI_UINT64_T,
                          node_comm_.get()),
            "MPI_Allgather(segment bytes)");
  std::uint64_t node_total = 0;
  for (const std::uint64_t b : on_node) {
    node_total = add_sat(node_total, b);
  }

  std::string error;
  try {
    // With one rank on the node MPICH and Open MPI allocate the segment as private memory;
    // with more, as a file in /dev/shm that all of them map.
    const std::uint64_t memory = memory_and_swap();
    const std::uint64_t shm = node_size > 1 ? dev_shm_free() : kMax;
    const std::uint64_t limit =
        std::min({memory == 0 ? kMax : memory, shm,
                  static_cast<std::uint64_t>(std::numeric_limits<MPI_Aint>::max())});
    if (node_total > limit) {
      std::string what =
          "paramwin: " +
          (options_.name.empty() ? std::string("the window") : "window '" + options_.name + "'") +
          " cannot be allocated: this rank's segment needs " + human_bytes(mine) + " (" +
          std::to_string(mine) + " bytes: the layers take " + human_bytes(slots_.payload_bytes) +
          " in wire format, held " +
          (slots == 2   ? "twice for the two snapshot slots"
           : slots == 1 ? "once (live exposure)"
                        : placement_->slots_elsewhere()) +
          ", plus a header page)";
      if (node_size > 1) {
        what += " and the " + std::to_string(node_size) + " ranks on this node need " +
                human_bytes(node_total) + " together";
      }
      what += ", but this node has " + (memory == 0 ? std::string("an unknown amount of memory")
                                                    : human_bytes(memory) + " of memory and swap");
      if (shm != kMax) {
        what +=
            ", and /dev/shm, where the MPI library puts the memory that the ranks of a node share, "
            "has " +
            human_bytes(shm) + " free";
      }
      error = what;
    }
  } catch (const std::exception& e) {
    error = std::string("paramwin: checking the memory for the window failed: ") + e.what();
  }
  agree_or_throw<Error>(comm_.get(), error);
}

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
  if (rma_win_) {  // none on a communicator of one process (create_windows())
    check_mpi(MPI_Win_sync(rma_win_.get()), "MPI_Win_sync");
  }
  check_mpi(MPI_Barrier(comm_.get()), "MPI_Barrier");

  // A local failure must not skip the agreement below: it is recorded, not thrown.
  std::string error;
  try {
    const std::vector<int> peers = peers_of(rank_, size_);
    // No RMA window on a communicator of one process (create_windows()): its only segment
    // is checked through shared memory.
    const PeerReads reads =
        rma_win_ ? read_peers(rma_win_.get(), peers) : load_peers(peers, shm_base_);
    const std::string via = rma_win_ ? "MPI_Get" : "shared-memory load";
    for (std::size_t p = 0; p < peers.size() && error.empty(); ++p) {
      const int target = peers[p];
      const std::string how = check_peer(target, reads.heads[p], &reads.got[p * kWords],
                                         shm_base_[static_cast<std::size_t>(target)], via);
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
      return std::string(enum_name(static_cast<WireFormat>(std::stoi(w))));
    };
    why = "wire format " + wire_name(first_wire) + " vs " + wire_name(second_wire);
  }
  throw LayoutMismatch("paramwin: layouts differ across ranks: rank 0 vs rank " +
                       std::to_string(other) + " differ at " + why + " (this is rank " +
                       std::to_string(rank_) + ")");
}

}  // namespace paramwin::detail
