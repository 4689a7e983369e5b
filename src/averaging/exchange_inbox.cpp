// ExchangeInbox: creation (one node, checked on every rank), the spin lock of an inbox, a
// deposit (one exchange's two halves) and the drain.
#include "averaging/exchange_inbox.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "detail/mpi_check.hpp"
#include "mpi/agree.hpp"
#include "paramwin/error.hpp"

namespace paramwin::detail {

/// The head of every rank's inbox segment; the float64 accumulators follow it.
struct alignas(64) ExchangeInbox::Header {
  std::atomic<std::uint32_t> lock{0};     // 1 while a depositor or the owner's drain holds it
  std::atomic<std::uint32_t> open{1};     // 0: paused, deposits refused
  std::atomic<std::uint64_t> pending{0};  // exchanges deposited since the last drain
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

namespace {

constexpr std::size_t kHeaderBytes = 64;
static_assert(sizeof(std::atomic<std::uint32_t>) * 2 + sizeof(std::atomic<std::uint64_t>) <=
              kHeaderBytes);

/// Takes @p lock; false when MPI_Wtime() passed @p deadline (> 0) first. Spins briefly, then
/// yields the core: holders hold it for one pass over the model, never while they compute.
bool take(std::atomic<std::uint32_t>& lock, double deadline) {
  for (std::uint64_t attempt = 0;; ++attempt) {
    std::uint32_t expected = 0;
    if (lock.load(std::memory_order_relaxed) == 0 &&
        lock.compare_exchange_weak(expected, 1, std::memory_order_acquire,
                                   std::memory_order_relaxed)) {
      return true;
    }
    if (attempt >= 64) {
      std::this_thread::yield();
      if (deadline > 0.0 && attempt % 64 == 0 && MPI_Wtime() > deadline) {
        return false;
      }
    }
  }
}

void release(std::atomic<std::uint32_t>& lock) { lock.store(0, std::memory_order_release); }

template <class T>
void exchange(const void* snapshot, const void* own, double weight, double* inbox, double* acc,
              std::size_t count) {
  const T* y = static_cast<const T*>(snapshot);
  const T* x = static_cast<const T*>(own);
  for (std::size_t i = 0; i < count; ++i) {
    const double d = weight * (static_cast<double>(y[i]) - static_cast<double>(x[i]));
    inbox[i] -= d;
    acc[i] += d;
  }
}

template <class T>
void add_and_clear(void* params, double* inbox, std::size_t count) {
  T* x = static_cast<T*>(params);
  for (std::size_t i = 0; i < count; ++i) {
    x[i] = static_cast<T>(static_cast<double>(x[i]) + inbox[i]);
    inbox[i] = 0.0;
  }
}

/// "" when every rank of @p comm shares memory with every other, else what is wrong.
std::string one_node(MPI_Comm comm) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const Comm node = Comm::split_shared(comm);
  int node_size = 0;
  check_mpi(MPI_Comm_size(node.get(), &node_size), "MPI_Comm_size");
  if (node_size == size) {
    return {};
  }
  return "paramwin: AveragingAgent: symmetric averaging needs every rank on one node (its "
         "inboxes are shared memory), but this rank shares memory with " +
         std::to_string(node_size) + " of " + std::to_string(size) + " ranks";
}

}  // namespace

ExchangeInbox::ExchangeInbox(MPI_Comm comm, const Layout& layout) {
  agree_or_throw<InvalidArgument>(comm, one_node(comm));
  int size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  for (const LayerSpec& spec : layout.layers()) {
    offsets_.push_back(total_);
    total_ += spec.count;
  }
  const std::size_t total = total_;
  const std::size_t bytes = kHeaderBytes + total * sizeof(double);
  void* mine = nullptr;
  win_ = Win::allocate_shared_locked(static_cast<MPI_Aint>(bytes), comm, &mine);
  new (mine) Header{};
  auto* own_values = reinterpret_cast<double*>(static_cast<std::byte*>(mine) + kHeaderBytes);
  std::fill(own_values, own_values + total, 0.0);
  for (int r = 0; r < size; ++r) {
    bases_.push_back(static_cast<std::byte*>(win_.shared_query(r)));
  }
  check_mpi(MPI_Win_sync(win_.get()), "MPI_Win_sync");
  check_mpi(MPI_Barrier(comm), "MPI_Barrier");  // every inbox initialised before any deposit
}

ExchangeInbox::Header& ExchangeInbox::header(int rank) const {
  return *std::launder(reinterpret_cast<Header*>(bases_[static_cast<std::size_t>(rank)]));
}

double* ExchangeInbox::values(int rank) const {
  return reinterpret_cast<double*>(bases_[static_cast<std::size_t>(rank)] + kHeaderBytes);
}

ExchangeInbox::Deposit ExchangeInbox::deposit(int peer, std::span<const LayerRef> snapshot,
                                              const BoundLayers<LayerRef>& own, double weight,
                                              std::vector<std::vector<double>>& accumulator,
                                              double deadline) {
  Header& h = header(peer);
  if (!take(h.lock, deadline)) {
    return Deposit::timed_out;
  }
  if (h.open.load(std::memory_order_relaxed) == 0) {
    release(h.lock);
    return Deposit::closed;
  }
  double* inbox = values(peer);
  for (std::size_t l = 0; l < own.size(); ++l) {
    const LayerRef& x = own[l];
    double* in = inbox + offsets_[l];
    double* acc = accumulator[l].data();
    if (x.dtype() == DType::float32) {
      exchange<float>(snapshot[l].data(), x.data(), weight, in, acc, x.count());
    } else {
      exchange<double>(snapshot[l].data(), x.data(), weight, in, acc, x.count());
    }
  }
  h.pending.fetch_add(1, std::memory_order_relaxed);
  release(h.lock);
  return Deposit::done;
}

std::int64_t ExchangeInbox::drain(const BoundLayers<LayerRef>& params) {
  Header& h = header(rank_);
  if (h.pending.load(std::memory_order_acquire) == 0) {
    return 0;  // only a depositor raises it, under the lock, after its values
  }
  take(h.lock, 0.0);
  const auto received = static_cast<std::int64_t>(h.pending.load(std::memory_order_relaxed));
  double* inbox = values(rank_);
  for (std::size_t l = 0; l < params.size(); ++l) {
    const LayerRef& x = params[l];
    if (x.dtype() == DType::float32) {
      add_and_clear<float>(x.data(), inbox + offsets_[l], x.count());
    } else {
      add_and_clear<double>(x.data(), inbox + offsets_[l], x.count());
    }
  }
  h.pending.store(0, std::memory_order_relaxed);
  release(h.lock);
  return received;
}

void ExchangeInbox::add_pending_to(std::span<const LayerRef> copies) {
  Header& h = header(rank_);
  take(h.lock, 0.0);
  const double* inbox = values(rank_);
  for (std::size_t l = 0; l < copies.size(); ++l) {
    const LayerRef& x = copies[l];
    const double* in = inbox + offsets_[l];
    for (std::size_t i = 0; i < x.count(); ++i) {
      if (x.dtype() == DType::float32) {
        auto* f = static_cast<float*>(x.data());
        f[i] = static_cast<float>(static_cast<double>(f[i]) + in[i]);
      } else {
        static_cast<double*>(x.data())[i] += in[i];
      }
    }
  }
  release(h.lock);
}

void ExchangeInbox::clear() {
  Header& h = header(rank_);
  take(h.lock, 0.0);
  double* inbox = values(rank_);
  std::fill(inbox, inbox + total_, 0.0);
  h.pending.store(0, std::memory_order_relaxed);
  release(h.lock);
}

void ExchangeInbox::set_open(bool open) {
  Header& h = header(rank_);
  take(h.lock, 0.0);
  h.open.store(open ? 1U : 0U, std::memory_order_relaxed);
  release(h.lock);
}

}  // namespace paramwin::detail
