// Device windows (Memory::cuda, docs/gpu.md) on a GPU: round trips of every dtype, k-donor
// means bit for bit against the host path (native and reduced wire, momentum, weights, read
// modes, readers over RMA), an Agent's checkpoints of device layers, a GroupAgent's shards,
// non-finite donors, bad input, a GPU too small, the fallback from VMM to IPC slots, a
// torn-read stress and a busy donor. Every
// test skips with a message where this process sees no CUDA device (CI, the CPU-only build
// machines); scripts/gpu_check.sh runs them on 1, 2 and 4 ranks sharing one GPU.
#include <cuda_runtime.h>
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "detail/cuda.hpp"
#include "mpi/fd_exchange.hpp"
#include "mpi_test_util.hpp"
#include "paramwin/paramwin.hpp"
#include "test_kernels.hpp"

namespace pw = paramwin;
namespace pd = paramwin::detail;

namespace {

/// Devices seen by every rank (the minimum over the ranks, so that all skip alike).
int devices_everywhere() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  int min = 0;
  MPI_Allreduce(&n, &min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return min;
}

#define PARAMWIN_REQUIRE_GPU()                                                                \
  do {                                                                                        \
    if (devices_everywhere() == 0) {                                                          \
      GTEST_SKIP() << "no CUDA device on some rank (cudaGetDeviceCount): device windows are " \
                      "tested on a GPU machine (scripts/gpu_check.sh)";                       \
    }                                                                                         \
  } while (0)

void cuda_ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

/// One device allocation of @p bytes (freed at scope end).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&p_, std::max<std::size_t>(bytes, 1)) != cudaSuccess) p_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { (void)cudaFree(p_); }
  [[nodiscard]] void* get() const { return p_; }
  void upload(const void* host) const {
    (void)cudaMemcpy(p_, host, bytes_, cudaMemcpyHostToDevice);
  }
  void download(void* host) const { (void)cudaMemcpy(host, p_, bytes_, cudaMemcpyDeviceToHost); }

 private:
  void* p_ = nullptr;
  std::size_t bytes_;
};

/// Deterministic values spread over many binades, signs mixed.
double spread(int rank, std::size_t i) {
  return std::sin(0.37 * static_cast<double>(i) + rank) *
         std::pow(10.0, static_cast<double>((i + static_cast<std::size_t>(rank)) % 7) - 3.0);
}

/// The test layout: one layer of every dtype, sizes that are no multiple of the vector width.
pw::Layout all_dtypes() {
  pw::Layout layout;
  layout.add("f32", std::size_t{10001})
      .add("f64", {333}, pw::DType::float64)
      .add("bf16", {777}, pw::DType::bfloat16)
      .add("f16", {555}, pw::DType::float16);
  layout.add_hyperparameter("lr");
  return layout;
}

/// Host bytes of every layer of all_dtypes() on @p rank (a scaled rank for variety).
std::vector<std::vector<std::byte>> host_values(const pw::Layout& layout, int rank) {
  std::vector<std::vector<std::byte>> out;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    const pw::LayerSpec& s = layout[l];
    std::vector<std::byte> bytes(s.count * pw::dtype_size(s.dtype));
    for (std::size_t i = 0; i < s.count; ++i) {
      const double v = spread(rank + static_cast<int>(l), i);
      switch (s.dtype) {
        case pw::DType::float32: {
          const auto f = static_cast<float>(v);
          std::memcpy(bytes.data() + 4 * i, &f, 4);
          break;
        }
        case pw::DType::float64: std::memcpy(bytes.data() + 8 * i, &v, 8); break;
        case pw::DType::bfloat16: {
          const pw::bfloat16 b = pw::to_bfloat16(static_cast<float>(v));
          std::memcpy(bytes.data() + 2 * i, &b.bits, 2);
          break;
        }
        case pw::DType::float16: {
          const pw::float16 h = pw::to_float16(static_cast<float>(v));
          std::memcpy(bytes.data() + 2 * i, &h.bits, 2);
          break;
        }
      }
    }
    out.push_back(std::move(bytes));
  }
  return out;
}

/// Device copies of @p host (one buffer per layer) and refs to them.
struct DeviceLayers {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<pw::LayerRef> refs;
  std::vector<pw::ConstLayerRef> crefs;

