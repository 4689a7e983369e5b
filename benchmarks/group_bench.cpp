// Issue 8: rebirth time of an agent made of g ranks, at the same model size, g = 1 vs g = 2.
// With R ranks there are R one-rank agents (g = 1) or R/2 agents of 2 ranks (g = 2). Agent 0
// dies at every timed step (custom trigger) and is reborn from k donor agents; the timed span
// is its whole GroupAgent::step on every one of its ranks (MPI_MAX over them): decide, shard
// pulls, the stamp check, the gather inside the agent (g = 2) and the republish. The other
// agents wait politely inside MPI (scripts/bench.sh --groups: see its poll settings).
#include <algorithm>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "paramwin/paramwin.hpp"

namespace paramwin::bench {
namespace {

void bm_group_rebirth(benchmark::State& state, int g, int k, std::size_t n, Transport transport) {
  if (env().size % g != 0 || env().size / g < k + 1) {
    state.SkipWithError("needs at least k + 1 agents of g ranks");
    return;
  }
  AgentGroups groups(MPI_COMM_WORLD, {.ranks_per_agent = g});
  Layout layout;
  layout.add("w", n);
  bool die = false;
  AgentOptions o;
  o.triggers.age.enabled = false;
  o.triggers.custom = [&die](const TriggerContext& c) { return die && c.rank == 0; };
  o.selection.k = k;
  o.publish.every = 1 << 30;  // only the initial publish and rebirths
  WindowOptions w;
  w.transport = transport;
  GroupAgent agent(groups, layout, o, w);
  std::vector<float> params(n);
  // Every donor agent holds pattern 1: whichever is chosen, the result is known.
  fill_pattern(params, groups.agent() == 0 ? 0 : 1);
  agent.publish({ConstLayerRef(params)});
  polite_barrier(MPI_COMM_WORLD);
  die = true;
  const bool dying = groups.agent() == 0;
  std::int64_t it = 0;
  PhaseSeconds sum;  // rank 0's phases over the timed steps
  std::int64_t steps = 0;
  if (dying) {
    // Warm-up: map every donor's pages into this process once (a first read of another
    // process's shared segment takes a minor page fault per page), create the scratch.
    std::vector<float> shard(agent.plan().count(0, groups.rank_in_agent()));
    for (int d = 1; d < groups.agents(); ++d) (void)agent.window().pull({d}, {LayerRef(shard)});
    (void)agent.step(it++, 1.0, {LayerRef(params)});
  }
  for (auto _ : state) {
    double t = 0.0;
    if (dying) {
      const double t0 = now();
      const StepEvent ev = agent.step(it++, 1.0, {LayerRef(params)});
      t = now() - t0;
      if (!ev.died) throw std::runtime_error("group rebirth: agent 0 did not die: " + ev.note);
      sum.decide += ev.seconds.decide;
      sum.pull += ev.seconds.pull;
      sum.assemble += ev.seconds.assemble;
      sum.mix += ev.seconds.mix;
      sum.publish += ev.seconds.publish;
      ++steps;
    }
    finish_iteration(state, t);
  }
  if (dying) {
    std::vector<float> want(std::min<std::size_t>(n, 4096));
    fill_pattern(want, 1);
    if (!std::equal(want.begin(), want.end(), params.begin())) {
      throw std::runtime_error("group rebirth: reborn parameters differ from the donor's");
    }
  }
  // Where the time goes, on world rank 0 (agent 0's leader), ms per rebirth.
  double ms[5] = {sum.decide, sum.pull, sum.assemble, sum.mix, sum.publish};
  for (double& x : ms) x = steps > 0 ? x * 1e3 / static_cast<double>(steps) : 0.0;
  check(MPI_Bcast(ms, 5, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  state.counters["decide_ms"] = ms[0];
  state.counters["pull_ms"] = ms[1];
  state.counters["assemble_ms"] = ms[2];
  state.counters["mix_ms"] = ms[3];
  state.counters["publish_ms"] = ms[4];
  polite_barrier(MPI_COMM_WORLD);
  set_bytes(state, n * sizeof(float));
}

}  // namespace

void register_group_benchmarks() {
  for (const std::size_t n : {std::size_t{10000000}, std::size_t{50000000}}) {
    for (const Transport t : {Transport::shm, Transport::rma}) {
      for (const int k : {1, 2}) {
        for (const int g : {1, 2}) {
          if (env().size / g < k + 1 || env().size % g != 0) continue;
          const std::string name = "group_rebirth/" + std::string(transport_name(t)) +
                                   "/k:" + std::to_string(k) + "/g:" + std::to_string(g) +
                                   "/n:" + count_label(n);
          with_stats(benchmark::RegisterBenchmark(name.c_str(),
                                                  [g, k, n, t](benchmark::State& s) {
                                                    bm_group_rebirth(s, g, k, n, t);
                                                  }))
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

}  // namespace paramwin::bench
