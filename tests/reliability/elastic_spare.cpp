// Spares take dead members' slots (docs/elastic.md, "Epochs and spares"). The world's last
// two ranks are spares, the others members of one ElasticAgent population; every member trains
// 150 iterations (900 with --sigstop). Faults, by the first argument:
//   --exit    the last slot's process ends (std::_Exit(3)) after iteration 30, slot 1's after 70;
//   --kill    the same with SIGKILL (survivable under Open MPI's --enable-recovery only);
//   --resign  the same slots throw instead; each catches, resigns (a spare takes its slot) and
//             waits as a spare itself, so the population loses no process;
//   --sigstop world rank 0 stops the last slot's process (SIGSTOP) after its iteration 30 and
//             lets it go on (SIGCONT) 4 s later; the others judge it dead after 1.5 s of
//             silence, a spare takes its slot, and when it wakes its step throws EvictedError
//             before touching its window: it waits as a spare until the end.
//   --stall-at-end the last slot's process stops itself (SIGSTOP, for 4 s) after its last
//             step, before finish(); the others judge it dead and end without it (no epoch
//             at the end), and when it wakes its finish() must throw EvictedError: it never
//             finishes in a population that ended without it.
// --early-finish (any position): every member trains 800 iterations, and slot 0 drops its 5 ms
// sleep from iteration 200 on (well after the faults' epochs), so it finishes about 3 s before
// the others and waits in finish() longer than the silence bound (1.5 s): it must not be
// judged dead and replaced (no third epoch).
// --after-finish (any position): slot 0 trains 20 iterations only and finishes
// (finish(params)); the faults wait at their iteration until it has (a mark file), so both
// slots die while slot 0 waits in finish(). Their spares must still take them (slot 0 takes
// part in both epochs, republishing its last parameters in new_window's windows), and slot 0
// must have entered finish() in epoch 0. With --bare-finish too (new_window): slot 0 calls
// finish() without its parameters, so it cannot take part in a new window: the two slots stay
// empty (no join, no epoch; 2 slots finish) and the population still ends.
// Checked by every process of the last epoch: each joined spare's first step was a rebirth
// (reason joined) from live donors only, and its parameters, captured in on_rebirth, are the
// exact mix of the donors' recorded versions (a member's snapshot at version v is, by
// construction, 1000 * slot + v + 0.001 * j in w[j], and 1 in v[slot]); every slot finished
// its iterations (0 lost agents); a fault was followed by an epoch. The processes of the
// last epoch meet over its communicator (no dead rank in it) and print the pass line; every
// process ends with std::_Exit(0). Each joiner prints the seconds from the coordinator's
// judgement to its first step.
// --cuda (after the fault, any position; built with CUDA): the population's window is a device
// window and the parameters live on the GPU (written from the encoding before each publish,
// read back in on_rebirth); scripts/gpu_check.sh runs it. Without a GPU it says so and fails.
#include <mpi.h>
#ifdef PARAMWIN_TEST_CUDA
#include <cuda_runtime.h>
#endif

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "death_test_util.hpp"
#include "elastic_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 256;
constexpr int kSpares = 2;