  DeviceLayers(const pw::Layout& layout, const std::vector<std::vector<std::byte>>& host) {
    for (std::size_t l = 0; l < layout.size(); ++l) {
      buffers.push_back(std::make_unique<DeviceBuffer>(host[l].size()));
      buffers.back()->upload(host[l].data());
      refs.emplace_back("", buffers.back()->get(), layout[l].count, layout[l].dtype,
                        pw::device_memory);
      crefs.emplace_back("", buffers.back()->get(), layout[l].count, layout[l].dtype,
                         pw::device_memory);
    }
  }
  [[nodiscard]] std::vector<std::vector<std::byte>> download() const {
    std::vector<std::vector<std::byte>> out;
    for (std::size_t l = 0; l < buffers.size(); ++l) {
      const std::size_t bytes = refs[l].count() * pw::dtype_size(refs[l].dtype());
      out.emplace_back(bytes);
      buffers[l]->download(out.back().data());
    }
    return out;
  }
};

/// Host refs over @p bytes (one per layer).
std::vector<pw::LayerRef> host_refs(const pw::Layout& layout,
                                    std::vector<std::vector<std::byte>>& bytes) {
  std::vector<pw::LayerRef> refs;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    refs.emplace_back("", bytes[l].data(), layout[l].count, layout[l].dtype);
  }
  return refs;
}

std::vector<pw::ConstLayerRef> const_refs(const std::vector<pw::LayerRef>& refs) {
  std::vector<pw::ConstLayerRef> out;
  for (const pw::LayerRef& r : refs) out.push_back(r.as_const());
  return out;
}

/// Index of the first byte where @p a and @p b differ in layer @p l, or -1.
long first_difference(const std::vector<std::vector<std::byte>>& a,
                      const std::vector<std::vector<std::byte>>& b, std::size_t l) {
  for (std::size_t i = 0; i < a[l].size(); ++i) {
    if (a[l][i] != b[l][i]) return static_cast<long>(i);
  }
  return -1;
}

TEST(DeviceWindow, RoundTripOfEveryDtypeIsBitExact) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  const pw::Layout layout = all_dtypes();
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  const int rank = win.rank();
  const int n = win.size();
  DeviceLayers mine(layout, host_values(layout, rank));
  pw::Hyperparameters hyper = layout.make_hyperparameters();
  hyper.set("lr", 0.5 + rank);
  const pw::PublishResult pub =
      win.publish(mine.crefs, hyper, 100 + static_cast<std::uint64_t>(rank));
  ASSERT_TRUE(pub.published);
  MPI_Barrier(MPI_COMM_WORLD);
  const int donor = (rank + 1) % n;
  DeviceLayers out(layout, host_values(layout, rank));
  const pw::PullResult r = win.pull(std::vector<int>{donor}, out.refs);
  ASSERT_EQ(r.donors.size(), 1U);
  EXPECT_EQ(r.donors[0].stamp, 100U + static_cast<std::uint64_t>(donor));
  EXPECT_EQ(r.donors[0].transport, pw::Transport::shm);
  EXPECT_DOUBLE_EQ(r.donors[0].hyper.get("lr"), 0.5 + donor);
  const auto want = host_values(layout, donor);
  const auto got = out.download();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    EXPECT_EQ(first_difference(got, want, l), -1) << "layer " << layout[l].name;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

struct MeanCase {
  pw::WireFormat wire;
  pw::ReadMode read_mode;
  pw::Transport transport;
};

class DeviceMean : public ::testing::TestWithParam<MeanCase> {};

