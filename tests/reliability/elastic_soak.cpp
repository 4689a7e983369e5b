// The elastic soak (docs/elastic.md, "Soak"): members train an ElasticAgent population (or,
// with `averaging`, an ElasticAveragingAgent one) for a fixed wall time while faults hit random
// slots on a schedule every process knows; spares take the slots. Usage (every rank the same
// arguments):
//   elastic_soak <members> <seconds> <faults> <fault kind> [standing] [spawn=<pool>]
//                [spawn_low=<l>] [spawn_ahead] [averaging] [dead_after=<s>]
// fault kind: resign (the trainer throws; the process resigns and waits as a spare, so it can
// be given a slot again: a fault that any MPI survives), kill (SIGKILL: Open MPI with
// --enable-recovery; each fault uses up a spare, so at most the spares' count), sigstop (the
// process stops itself for 3 s: a child shell sends SIGCONT; the others judge it dead after
// dead_after_seconds = 1.5 s of silence (dead_after=<s>: another bound), and when it wakes its
// step throws EvictedError and
// it waits as a spare), or mixed (every third fault sigstop, one kill per spare but one,
// spread over the run, the others resign); standing:
// MembershipOptions::replacement = standing_window (default: new_window). spawn=<pool> (Open
// MPI, new_window): SpawnOptions::pool = pool, the spares refilled by MPI_Comm_spawn
// (spawn_low=<l>: SpawnOptions::low, a refill only when fewer than l spares live;
// spawn_ahead: SpawnOptions::ahead, a spare spawns while the members train on); then
// kill and mixed are not limited by the spares (mixed: every third fault a SIGSTOP, the others
// SIGKILL and exceptions in turn). A spawned process runs this program with the arguments
// of the start and start=<t> (the run's start, which its own world cannot tell it).
// Faults come at k * span / (faults + 1), span the run's seconds (less the last 5 s with
// stops). The model: w (10,000 float32) regressed towards a fixed target, loss = mean (w - t)^2,
// one gradient step and 5 ms of sleep (the device's compute) per step; age trigger rebirths every
// 40-60 steps from k = 2 donors. With `averaging` the members instead gossip over a ring of the
// slots every step (AveragingAgent, self weight 1/3), and a joiner starts from the uniform mix
// of the live members; a one-element layer "loss" carries each member's loss in its snapshot,
// so the join's mix of it is the members' mean loss (its "donors' mean"). Every process prints
// lines the soak report reads (scripts/elastic_soak.py): "fault <k> slot <s> at <t>", "refill
// <n> seconds <s>" (a member that took part in the population's n-th refill, s its
// RefillStats::last_seconds), "resume
// slot <s> at <t>" (a stopped process that stepped on in its slot: it was not replaced), "join
// slot <s> at <t> loss <l> donors_mean <m>", "steps <n> <seconds of step time> ..." (at the
// end, and from a process about to be SIGKILLed, before it dies), "final
// slot <s> loss <l>" from each process that finished in a slot, and at the end, from the last
// epoch's slot 0, "soak: epoch <e>, <slots> slots finished" (the step times also split into
// steps begun within 0.1 s after a scheduled fault, a recovery, and the others). t is
// steady_clock seconds (system-wide on Linux). No checkpoint is written or read.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "death_test_util.hpp"
#include "paramwin/paramwin.hpp"

namespace pw = paramwin;

namespace {

constexpr std::size_t kN = 10000;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The slot fault @p k hits (the same on every process).
int fault_slot(int k, int members) {
  std::mt19937 gen(static_cast<unsigned>(1000 + k));
  return std::uniform_int_distribution<int>(0, members - 1)(gen);
}

double loss_of(const std::vector<float>& w, const std::vector<float>& t) {
  double s = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double d = static_cast<double>(w[i]) - static_cast<double>(t[i]);
    s += d * d;
  }
  return s / static_cast<double>(w.size());
}

struct Fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The kind of fault @p k of @p faults under @p kind (the same on every process): "mixed"
/// spreads @p kills SIGKILLs over the run, makes every third fault a SIGSTOP and the others
/// trainer exceptions.
std::string fault_kind(const std::string& kind, int k, int faults, int kills, bool refilled) {
  if (kind != "mixed") return kind;
  if (refilled) return k % 3 == 0 ? "sigstop" : k % 3 == 1 ? "kill" : "resign";
  for (int i = 1; i <= kills; ++i) {
    if (k == i * faults / (kills + 1)) return "kill";
  }
  return k % 3 == 0 ? "sigstop" : "resign";
}

/// What a join reports: the round's kind or rebirth reason, and the donors' mean loss.
struct Joined {
  std::string how;
  double donors_mean = 0.0;
};

