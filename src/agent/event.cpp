// StepEvent as JSON, AgentStats counters and timers, and the JSON-lines EventLog.
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "paramwin/error.hpp"
#include "paramwin/event.hpp"

namespace paramwin {

double PhaseSeconds::operator[](Phase phase) const noexcept {
  switch (phase) {
    case Phase::decide: return decide;
    case Phase::pull: return pull;
    case Phase::mix: return mix;
    case Phase::publish: return publish;
    case Phase::assemble: return assemble;
  }
  return 0.0;
}

namespace {

void put_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  char buf[32];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  out.append(buf, ec == std::errc() ? ptr : buf);
}

template <class Int>
void put_int(std::string& out, Int v) {
  out += std::to_string(v);
}

void put_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void key(std::string& out, std::string_view k) {
  if (out.back() != '{') out += ',';
  put_string(out, k);
  out += ':';
}

// One call per field (named per type: a bool overload would also take string literals).
template <class Int>
void int_field(std::string& out, std::string_view k, Int v) {
  key(out, k);
  put_int(out, v);
}
void number_field(std::string& out, std::string_view k, double v) {
  key(out, k);
  put_number(out, v);
}
void bool_field(std::string& out, std::string_view k, bool v) {
  key(out, k);
  out += v ? "true" : "false";
}
void string_field(std::string& out, std::string_view k, std::string_view v) {
  key(out, k);
  put_string(out, v);
}

// {"name": value, ...}: int64 as integers, float64 as numbers (non-finite: null).
void hyper_field(std::string& out, std::string_view k, const Hyperparameters& h) {
  key(out, k);
  out += '{';
  for (std::size_t i = 0; i < h.size(); ++i) {
    const HyperSpec& spec = h.spec(i);
    if (spec.type == HyperType::int64) {
      int_field(out, spec.name, std::bit_cast<std::int64_t>(h.words()[i]));
    } else {
      number_field(out, spec.name, h.as_double(i));
    }
  }
  out += '}';
}

}  // namespace

std::string to_json(const StepEvent& e) {
  std::string out = "{";
  int_field(out, "rank", e.rank);
  int_field(out, "iteration", e.iteration);
  int_field(out, "step", e.step);
  number_field(out, "metric", e.metric);
  bool_field(out, "died", e.died);
  bool_field(out, "deferred", e.deferred);
  bool_field(out, "paused", e.paused);
  string_field(out, "reason", reason_name(e.reason));
  int_field(out, "age", e.age);
  int_field(out, "max_age", e.max_age);
  int_field(out, "next_max_age", e.next_max_age);
  int_field(out, "generation", e.generation);
  string_field(out, "mixing", mixing_name(e.mixing));
  key(out, "donors");
  out += '[';
  for (std::size_t i = 0; i < e.donors.size(); ++i) {
    const DonorRecord& d = e.donors[i];
    out += i == 0 ? "{" : ",{";
    int_field(out, "rank", d.rank);
    int_field(out, "version", d.version);
    number_field(out, "metric", d.metric);
    number_field(out, "weight", d.weight);
    int_field(out, "bytes", d.bytes);
    string_field(out, "transport", transport_name(d.transport));
    bool_field(out, "skipped", d.skipped);
    number_field(out, "staleness_s", d.staleness_seconds);
    out += '}';
  }
  out += ']';
  int_field(out, "bytes", e.bytes);
  bool_field(out, "published", e.published);
  bool_field(out, "publish_skipped", e.publish_skipped);
  int_field(out, "publish_attempts", e.publish_attempts);
  int_field(out, "version", e.version);
  key(out, "seconds");
  out += '{';
  for (std::size_t p = 0; p < kPhaseCount; ++p) {
    const auto phase = static_cast<Phase>(p);
    number_field(out, phase_name(phase), e.seconds[phase]);
  }
  out += '}';
  hyper_field(out, "hyper", e.hyper);
  if (e.died) hyper_field(out, "hyper_before", e.hyper_before);
  if (!e.note.empty()) {
    string_field(out, "note", e.note);
  }
  out += '}';
  return out;
}

std::array<std::uint64_t, AgentStats::kCounterCount> AgentStats::counters() const noexcept {
  std::array<std::uint64_t, kCounterCount> c{};
  c[0] = static_cast<std::uint64_t>(steps_);
  for (std::size_t i = 0; i < deaths_.size(); ++i)
    c[1 + i] = static_cast<std::uint64_t>(deaths_[i]);
  c[6] = static_cast<std::uint64_t>(deferred_);
  c[7] = static_cast<std::uint64_t>(pulls_);
  c[8] = bytes_pulled_;
  c[9] = static_cast<std::uint64_t>(donors_used_);
  c[10] = static_cast<std::uint64_t>(publishes_);
  c[11] = static_cast<std::uint64_t>(publishes_skipped_);
  return c;
}