/// What a process saw, checked at the end.
struct Seen {
  int joins = 0;            // slots this process was given as a spare
  int bad_mixes = 0;        // joined rebirths whose parameters were not the exact mix
  int bad_first_steps = 0;  // joined first steps that were no rebirth from donors
  int epochs_seen = 0;
  bool evicted = false;
  std::vector<float> captured_w;  // the parameters as on_rebirth saw them
  std::vector<float> captured_v;
};

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The parameters on the GPU (--cuda): device copies of the encoded host vectors.
class DeviceParams {
 public:
  DeviceParams(std::size_t w, std::size_t v)
      : w_bytes_(w * sizeof(float)), v_bytes_(v * sizeof(float)) {
#ifdef PARAMWIN_TEST_CUDA
    if (cudaMalloc(&w_, w_bytes_) != cudaSuccess || cudaMalloc(&v_, v_bytes_) != cudaSuccess) {
      throw std::runtime_error("cudaMalloc of the device parameters failed");
    }
#else
    throw std::runtime_error("--cuda: this test was built without CUDA");
#endif
  }
  DeviceParams(const DeviceParams&) = delete;
  DeviceParams& operator=(const DeviceParams&) = delete;
  ~DeviceParams() = default;  // the process ends with _Exit
  void upload(const std::vector<float>& w, const std::vector<float>& v) const {
    copy(w_, w.data(), w_bytes_, true);
    copy(v_, v.data(), v_bytes_, true);
  }
  void download(std::vector<float>& w, std::vector<float>& v) const {
    copy(w.data(), w_, w_bytes_, false);
    copy(v.data(), v_, v_bytes_, false);
  }
  [[nodiscard]] pw::LayerRef w_ref() const {
    return {"", w_, w_bytes_ / sizeof(float), pw::DType::float32, pw::device_memory};
  }
  [[nodiscard]] pw::LayerRef v_ref() const {
    return {"", v_, v_bytes_ / sizeof(float), pw::DType::float32, pw::device_memory};
  }

 private:
  static void copy([[maybe_unused]] void* dst, [[maybe_unused]] const void* src,
                   [[maybe_unused]] std::size_t bytes, [[maybe_unused]] bool to_device) {
#ifdef PARAMWIN_TEST_CUDA
    if (cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      throw std::runtime_error("cudaMemcpy of the device parameters failed");
    }
#endif
  }
  std::size_t w_bytes_;
  std::size_t v_bytes_;
  void* w_ = nullptr;
  void* v_ = nullptr;
};