// k = 1..3 donors (as many as the ranks allow), mean and weighted, momentum 0 and 0.25: the
// device window's result is the host window's bit for bit (same arithmetic, same order).
TEST_P(DeviceMean, MatchesTheHostPathBitForBit) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  const MeanCase c = GetParam();
  const pw::Layout layout = all_dtypes();
  pw::ParameterWindow<> dev(MPI_COMM_WORLD, layout,
                            {.transport = c.transport, .wire = c.wire, .memory = pw::Memory::cuda});
  pw::ParameterWindow<> host(MPI_COMM_WORLD, layout, {.transport = c.transport, .wire = c.wire});
  const int rank = dev.rank();
  const int n = dev.size();
  auto values = host_values(layout, rank);
  DeviceLayers mine(layout, values);
  ASSERT_TRUE(dev.publish(mine.crefs).published);
  ASSERT_TRUE(host.publish(const_refs(host_refs(layout, values))).published);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 1; k <= std::min(3, n - 1); ++k) {
    for (const double momentum : {0.0, 0.25}) {
      for (const bool weighted : {false, true}) {
        if (weighted && k == 1) continue;
        pw::PullOptions o;
        o.read_mode = c.read_mode;
        o.momentum = momentum;
        if (weighted) {
          o.reduction = pw::Reduction::weighted;
          for (int d = 0; d < k; ++d) o.weights.push_back(1.0 + d);
        }
        std::vector<int> donors;
        for (int d = 1; d <= k; ++d) donors.push_back((rank + d) % n);
        DeviceLayers out(layout, values);  // momentum blends with the current values
        auto host_out = values;
        const pw::PullResult dr = dev.pull(donors, out.refs, o);
        (void)host.pull(donors, host_refs(layout, host_out), o);
        EXPECT_EQ(dr.landing, pw::Landing::transactional);
        const auto got = out.download();
        for (std::size_t l = 0; l < layout.size(); ++l) {
          EXPECT_EQ(first_difference(got, host_out, l), -1)
              << "layer " << layout[l].name << ", k " << k << ", momentum " << momentum
              << (weighted ? ", weighted" : ", mean");
        }
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// An Agent over a device window saves its device layers into a checkpoint (copied through the
// host) and loads them back into device memory bit for bit, synchronously and with the
// asynchronous writer; the loaded agent republishes what it loaded.
TEST(DeviceWindow, AgentCheckpointRoundTripsDeviceLayers) {
  PARAMWIN_REQUIRE_GPU();
  const int rank = pw::test::world_rank();
  const std::string dir = "device_window_mpi_test.np" + std::to_string(pw::test::world_size());
  if (rank == 0) std::filesystem::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const pw::Layout layout = all_dtypes();
  for (const bool async : {false, true}) {
    pw::AgentOptions o;
    o.triggers.age.enabled = false;  // nobody dies: the layers keep this rank's values
    o.checkpoint.async = async;
    pw::Agent<> agent(MPI_COMM_WORLD, layout, o, {.memory = pw::Memory::cuda});
    const auto values = host_values(layout, rank + 3);
    DeviceLayers mine(layout, values);
    (void)agent.publish(mine.crefs);
    for (int step = 0; step < 3; ++step) (void)agent.step(step, 1.0 + rank, mine.refs);
    const std::string path = dir + (async ? "/async.h5" : "/sync.h5");
    agent.save_checkpoint(path, mine.crefs);
    agent.wait_checkpoint();
    DeviceLayers other(layout, host_values(layout, rank + 7));
    const pw::CheckpointLoad l = agent.load_checkpoint(path, other.refs);
    EXPECT_EQ(l.source, rank);
    const auto got = other.download();
    for (std::size_t li = 0; li < layout.size(); ++li) {
      EXPECT_EQ(first_difference(got, values, li), -1)
          << "layer " << layout[li].name << (async ? ", async" : ", sync");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    // What the neighbour reads now is what this rank loaded.
    const int n = agent.size();
    if (n > 1) {
      DeviceLayers read(layout, host_values(layout, rank));
      (void)agent.window().pull(std::vector<int>{(rank + 1) % n}, read.refs);
      const auto want = host_values(layout, (rank + 1) % n + 3);
      const auto seen = read.download();
      for (std::size_t li = 0; li < layout.size(); ++li) {
        EXPECT_EQ(first_difference(seen, want, li), -1) << "neighbour, layer " << layout[li].name;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// A GroupAgent of agents of 2 ranks over a device window (4 ranks): agent 0 is reborn from
// agent 1; every rank pulls its shard into a device scratch, the shards are exchanged through
// host memory, and every replica of agent 0 ends bit for bit where a host-window GroupAgent
// run beside it with the same values ends (momentum 0 and 0.5).
TEST(DeviceWindow, GroupAgentRebirthAssemblesShardsIntoEveryDeviceReplica) {
  PARAMWIN_REQUIRE_GPU();
  if (pw::test::world_size() != 4) GTEST_SKIP() << "needs 4 ranks (2 agents of 2)";
  pw::AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = 2});
  const pw::Layout layout = all_dtypes();
  for (const double momentum : {0.0, 0.5}) {
    pw::AgentOptions o;
    o.triggers.age.enabled = false;
    o.triggers.custom = [](const pw::TriggerContext& c) { return c.rank == 0 && c.step == 2; };
    o.selection = {.kind = pw::SelectionKind::uniform, .k = 1};
    o.mixing.momentum = momentum;
    // Only the first publish: a donor whose two ranks publish while agent 0 reads may offer
    // shards of two publishes, which the agent refuses (and retries): not this test's point.
    o.publish.every = 1000;
    pw::GroupAgent dev(groups, layout, o, {.memory = pw::Memory::cuda});
    pw::GroupAgent host(groups, layout, o);
    const auto values = host_values(layout, groups.agent() + 1);  // the same on both replicas
    DeviceLayers mine(layout, values);
    auto host_mine = values;
    (void)dev.publish(mine.crefs);
    (void)host.publish(const_refs(host_refs(layout, host_mine)));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int step = 1; step <= 3; ++step) {
      const pw::StepEvent d = dev.step(step, 1.0, mine.refs);
      const pw::StepEvent h = host.step(step, 1.0, host_refs(layout, host_mine));
      EXPECT_EQ(d.died, h.died);
      EXPECT_EQ(d.died, groups.agent() == 0 && step == 2) << d.note;
    }
    const auto got = mine.download();
    for (std::size_t l = 0; l < layout.size(); ++l) {
      EXPECT_EQ(first_difference(got, host_mine, l), -1)
          << "layer " << layout[l].name << ", momentum " << momentum << ", agent " << groups.agent()
          << ", rank in agent " << groups.rank_in_agent();
    }
    if (groups.agent() == 0 && momentum == 0.0) {
      const auto donor = host_values(layout, 2);  // agent 1's
      for (std::size_t l = 0; l < layout.size(); ++l) {
        EXPECT_EQ(first_difference(got, donor, l), -1) << "layer " << layout[l].name;
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// An output that starts one element past an allocation's (16-byte) alignment gets the host
// path's bits as an aligned one does, and nothing outside the layer changes (k = 1..3,
// momentum 0 and 0.25). A vectorised kernel (16-byte loads, b825c13) ran against it on the
// H200; it was no faster than the element-wise one (docs/gpu.md) and is not kept.
TEST(DeviceWindow, MisalignedOutputGivesTheSameBits) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  constexpr std::size_t kCount = 1001;
  pw::Layout layout;
  layout.add("w", kCount);
  pw::ParameterWindow<> dev(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  pw::ParameterWindow<> host(MPI_COMM_WORLD, layout);
  const int rank = dev.rank();
  const int n = dev.size();
  std::vector<float> values(kCount);
  for (std::size_t i = 0; i < kCount; ++i) values[i] = static_cast<float>(spread(rank, i));
  DeviceBuffer mine(kCount * 4);
  mine.upload(values.data());
  ASSERT_TRUE(dev.publish({pw::ConstLayerRef("", mine.get(), kCount, pw::DType::float32,
                                             pw::device_memory)})
                  .published);
  ASSERT_TRUE(host.publish({std::span<const float>(values)}).published);
  MPI_Barrier(MPI_COMM_WORLD);
  for (const std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
    for (int k = 1; k <= std::min(3, n - 1); ++k) {
      for (const double momentum : {0.0, 0.25}) {
        pw::PullOptions o;
        o.momentum = momentum;
        std::vector<int> donors;
        for (int d = 1; d <= k; ++d) donors.push_back((rank + d) % n);
        std::vector<float> start(kCount + 1, 0.5F);
        std::copy(values.begin(), values.end(), start.begin() + static_cast<long>(shift));
        DeviceBuffer out((kCount + 1) * 4);
        out.upload(start.data());
        float* at = static_cast<float*>(out.get()) + shift;
        (void)dev.pull(donors,
                       {pw::LayerRef("", at, kCount, pw::DType::float32, pw::device_memory)}, o);
        std::vector<float> want = values;
        (void)host.pull(donors, {std::span<float>(want)}, o);
        std::vector<float> got(kCount + 1);
        out.download(got.data());
        EXPECT_EQ(std::memcmp(got.data() + shift, want.data(), kCount * 4), 0)
            << "shift " << shift << ", k " << k << ", momentum " << momentum;
        EXPECT_EQ(got[shift == 0 ? kCount : 0], 0.5F) << "a byte outside the layer changed";
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, DeviceMean,
    ::testing::Values(
        MeanCase{pw::WireFormat::native, pw::ReadMode::automatic, pw::Transport::automatic},
        MeanCase{pw::WireFormat::bfloat16, pw::ReadMode::automatic, pw::Transport::automatic},
        MeanCase{pw::WireFormat::float16, pw::ReadMode::automatic, pw::Transport::automatic},
        MeanCase{pw::WireFormat::native, pw::ReadMode::optimistic, pw::Transport::automatic},
        MeanCase{pw::WireFormat::bfloat16, pw::ReadMode::pinned, pw::Transport::automatic},
        // Readers over RMA read the host copy and commit through a bounce buffer.
        MeanCase{pw::WireFormat::native, pw::ReadMode::automatic, pw::Transport::rma},
        MeanCase{pw::WireFormat::bfloat16, pw::ReadMode::automatic, pw::Transport::rma}));

TEST(DeviceWindow, NonFiniteDonorIsRefusedOrSkipped) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(3);
  pw::Layout layout;
  layout.add("w", std::size_t{4096});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  const int rank = win.rank();
  std::vector<float> v(4096, static_cast<float>(rank));
  if (rank == 1) v[5] = std::nanf("");
  DeviceBuffer buf(v.size() * 4);
  buf.upload(v.data());
  ASSERT_TRUE(win.publish({pw::ConstLayerRef("", buf.get(), v.size(), pw::DType::float32,
                                             pw::device_memory)})
                  .published);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    DeviceBuffer out(v.size() * 4);
    out.upload(v.data());
    const pw::LayerRef ref("", out.get(), v.size(), pw::DType::float32, pw::device_memory);
    EXPECT_THROW((void)win.pull({1}, {ref}), pw::DonorError);
    std::vector<float> got(v.size());
    out.download(got.data());
    EXPECT_EQ(got, v) << "a refused pull changed the output";
    pw::PullOptions skip;
    skip.non_finite = pw::NonFinitePolicy::skip_donor;
    const pw::PullResult r = win.pull({1, 2}, {ref}, skip);
    EXPECT_TRUE(r.donors[0].skipped);
    out.download(got.data());
    EXPECT_EQ(got, std::vector<float>(v.size(), 2.0F));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DeviceWindow, WrongMemoryIsRefusedAndChangesNothing) {
  PARAMWIN_REQUIRE_GPU();
  pw::Layout layout;
  layout.add("w", std::size_t{1024});
  pw::ParameterWindow<> dev(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  pw::ParameterWindow<> host(MPI_COMM_WORLD, layout);
  std::vector<float> v(1024, 1.0F);
  DeviceBuffer buf(v.size() * 4);
  buf.upload(v.data());
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const pw::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  // Host memory on a device window.
  std::string e = message([&] { (void)dev.publish({v}); });
  EXPECT_NE(e.find("is host memory, but the window is a device window"), std::string::npos) << e;
  // Host memory tagged as device memory.
  e = message([&] {
    (void)dev.publish(
        {pw::ConstLayerRef("", v.data(), v.size(), pw::DType::float32, pw::device_memory)});
  });
  EXPECT_NE(e.find("CUDA does not know it as GPU memory"), std::string::npos) << e;
  // Device memory declared as host memory on a host window.
  e = message([&] {
    (void)host.publish({pw::ConstLayerRef("", buf.get(), v.size(), pw::DType::float32)});
  });
  EXPECT_NE(e.find("is device (GPU) memory, but the window holds host memory"), std::string::npos)
      << e;
  EXPECT_EQ(dev.version(), 0U);
  EXPECT_EQ(host.version(), 0U);
  // The same for a pull (before any donor is read).
  if (dev.size() > 1) {
    e = message([&] { (void)dev.pull({(dev.rank() + 1) % dev.size()}, {v}); });
    EXPECT_NE(e.find("is host memory, but the window is a device window"), std::string::npos) << e;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DeviceWindow, GpuTooSmallFailsOnEveryRank) {
  PARAMWIN_REQUIRE_GPU();
  pw::Layout layout;
  layout.add("huge", std::size_t{1} << 40U);  // 4 TiB of float32, twice
  try {
    pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
    ADD_FAILURE() << "a 8 TiB device window was created";
  } catch (const pw::Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("bytes of GPU memory") != std::string::npos ||
                what.find("failed:") != std::string::npos)
        << what;
  }
  // Nothing was left behind: a small device window works afterwards.
  pw::Layout small;
  small.add("w", std::size_t{16});
  pw::ParameterWindow<> win(MPI_COMM_WORLD, small, {.memory = pw::Memory::cuda});
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Publishes this rank's values on @p win, pulls rank + 1's and expects them bit for bit.
void expect_round_trip(pw::ParameterWindow<>& win, const pw::Layout& layout) {
  const int rank = win.rank();
  const int donor = (rank + 1) % win.size();
  DeviceLayers mine(layout, host_values(layout, rank));
  ASSERT_TRUE(win.publish(mine.crefs).published);
  MPI_Barrier(MPI_COMM_WORLD);
  DeviceLayers out(layout, host_values(layout, rank + 50));
  (void)win.pull(std::vector<int>{donor}, out.refs);
  const auto want = host_values(layout, donor);
  const auto got = out.download();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    EXPECT_EQ(first_difference(got, want, l), -1) << "layer " << layout[l].name;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/// Sets PARAMWIN_DEVICE_SHARING for a scope (gpu_check.sh runs this test with it set).
class SharingScope {
 public:
  explicit SharingScope(const char* value) {
    const char* was = std::getenv("PARAMWIN_DEVICE_SHARING");
    had_ = was != nullptr;
    if (had_) was_ = was;
    setenv("PARAMWIN_DEVICE_SHARING", value, 1);
  }
  SharingScope(const SharingScope&) = delete;
  SharingScope& operator=(const SharingScope&) = delete;
  ~SharingScope() {
    if (had_) {
      setenv("PARAMWIN_DEVICE_SHARING", was_.c_str(), 1);
    } else {
      unsetenv("PARAMWIN_DEVICE_SHARING");
    }
  }

 private:
  bool had_ = false;
  std::string was_;
};

// When sharing VMM slots fails on one rank (its descriptor exchange, made to fail by the
// test hook), every rank undoes it and the window is created with CUDA IPC slots, which
// work, and rank 0 says so; with PARAMWIN_DEVICE_SHARING=vmm the failure is the error on
// every rank instead, and the next window (VMM) works.
TEST(DeviceWindow, FailedVmmSharingFallsBackToIpcOrIsTheErrorWhenForced) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  int device = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  std::string why;
  const int vmm = pd::cuda::vmm_supported(device, &why) ? 1 : 0;
  int everywhere = 0;
  MPI_Allreduce(&vmm, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (everywhere == 0) GTEST_SKIP() << "VMM sharing is not supported on some rank: " << why;
  const int rank = pw::test::world_rank();
  const pw::Layout layout = all_dtypes();
  {
    const SharingScope sharing("auto");
    if (rank == 1) pd::fail_next_exchange_for_testing();
    ::testing::internal::CaptureStderr();
    std::unique_ptr<pw::ParameterWindow<>> win;
    try {
      win = std::make_unique<pw::ParameterWindow<>>(MPI_COMM_WORLD, layout,
                                                    pw::WindowOptions{.name = "fallback",
                                                                      .memory = pw::Memory::cuda});
    } catch (const std::exception& e) {
      ADD_FAILURE() << "no fallback to IPC slots: " << e.what();
    }
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (rank == 0) {
      EXPECT_NE(err.find("window 'fallback'"), std::string::npos) << err;
      EXPECT_NE(err.find("using CUDA IPC instead"), std::string::npos) << err;
      EXPECT_NE(err.find("made to fail"), std::string::npos) << err;
    }
    if (win) expect_round_trip(*win, layout);
  }
  {
    const SharingScope sharing("vmm");
    if (rank == 1) pd::fail_next_exchange_for_testing();
    try {
      pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
      ADD_FAILURE() << "PARAMWIN_DEVICE_SHARING=vmm: a failed VMM sharing created a window";
    } catch (const pw::Error& e) {
      EXPECT_NE(std::string(e.what()).find("made to fail"), std::string::npos) << e.what();
    }
    pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
    expect_round_trip(win, layout);
  }
}

// An AveragingAgent on a device window (docs/averaging.md: inline rounds) beside one on a host
// window, stepped in lock step over the same values: every round reads the peers' explicit
// publishes of the previous iteration (the steps publish nothing, so the reads are
// deterministic), and after every step the device layers hold the host agent's bits. A
// synchronous step (finish) of device layers is refused on every rank, nothing changed.
TEST(DeviceWindow, AveragingAgentMixesDeviceLayersAsAHostWindowDoes) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  const int rank = pw::test::world_rank();
  pw::Layout layout;
  layout.add("f32", std::size_t{4099}).add("f64", {129}, pw::DType::float64);
  layout.add("bf16", {515}, pw::DType::bfloat16);
  auto options = [](pw::Memory memory, const char* name) {
    pw::AveragingOptions o;
    o.topology = pw::Topology::ring_peers();
    o.publish_every = 1000000;  // the test publishes, between the steps
    o.window.name = name;
    o.window.memory = memory;
    return o;
  };
  pw::AveragingAgent host(MPI_COMM_WORLD, layout, options(pw::Memory::host, "avg_host"));
  pw::AveragingAgent device(MPI_COMM_WORLD, layout, options(pw::Memory::cuda, "avg_device"));
  auto values = host_values(layout, rank);
  DeviceLayers mine(layout, values);
  std::vector<pw::LayerRef> refs = host_refs(layout, values);
  int mixed = 0;
  for (int t = 0; t < 6; ++t) {
    (void)host.publish(const_refs(refs));
    (void)device.publish(mine.crefs);
    MPI_Barrier(MPI_COMM_WORLD);
    const pw::AveragingRound h = host.step(refs);
    const pw::AveragingRound d = device.step(mine.refs);
    EXPECT_EQ(d.applied, h.applied) << "step " << t << ": " << d.note;
    ASSERT_EQ(d.peers.size(), h.peers.size());
    for (std::size_t p = 0; p < d.peers.size(); ++p) {
      EXPECT_EQ(d.peers[p].rank, h.peers[p].rank);
      EXPECT_EQ(d.peers[p].version, h.peers[p].version) << "step " << t;
      EXPECT_EQ(d.peers[p].skipped, pw::SkipReason::none) << "step " << t;
    }
    mixed += d.applied ? 1 : 0;
    const auto got = mine.download();
    for (std::size_t l = 0; l < layout.size(); ++l) {
      EXPECT_EQ(first_difference(got, values, l), -1)
          << "step " << t << ", layer " << layout[l].name;
    }
    MPI_Barrier(MPI_COMM_WORLD);  // every read of this iteration is done before the publishes
  }
  EXPECT_EQ(mixed, 6);
  EXPECT_EQ(device.rounds(), 6);
  EXPECT_EQ(device.window().version(), 6U);
  // The values moved towards the neighbours' (a mix happened, not a copy of one's own).
  EXPECT_NE(first_difference(values, host_values(layout, rank), 0), -1);
  const auto before = mine.download();
  try {
    (void)device.finish(mine.refs);
    ADD_FAILURE() << "finish of device layers was not refused";
  } catch (const pw::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs host memory"), std::string::npos) << e.what();
  }
  const auto after = mine.download();
  for (std::size_t l = 0; l < layout.size(); ++l) {
    EXPECT_EQ(first_difference(after, before, l), -1) << "finish changed " << layout[l].name;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Readers check every pull: a donor publishes a constant array whose value names its version
// (and its stamp says the same), so a torn read shows as a mixed array or a value that is not
// the stamp's. Even ranks publish without pause; odd ranks pull; >= 10000 verified pulls in all.
TEST(DeviceWindow, TornReadStressNeverSeesAMixedSnapshot) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  constexpr std::size_t kCount = std::size_t{1} << 18U;  // 1 MiB of float32
  constexpr long kTotalPulls = 10000;
  pw::Layout layout;
  layout.add("w", kCount);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  const int rank = win.rank();
  const int n = win.size();
  const bool reader = rank % 2 == 1;
  const int readers = n / 2;
  DeviceBuffer buf(kCount * 4);
  std::vector<float> host(kCount);
  auto publish_value = [&](std::uint64_t i) {
    const auto v = static_cast<float>(i % 4096);  // exact in float32
    std::fill(host.begin(), host.end(), v);
    buf.upload(host.data());
    return win.publish({pw::ConstLayerRef("", buf.get(), kCount, pw::DType::float32,
                                          pw::device_memory)},
                       i);
  };
  if (!reader) (void)publish_value(1);
  MPI_Barrier(MPI_COMM_WORLD);
  long verified = 0;
  long bad = 0;
  long publishes = 0;
  if (reader) {
    const int donor = rank - 1;
    const long mine = (kTotalPulls + readers - 1) / readers;
    const pw::LayerRef out("", buf.get(), kCount, pw::DType::float32, pw::device_memory);
    for (long p = 0; p < mine; ++p) {
      pw::PullOptions o;
      o.read_mode = p % 2 == 0 ? pw::ReadMode::automatic : pw::ReadMode::optimistic;
      const pw::PullResult r = win.pull(std::vector<int>{donor}, std::vector<pw::LayerRef>{out}, o);
      buf.download(host.data());
      const auto want = static_cast<float>(r.donors[0].stamp % 4096);
      const bool ok = std::all_of(host.begin(), host.end(), [&](float x) { return x == want; });
      bad += ok ? 0 : 1;
      ++verified;
    }
  }
  MPI_Request done = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  int finished = 0;
  for (std::uint64_t i = 2; finished == 0; ++i) {
    if (!reader) {
      publishes += publish_value(i).published ? 1 : 0;
    }
    MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
  }
  long totals[3] = {verified, bad, publishes};
  long sums[3] = {};
  MPI_Allreduce(totals, sums, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("device torn-read stress: %ld verified pulls, %ld torn or wrong, %ld publishes "
                "meanwhile, %d ranks\n",
                sums[0], sums[1], sums[2], n);
  }
  EXPECT_GE(sums[0], kTotalPulls);
  EXPECT_EQ(sums[1], 0);
  EXPECT_GT(sums[2], 0);
}

// A donor whose GPU runs a long kernel, while its host thread makes no MPI or CUDA call, is
// read all the same: the readers need nothing from it. The pull times are printed (the
// benchmark, not this test, compares them).
TEST(DeviceWindow, BusyDonorIsReadWhileItsKernelRuns) {
  PARAMWIN_REQUIRE_GPU();
  PARAMWIN_REQUIRE_RANKS(2);
  constexpr std::size_t kCount = std::size_t{1} << 22U;  // 16 MiB of float32
  pw::Layout layout;
  layout.add("w", kCount);
  pw::ParameterWindow<> win(MPI_COMM_WORLD, layout, {.memory = pw::Memory::cuda});
  const int rank = win.rank();
  DeviceBuffer buf(kCount * 4);
  std::vector<float> host(kCount, static_cast<float>(rank + 1));
  buf.upload(host.data());
  ASSERT_TRUE(
      win.publish({pw::ConstLayerRef("", buf.get(), kCount, pw::DType::float32, pw::device_memory)})
          .published);
  MPI_Barrier(MPI_COMM_WORLD);
  const pw::LayerRef out("", buf.get(), kCount, pw::DType::float32, pw::device_memory);
  auto time_pulls = [&](double seconds, long& count) {
    std::vector<double> times;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           seconds) {
      const pw::PullResult r = win.pull(std::vector<int>{0}, std::vector<pw::LayerRef>{out});
      times.push_back(r.seconds);
      ++count;
    }
    std::sort(times.begin(), times.end());
    return times.empty() ? 0.0 : times[times.size() / 2];
  };
  long idle_pulls = 0;
  long busy_pulls = 0;
  double idle = 0.0;
  if (rank != 0) idle = time_pulls(0.5, idle_pulls);
  MPI_Barrier(MPI_COMM_WORLD);
  double busy = 0.0;
  if (rank == 0) {
    cudaStream_t s = nullptr;
    cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    paramwin::test::launch_spin(s, 3.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // no MPI, no CUDA call
    cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the kernel runs by then
    busy = time_pulls(1.5, busy_pulls);
    buf.download(host.data());
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float x) { return x == 1.0F; }));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    std::printf("busy donor: median pull of 16 MiB %.1f us with the donor idle (%ld pulls), "
                "%.1f us while its kernel runs (%ld pulls in 1.5 s)\n",
                idle * 1e6, idle_pulls, busy * 1e6, busy_pulls);
  }
  if (rank != 0) {
    EXPECT_GT(busy_pulls, 0);
  }
}

}  // namespace