/// The PBT population: an ElasticAgent whose members are reborn by age from the 2 fittest.
struct PbtPopulation {
  pw::ElasticAgent<> agent;

  PbtPopulation(const pw::WindowOptions& window_options, const pw::MembershipOptions& membership)
      : agent(MPI_COMM_WORLD, layout(), options(), window_options, membership) {}
  static pw::Layout layout() {
    pw::Layout l;
    l.add("w", kN);
    return l;
  }
  static pw::AgentOptions options() {
    pw::AgentOptions o =
        pw::parse_agent_options("triggers=age age=40..60 k=2 selection=fittest direction=lower");
    o.seed = 5;
    return o;
  }
  /// Whether this member's next step is a joined spare's first.
  bool joining() { return agent.agent().policy().pending() == pw::DeathReason::joined; }
  /// One step of the member with parameters @p w at @p loss.
  Joined step(std::int64_t it, double loss, std::vector<float>& w) {
    const pw::StepEvent e = agent.step(it, loss, {pw::LayerRef(w)});
    Joined j{std::string(pw::reason_name(e.reason)), 0.0};
    for (const pw::DonorRecord& d : e.donors)
      j.donors_mean += d.metric / static_cast<double>(e.donors.size());
    return j;
  }
  /// The end: finish() with the last parameters (a slot that dies meanwhile is filled too).
  void finish(std::vector<float>& w) { agent.finish({pw::LayerRef(w)}); }
};

/// The averaging population: an ElasticAveragingAgent whose members gossip over a ring of the
/// slots every step; the layer "loss" carries each member's loss.
struct AveragingPopulation {
  pw::ElasticAveragingAgent agent;
  std::vector<float> loss_layer = std::vector<float>(1, 0.0F);

  AveragingPopulation(const pw::WindowOptions& window_options,
                      const pw::MembershipOptions& membership)
      : agent(MPI_COMM_WORLD, layout(), options(window_options), membership) {}
  static pw::Layout layout() {
    pw::Layout l;
    l.add("w", kN);
    l.add("loss", 1);
    return l;
  }
  static pw::AveragingOptions options(const pw::WindowOptions& window_options) {
    pw::AveragingOptions o;
    o.topology = pw::Topology::ring_peers();  // over the slots, whoever holds them
    o.interval = 1;
    o.timeout_seconds = 1.0;  // a dead member over RMA never answers
    o.window = window_options;
    return o;
  }
  bool joining() { return agent.agent().joining(); }
  Joined step(std::int64_t /*it*/, double loss, std::vector<float>& w) {
    loss_layer[0] = static_cast<float>(loss);
    const pw::AveragingRound r = agent.step({pw::LayerRef(w), pw::LayerRef(loss_layer)});
    // A join's "loss" layer is the uniform mix of the members' losses: their mean.
    return {std::string(pw::enum_name(r.kind)), static_cast<double>(loss_layer[0])};
  }
  void finish(std::vector<float>& w) { agent.finish({pw::LayerRef(w), pw::LayerRef(loss_layer)}); }
};

/// The soak's settings, the same on every process.
struct Soak {
  int members = 0;
  double seconds = 0.0;
  int faults = 0;
  std::string kind;
  int pool = 0;
  int low = 0;
  bool ahead = false;
  int kills = 0;
  double start = 0.0;
  double interval = 0.0;
};

/// A stopped process is judged by its silence: shorter than its 3 s stop.
constexpr double kStopSeconds = 3.0;

template <class Population>
[[noreturn]] void run_soak(Population& pop, const Soak& soak);

}  // namespace