void AgentStats::restore_counters(const std::array<std::uint64_t, kCounterCount>& c) noexcept {
  *this = AgentStats{};
  steps_ = static_cast<std::int64_t>(c[0]);
  for (std::size_t i = 0; i < deaths_.size(); ++i) deaths_[i] = static_cast<std::int64_t>(c[1 + i]);
  deferred_ = static_cast<std::int64_t>(c[6]);
  pulls_ = static_cast<std::int64_t>(c[7]);
  bytes_pulled_ = static_cast<std::size_t>(c[8]);
  donors_used_ = static_cast<std::int64_t>(c[9]);
  publishes_ = static_cast<std::int64_t>(c[10]);
  publishes_skipped_ = static_cast<std::int64_t>(c[11]);
}

void AgentStats::record(const StepEvent& e) {
  ++steps_;
  if (e.died) {
    ++deaths_[static_cast<std::size_t>(e.reason)];
    if (!e.donors.empty()) {
      ++pulls_;
    }
    for (const DonorRecord& d : e.donors) {
      donors_used_ += d.skipped ? 0 : 1;
    }
  }
  if (e.deferred) ++deferred_;
  bytes_pulled_ += e.bytes;
  if (e.published) ++publishes_;
  if (e.publish_skipped) ++publishes_skipped_;
  timers_[static_cast<std::size_t>(Phase::decide)].add(e.seconds.decide);
  if (e.died && !e.donors.empty()) {
    timers_[static_cast<std::size_t>(Phase::pull)].add(e.seconds.pull);
  }
  if (e.died) {
    timers_[static_cast<std::size_t>(Phase::mix)].add(e.seconds.mix);
    rebirths_.add(e.seconds.total());
  }
  if (e.seconds.assemble > 0.0) {
    timers_[static_cast<std::size_t>(Phase::assemble)].add(e.seconds.assemble);
  }
  if (e.published || e.publish_skipped) {
    timers_[static_cast<std::size_t>(Phase::publish)].add(e.seconds.publish);
  }
}

std::int64_t AgentStats::deaths() const noexcept {
  std::int64_t n = 0;
  for (std::size_t r = 1; r < deaths_.size(); ++r) n += deaths_[r];
  return n;
}

std::int64_t AgentStats::deaths(DeathReason reason) const noexcept {
  const auto i = static_cast<std::size_t>(reason);
  return i < deaths_.size() ? deaths_[i] : 0;
}

TimerSummary AgentStats::timer(Phase phase) const {
  const auto i = static_cast<std::size_t>(phase);
  return i < timers_.size() ? timers_[i].summary() : TimerSummary{};
}

TimerSummary AgentStats::rebirth_timer() const { return rebirths_.summary(); }

void AgentStats::write_summary(std::ostream& out) const {
  std::ostringstream o;
  o << "steps " << steps_ << ", deaths " << deaths() << " (";
  for (std::size_t r = 1; r < deaths_.size(); ++r) {
    o << (r == 1 ? "" : ", ") << reason_name(static_cast<DeathReason>(r)) << ' ' << deaths_[r];
  }
  o << "), deferred " << deferred_ << ", pulls " << pulls_ << ", donors used " << donors_used_
    << ", bytes pulled " << bytes_pulled_ << ", publishes " << publishes_ << " (skipped "
    << publishes_skipped_ << ")\n";
  o << std::fixed << std::setprecision(1);
  for (std::size_t p = 0; p < kPhaseCount; ++p) {
    const TimerSummary t = timer(static_cast<Phase>(p));
    o << "  " << std::left << std::setw(8) << phase_name(static_cast<Phase>(p)) << std::right
      << " n=" << std::setw(6) << t.count << "  min " << std::setw(10) << t.min * 1e6
      << " us  median " << std::setw(10) << t.median * 1e6 << " us  max " << std::setw(10)
      << t.max * 1e6 << " us  total " << std::setw(10) << t.total * 1e3 << " ms\n";
  }
  out << o.str();
}

EventLog::EventLog() noexcept = default;

EventLog::EventLog(std::ostream& out, bool include_deferred)
    : out_(&out), include_deferred_(include_deferred) {}

EventLog::EventLog(const std::string& path, bool include_deferred)
    : include_deferred_(include_deferred) {
  auto file = std::make_unique<std::ofstream>(path, std::ios::out | std::ios::trunc);
  if (!*file) {
    throw InvalidArgument("paramwin: cannot open event log '" + path + "' for writing");
  }
  out_ = file.get();
  owned_ = std::move(file);
}

EventLog::EventLog(EventLog&& other) noexcept
    : owned_(std::move(other.owned_)),
      out_(other.out_),
      include_deferred_(other.include_deferred_) {
  other.out_ = nullptr;
}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  if (this != &other) {
    owned_ = std::move(other.owned_);
    out_ = other.out_;
    include_deferred_ = other.include_deferred_;
    other.out_ = nullptr;
  }
  return *this;
}

EventLog::~EventLog() = default;

void EventLog::write(const StepEvent& event) {
  if (out_ == nullptr || !(event.died || (include_deferred_ && event.deferred))) {
    return;
  }
  *out_ << to_json(event) << '\n';
  out_->flush();
}

}  // namespace paramwin