bool has_arg(int argc, char** argv, const std::string& what) {
  for (int i = 2; i < argc; ++i) {
    if (what == argv[i]) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  const std::string how = argc > 1 ? argv[1] : "--exit";
  const bool standing = has_arg(argc, argv, "--standing");
  const bool on_device = has_arg(argc, argv, "--cuda");
  const int members = run.size - kSpares;
  // --sigstop: long enough for the silence bound (1.5 s) and the stall (4 s) to pass.
  const bool early_finish = has_arg(argc, argv, "--early-finish");
  const std::int64_t steps = how == "--sigstop" ? 900 : early_finish ? 800 : 150;
  const bool stall_at_end = how == "--stall-at-end";
  const bool after_finish = has_arg(argc, argv, "--after-finish");
  const bool bare_finish = has_arg(argc, argv, "--bare-finish");
  pw::Layout layout;
  layout.add("w", kN);
  layout.add("v", static_cast<std::size_t>(members));
  Seen seen;
  std::vector<float> w(kN);
  std::vector<float> v(static_cast<std::size_t>(members));
  std::unique_ptr<DeviceParams> device;
  if (on_device) device = std::make_unique<DeviceParams>(w.size(), v.size());
  pw::AgentOptions options = pw::parse_agent_options("triggers=none k=2 selection=uniform");
  options.seed = 11;
  // The parameters are written for the publish that follows (the step's, or the republish
  // into a new epoch's window), so that a snapshot's contents follow from its version.
  pw::ElasticAgent<>* self = nullptr;
  options.prepare_params = [&] {
    pw::test::encode_slot(w, v, self->membership().slot(), self->agent().window().version() + 1);
    if (device) device->upload(w, v);
  };
  options.on_rebirth = [&](const pw::StepEvent&, std::span<const pw::LayerRef>) {
    if (device) device->download(w, v);
    seen.captured_w = w;
    seen.captured_v = v;
  };
  pw::WindowOptions window_options;
  window_options.name = "elastic_spare";
  window_options.liveness.suspect_seconds = 1.0;
  if (on_device) window_options.memory = pw::Memory::cuda;
  pw::MembershipOptions membership;
  membership.members = members;
  membership.check_seconds = 0.02;
  membership.dead_after_seconds = 1.5;
  membership.agree_seconds = 20.0;
  if (standing) membership.replacement = pw::Replacement::standing_window;
  pw::ElasticAgent<> agent(MPI_COMM_WORLD, layout, options, window_options, membership);
  self = &agent;
  // The pids of every world rank, for --sigstop (all on this host).
  std::vector<int> pids(static_cast<std::size_t>(run.size));
  const int mine = static_cast<int>(getpid());
  MPI_Allgather(&mine, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  // --after-finish: slot 0 marks that it finished (the file named after world rank 0's pid).
  const std::string finished_mark =
      "/tmp/paramwin_elastic_spare_finished." + std::to_string(pids[0]);
  if (after_finish && run.rank == 0) std::remove(finished_mark.c_str());  // a crashed run's
  std::uint64_t finish_epoch = 0;  // the epoch in which this process entered finish()
  const int first_victim = members - 1;
  const int second_victim = 1;
  const bool original = run.rank < members;
  bool stopped_victim = false;
  bool finished = false;  // this process finished in a slot
  while (agent.wait_for_slot()) {
    const int slot = agent.membership().slot();
    const bool joined = agent.agent().policy().pending() == pw::DeathReason::joined;
    if (joined) ++seen.joins;
    bool first = true;  // the first step since this process was given its slot
    const std::int64_t last = after_finish && slot == 0 ? 20 : steps;
    try {
      for (std::int64_t it = agent.resume_iteration(); it < last; ++it) {
        const std::uint64_t epoch = agent.membership().epoch();
        const pw::StepEvent e =
            device ? agent.step(it, 1.0 * slot, {device->w_ref(), device->v_ref()})
                   : agent.step(it, 1.0 * slot, {pw::LayerRef(w), pw::LayerRef(v)});
        if (agent.membership().epoch() != epoch) ++seen.epochs_seen;
        if (joined && first) {
          if (!e.died || e.reason != pw::DeathReason::joined) ++seen.bad_first_steps;
          if (e.died && !pw::test::exact_slot_mix(e, seen.captured_w, seen.captured_v,
                                                  agent.membership().members(), standing)) {
            ++seen.bad_mixes;
          }
          const auto& change = agent.membership().last_change();
          std::printf("world rank %d: joined slot %d at iteration %lld (epoch %llu, agreed in "
                      "%.3f s), first step: %s from %zu donors\n",
                      run.rank, slot, static_cast<long long>(it),
                      static_cast<unsigned long long>(change ? change->epoch : 0),
                      change ? change->agree_seconds : -1.0,
                      e.died ? pw::reason_name(e.reason).data() : "no rebirth", e.donors.size());
          std::printf("joined first step at %.6f\n", monotonic_seconds());
        }
        first = false;
        if (!early_finish || slot != 0 || it < 200) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        const bool victim_slot =
            original && !joined && (it == 30 || it == 70) &&
            ((it == 30 && slot == first_victim) || (it == 70 && slot == second_victim)) &&
            !stall_at_end;
        if (how == "--sigstop" && run.rank == 0 && it == 32 && !stopped_victim) {
          stopped_victim = true;
          const int victim_rank =
              agent.membership().members()[static_cast<std::size_t>(first_victim)];
          const pid_t victim = pids[static_cast<std::size_t>(victim_rank)];
          kill(victim, SIGSTOP);
          std::printf("fault at %.6f: world rank %d stopped\n", monotonic_seconds(), victim_rank);
          std::thread([victim] {
            std::this_thread::sleep_for(std::chrono::seconds(4));
            kill(victim, SIGCONT);
          }).detach();
        }
        if (!victim_slot || how == "--sigstop") continue;  // --stall-at-end: never a victim
        if (after_finish && access(finished_mark.c_str(), F_OK) != 0) {
          --it;  // steps (stamps) at the fault's iteration until slot 0 has finished
          continue;
        }
        std::printf("fault at %.6f: world rank %d (slot %d) %s\n", monotonic_seconds(), run.rank,
                    slot, how.c_str());
        std::fflush(stdout);
        if (how == "--resign") throw std::runtime_error("the trainer's exception");
        pw::test::die(how == "--kill");
      }
      if (stall_at_end && original && !joined && slot == first_victim) {
        std::printf("fault at %.6f: world rank %d (slot %d) stops before finish()\n",
                    monotonic_seconds(), run.rank, slot);
        std::fflush(stdout);
        pw::test::stop_self_for(4.0);
        agent.finish();  // must throw EvictedError: its slot went on without it
        std::printf("FAILED: world rank %d finished in slot %d after it was replaced\n", run.rank,
                    slot);
        std::fflush(stdout);
        std::_Exit(0);
      }
      finish_epoch = agent.membership().epoch();
      if (after_finish && slot == 0 && original) {
        std::FILE* f = std::fopen(finished_mark.c_str(), "w");
        if (f != nullptr) std::fclose(f);
        std::printf("world rank %d (slot 0) finishes at %.6f, epoch %llu\n", run.rank,
                    monotonic_seconds(), static_cast<unsigned long long>(finish_epoch));
        std::fflush(stdout);
      }
      if (bare_finish) {
        agent.finish();
      } else if (device) {
        agent.finish({device->w_ref(), device->v_ref()});
      } else {
        agent.finish({pw::LayerRef(w), pw::LayerRef(v)});
      }
      finished = true;
      break;
    } catch (const pw::EvictedError& e) {
      seen.evicted = true;
      std::printf("world rank %d: %s\n", run.rank, e.what());
    } catch (const std::runtime_error& e) {
      if (how != "--resign") throw;
      agent.resign();
    }
  }
  std::fflush(stdout);
  if (!finished) std::_Exit(0);  // a spare released at the end, or an evicted process
  // The last epoch's processes: no dead rank among them.
  MPI_Comm last = agent.membership().create_members_comm();
  int bad = seen.bad_mixes + seen.bad_first_steps;
  if (bad != 0) {
    std::printf("FAILED: world rank %d: %d joined rebirths not the exact mix, %d first steps "
                "no rebirth\n",
                run.rank, seen.bad_mixes, seen.bad_first_steps);
  }
  int totals[4] = {bad, seen.joins, 0, 0};
  totals[2] = static_cast<int>(agent.membership().epoch());
  // --after-finish: the lowest epoch any process entered finish() in (slot 0's: want 0).
  totals[3] = static_cast<int>(finish_epoch);
  int sums[4] = {0, 0, 0, 0};
  MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, last);
  MPI_Allreduce(&totals[2], &sums[2], 2, MPI_INT, MPI_MIN, last);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  const int expected_joins = stall_at_end || bare_finish ? 0 : how == "--sigstop" ? 1 : 2;
  const int expected_slots = stall_at_end ? members - 1 : bare_finish ? members - 2 : members;
  if (rank == 0) {
    if (after_finish) std::remove(finished_mark.c_str());
    std::printf("last epoch %d, %d slots finished, %d joins, first finish() in epoch %d\n", sums[2],
                size, sums[1], sums[3]);
    if (sums[0] == 0 && sums[1] == expected_joins && sums[2] == expected_joins &&
        size == expected_slots && (!after_finish || sums[3] == 0)) {
      std::printf(bare_finish ? "elastic: no slot filled after a bare finish (%s%s%s)\n"
                              : "elastic: spares took every dead slot (%s%s%s)\n",
                  how.c_str(), standing ? ", standing window" : "",
                  on_device ? ", device window" : "");
    } else {
      std::printf("FAILED: %d bad, %d joins (want %d), epoch %d, %d slots, first finish() in "
                  "epoch %d (--after-finish: want 0)\n",
                  sums[0], sums[1], expected_joins, sums[2], size, sums[3]);
    }
  }
  std::fflush(stdout);
  std::_Exit(0);
}