int main(int argc, char** argv) {
  pw::test::DeathRun run(argc, argv);
  if (argc < 5) {
    if (run.rank == 0)
      std::printf("usage: elastic_soak <members> <seconds> <faults> <resign|kill|sigstop|mixed> "
                  "[standing] [spawn=<pool>] [spawn_low=<l>] [spawn_ahead] [averaging] "
                  "[dead_after=<s>]\n");
    std::_Exit(2);
  }
  Soak soak;
  soak.members = std::atoi(argv[1]);
  soak.seconds = std::atof(argv[2]);
  soak.faults = std::atoi(argv[3]);
  soak.kind = argv[4];
  bool standing = false;
  bool averaging = false;
  double start = -1.0;
  double dead_after = 1.5;  // the silence bound with stops
  for (int i = 5; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "standing") standing = true;
    if (a == "averaging") averaging = true;
    if (a.rfind("spawn=", 0) == 0) soak.pool = std::atoi(a.c_str() + 6);
    if (a.rfind("spawn_low=", 0) == 0) soak.low = std::atoi(a.c_str() + 10);
    if (a == "spawn_ahead") soak.ahead = true;
    if (a.rfind("start=", 0) == 0) start = std::atof(a.c_str() + 6);
    if (a.rfind("dead_after=", 0) == 0) dead_after = std::atof(a.c_str() + 11);
  }
  if (start < 0.0) {  // a process of the start (a spawned one was told)
    start = now_seconds();
    MPI_Bcast(&start, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    start += 0.5;  // every process past its set-up
  }
  soak.start = start;
  // Faults are spread evenly over the run; a stop (sigstop, mixed) needs its silence bound and
  // a join after it, so none comes in the last 5 s (a slot still empty at the end would count
  // as a lost agent by the soak's own schedule).
  const bool stops = soak.kind == "sigstop" || soak.kind == "mixed";
  const double span = stops ? std::max(soak.seconds - 5.0, soak.seconds / 2) : soak.seconds;
  soak.interval = soak.faults > 0 ? span / (soak.faults + 1) : 1e300;

  pw::WindowOptions window_options;
  window_options.name = "elastic_soak";
  pw::MembershipOptions membership;
  membership.members = soak.members;
  membership.check_seconds = 0.02;
  if (standing) membership.replacement = pw::Replacement::standing_window;
  if (soak.pool > 0) {
    membership.spawn.pool = soak.pool;
    membership.spawn.low = soak.low;
    membership.spawn.ahead = soak.ahead;
    std::vector<std::string> args(argv + 1, argv + argc);
    char at[64];
    std::snprintf(at, sizeof at, "start=%.6f", start);
    if (std::none_of(args.begin(), args.end(),
                     [](const std::string& a) { return a.rfind("start=", 0) == 0; })) {
      args.emplace_back(at);
    }
    membership.spawn.args = args;
  }
  soak.kills =
      soak.kind == "mixed" && soak.pool == 0 ? std::max(0, run.size - soak.members - 1) : 0;
  if (stops) membership.dead_after_seconds = dead_after;
  if (averaging) {
    AveragingPopulation pop(window_options, membership);
    run_soak(pop, soak);
  }
  PbtPopulation pop(window_options, membership);
  run_soak(pop, soak);
}

