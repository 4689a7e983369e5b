// AgentSnapshot <-> text ("key value" lines; doubles as their 64-bit patterns, so that the
// metric comes back bit for bit).
#include "checkpoint/agent_state.hpp"

#include <bit>
#include <charconv>
#include <map>
#include <sstream>

#include "paramwin/checkpoint.hpp"

namespace paramwin::detail {

namespace {

constexpr std::string_view kFormat = "paramwin-agent-state 1";

std::string words(const auto& values) {
  std::string s;
  for (const auto v : values) {
    if (!s.empty()) s += ' ';
    s += std::to_string(v);
  }
  return s;
}

[[noreturn]] void bad(const std::string& what) {
  throw CheckpointError("paramwin: checkpoint: agent state: " + what);
}

std::uint64_t to_u64(const std::string& key, std::string_view v) {
  std::uint64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) bad("'" + key + "' is not a number");
  return out;
}

std::int64_t to_i64(const std::string& key, std::string_view v) {
  std::int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) bad("'" + key + "' is not a number");
  return out;
}

std::vector<std::uint64_t> to_words(const std::string& key, std::string_view v) {
  std::vector<std::uint64_t> out;
  std::size_t i = 0;
  while (i < v.size()) {
    const std::size_t j = std::min(v.find(' ', i), v.size());
    out.push_back(to_u64(key, v.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string encode_agent_state(const AgentSnapshot& s) {
  std::ostringstream out;
  out << kFormat << '\n';
  out << "steps " << s.policy.steps << '\n';
  out << "age " << s.policy.age << '\n';
  out << "max_age " << s.policy.max_age << '\n';
  out << "rebirth_step " << s.policy.rebirth_step << '\n';
  out << "generation " << s.policy.generation << '\n';
  out << "pending " << static_cast<unsigned>(s.policy.pending) << '\n';
  out << "stats " << words(s.stats) << '\n';
  out << "hyper " << words(s.hyper) << '\n';
  out << "iteration " << s.status.iteration << '\n';
  out << "status_age " << s.status.age << '\n';
  out << "metric_bits " << std::bit_cast<std::uint64_t>(s.status.metric) << '\n';
  out << "status_generation " << s.status.generation << '\n';
  out << "state " << static_cast<unsigned>(s.status.state) << '\n';
  out << "version " << s.version << '\n';
  out << "steps_since_publish " << s.steps_since_publish << '\n';
  out << "publish_pending " << (s.publish_pending ? 1 : 0) << '\n';
  out << "paused " << (s.paused ? 1 : 0) << '\n';
  out << "resume_state " << static_cast<unsigned>(s.resume_state) << '\n';
  // Last: four long lines of the random streams' words.
  out << "streams " << s.policy.streams << '\n';
  return out.str();
}

AgentSnapshot decode_agent_state(std::string_view text) {
  std::map<std::string, std::string, std::less<>> f;
  std::size_t i = 0;
  bool first = true;
  while (i < text.size()) {
    const std::size_t j = std::min(text.find('\n', i), text.size());
    const std::string_view line = text.substr(i, j - i);
    i = j + 1;
    if (first) {
      if (line.starts_with("{\"format\":\"paramwin-averaging-state")) {
        bad("written by a population of AveragingAgents, not by Agents: an Agent loads only "
            "Agent checkpoints");
      }
      if (line != kFormat) bad("unknown format '" + std::string(line.substr(0, 40)) + "'");
      first = false;
      continue;
    }
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos) {
      if (line.empty()) continue;
      f.emplace(std::string(line), std::string());  // an empty list (hyper without any)
      continue;
    }
    f.emplace(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  if (first) bad("empty");
  auto get = [&f](const char* key) -> const std::string& {
    const auto it = f.find(key);
    if (it == f.end()) bad(std::string("'") + key + "' missing");
    return it->second;
  };
  AgentSnapshot s;
  s.policy.steps = to_i64("steps", get("steps"));
  s.policy.age = to_i64("age", get("age"));
  s.policy.max_age = to_i64("max_age", get("max_age"));
  s.policy.rebirth_step = to_i64("rebirth_step", get("rebirth_step"));
  s.policy.generation = to_u64("generation", get("generation"));
  const std::uint64_t pending = to_u64("pending", get("pending"));
  if (pending > static_cast<unsigned>(DeathReason::joined)) bad("'pending' out of range");
  s.policy.pending = static_cast<DeathReason>(pending);
  s.policy.streams = get("streams");
  const std::vector<std::uint64_t> stats = to_words("stats", get("stats"));
  if (stats.size() != s.stats.size())
    bad("'stats' holds " + std::to_string(stats.size()) + " values");
  std::copy(stats.begin(), stats.end(), s.stats.begin());
  s.hyper = to_words("hyper", get("hyper"));
  s.status.iteration = to_i64("iteration", get("iteration"));
  s.status.age = to_i64("status_age", get("status_age"));
  s.status.metric = std::bit_cast<double>(to_u64("metric_bits", get("metric_bits")));
  s.status.generation = to_u64("status_generation", get("status_generation"));
  const std::uint64_t state = to_u64("state", get("state"));
  const std::uint64_t resume = to_u64("resume_state", get("resume_state"));
  if (state > static_cast<unsigned>(AgentState::paused) ||
      resume > static_cast<unsigned>(AgentState::paused)) {
    bad("agent state out of range");
  }
  s.status.state = static_cast<AgentState>(state);
  s.resume_state = static_cast<AgentState>(resume);
  s.version = to_u64("version", get("version"));
  s.steps_since_publish = to_i64("steps_since_publish", get("steps_since_publish"));
  s.publish_pending = to_u64("publish_pending", get("publish_pending")) != 0;
  s.paused = to_u64("paused", get("paused")) != 0;
  return s;
}

}  // namespace paramwin::detail