namespace {

/// Trains @p pop's slots until the run's time is up, injecting this process's faults; prints
/// the report's lines and ends the process.
template <class Population>
[[noreturn]] void run_soak(Population& pop, const Soak& soak) {
  auto& agent = pop.agent;
  const int members = soak.members;
  const double start = soak.start;
  const double interval = soak.interval;
  std::vector<float> target(kN);
  for (std::size_t i = 0; i < kN; ++i)
    target[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
  std::vector<float> w(kN);
  std::mt19937 init(static_cast<unsigned>(agent.membership().world_rank()));
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (float& x : w) x = 3.0F * normal(init);

  const bool spawned = agent.membership().refills().spawned_here;
  std::mt19937 gen(
      static_cast<unsigned>(77 + agent.membership().world_rank() + (spawned ? 100000 : 0)));
  std::normal_distribution<float> noise(0.0F, 2.0F);  // a noisy gradient: the loss plateaus
  std::int64_t steps = 0;
  double step_seconds = 0.0;
  // Steps that began within kRecovery seconds after a scheduled fault, and the others.
  constexpr double kRecovery = 0.1;
  double recovery_sum = 0.0;
  double other_sum = 0.0;
  std::int64_t recovery_steps = 0;
  std::int64_t other_steps = 0;
  std::vector<double> plain;     // step times without an epoch change
  std::vector<double> changing;  // step times of steps that moved to a new epoch
  int faults_done = 0;
  int joins = 0;
  bool finished = false;  // this process finished in a slot
  const auto failed = [&](const pw::Error& e) {
    std::printf("FAILED: world rank %d (%s, slot %d, epoch %llu): %s\n",
                agent.membership().world_rank(), spawned ? "spawned" : "of the start",
                agent.membership().slot(),
                static_cast<unsigned long long>(agent.membership().epoch()), e.what());
    std::fflush(stdout);
    std::_Exit(1);
  };
  // This process's steps line: at the end, and before a SIGKILL (a killed process's steps
  // count too).
  const auto report_steps = [&] {
    const auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    const double plain_median = median(plain);
    double extra = 0.0;  // what the epoch changes added to this process's steps
    for (double t : changing) extra += t - plain_median;
    std::printf("steps %lld step_seconds %.3f faults %d joins %d plain_median_ms %.3f "
                "epoch_steps %zu epoch_median_ms %.3f epoch_extra_s %.3f recovery_steps %lld "
                "recovery_ms %.3f other_steps %lld other_ms %.3f\n",
                static_cast<long long>(steps), step_seconds, faults_done, joins, plain_median * 1e3,
                changing.size(), median(changing) * 1e3, extra,
                static_cast<long long>(recovery_steps), recovery_sum * 1e3,
                static_cast<long long>(other_steps), other_sum * 1e3);
    std::fflush(stdout);
  };
  const auto wait_for_slot = [&] {
    try {
      return agent.wait_for_slot();
    } catch (const pw::Error& e) {
      failed(e);
    }
    return false;
  };
  while (wait_for_slot()) {
    const int slot = agent.membership().slot();
    const bool joined = pop.joining();
    bool first = true;  // the first step since this process was given its slot
    bool woke = false;  // this process stopped itself and has not stepped since
    // The faults before this moment are not this process's to take.
    int next_fault =
        std::max(1, static_cast<int>(std::floor((now_seconds() - start) / interval)) + 1);
    try {
      for (std::int64_t it = agent.resume_iteration();; ++it) {
        const double t0 = now_seconds();
        if (t0 - start >= soak.seconds) break;
        for (std::size_t i = 0; i < kN; ++i) w[i] -= 0.005F * (w[i] - target[i] + noise(gen));
        const double loss = loss_of(w, target);
        const std::uint64_t epoch = agent.membership().epoch();
        const std::uint64_t refills = agent.membership().refills().refills;
        const Joined j = pop.step(it, loss, w);
        const bool changed = agent.membership().epoch() != epoch;
        if (agent.membership().refills().refills != refills) {  // this member was in a refill
          std::printf("refill %llu seconds %.3f\n",
                      static_cast<unsigned long long>(agent.membership().refills().refills),
                      agent.membership().refills().last_seconds);
        }
        if (joined && first) {
          ++joins;
          std::printf("join slot %d at %.6f loss %.6g donors_mean %.6g reason %s\n", slot,
                      now_seconds(), loss_of(w, target), j.donors_mean, j.how.c_str());
        }
        first = false;
        if (woke) {  // not evicted while it was stopped: its slot was never given away
          std::printf("resume slot %d at %.6f\n", slot, now_seconds());
          woke = false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ++steps;
        const double t1 = now_seconds();
        step_seconds += t1 - t0;
        (changed ? changing : plain).push_back(t1 - t0);
        const double since = t0 - start;
        const double n = std::floor(since / interval);
        if (n >= 1.0 && n <= soak.faults && since - n * interval < kRecovery) {
          recovery_sum += t1 - t0;
          ++recovery_steps;
        } else {
          other_sum += t1 - t0;
          ++other_steps;
        }
        while (next_fault <= soak.faults && t1 >= start + next_fault * interval) {
          const int k = next_fault++;
          if (fault_slot(k, members) != slot) continue;
          ++faults_done;
          const std::string what = fault_kind(soak.kind, k, soak.faults, soak.kills, soak.pool > 0);
          std::printf("fault %d slot %d at %.6f kind %s\n", k, slot, now_seconds(), what.c_str());
          std::fflush(stdout);
          if (what == "kill") {
            report_steps();
            pw::test::die(true);
          }
          if (what == "sigstop") {
            pw::test::stop_self_for(kStopSeconds);  // the next step finds it evicted
            // The faults scheduled while it was stopped are its slot's new holder's, if any.
            next_fault =
                std::max(next_fault,
                         static_cast<int>(std::floor((now_seconds() - start) / interval)) + 1);
            woke = true;
            break;
          }
          throw Fault("injected");
        }
      }
      pop.finish(w);
      finished = true;
      break;
    } catch (const Fault&) {
      agent.resign();
    } catch (const pw::EvictedError&) {
    } catch (const pw::Error& e) {
      failed(e);
    }
  }
  report_steps();
  if (soak.pool > 0 && agent.membership().slot() <= 0) {
    const pw::RefillStats& r = agent.membership().refills();
    std::printf("refills %llu spawned %llu failed %llu\n",
                static_cast<unsigned long long>(r.refills),
                static_cast<unsigned long long>(r.spawned),
                static_cast<unsigned long long>(r.failed));
  }
  if (finished) {
    std::printf("final slot %d loss %.6g\n", agent.membership().slot(), loss_of(w, target));
  }
  std::fflush(stdout);
  if (!finished) std::_Exit(0);
  MPI_Comm last = agent.membership().create_members_comm();
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(last, &rank);
  MPI_Comm_size(last, &size);
  if (rank == 0) {
    std::printf("soak: epoch %llu, %d slots finished\n",
                static_cast<unsigned long long>(agent.membership().epoch()), size);
  }
  std::fflush(stdout);
  std::_Exit(0);
}

}  // namespace
