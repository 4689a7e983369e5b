// StepEvent as JSON, AgentStats counters and timers, and the JSON-lines EventLog.
#include <bit>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
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

// Insertion-ordered: the fields appear in the order the schema below names them.
using Json = nlohmann::ordered_json;

// --- the schema: every field of an event line, named once --------------------------------
// visit_donor and visit_event call v(key, member) for each field, in the line's order, and
// v.optional(key, member, present) for a field written only when `present` (on writing;
// on reading a field is optional when absent). The Writer turns a const event into JSON,
// the Reader fills an event from JSON: the same list serves both directions.

template <class Donor, class V>
void visit_donor(Donor& d, V& v) {
  v("rank", d.rank);
  v("version", d.version);
  v("metric", d.metric);
  v("weight", d.weight);
  v("bytes", d.bytes);
  v("transport", d.transport);
  v("skipped", d.skipped);
  v("staleness_s", d.staleness_seconds);
}

template <class Event, class V>
void visit_event(Event& e, V& v) {
  v("rank", e.rank);
  v("iteration", e.iteration);
  v("step", e.step);
  v("metric", e.metric);
  v("died", e.died);
  v("deferred", e.deferred);
  v("paused", e.paused);
  v("reason", e.reason);
  v("age", e.age);
  v("max_age", e.max_age);
  v("next_max_age", e.next_max_age);
  v("generation", e.generation);
  v("mixing", e.mixing);
  v("donors", e.donors);
  v("bytes", e.bytes);
  v("published", e.published);
  v("publish_skipped", e.publish_skipped);
  v("publish_attempts", e.publish_attempts);
  v("version", e.version);
  v("seconds", e.seconds);
  v("hyper", e.hyper);
  v.optional("hyper_before", e.hyper_before, e.died);
  v.optional("note", e.note, !e.note.empty());
}

// --- writing --------------------------------------------------------------------------------

Json encode(bool b) { return b; }
Json encode(const std::string& s) { return s; }
Json encode(double x) {
  return std::isfinite(x) ? Json(x) : Json(nullptr);  // JSON has no NaN or infinity
}
template <class Int>
requires std::is_integral_v<Int> Json encode(Int i) { return i; }
template <NamedEnum E>
Json encode(E value) {
  return std::string(enum_name(value));
}
Json encode(const PhaseSeconds& s) {
  Json out = Json::object();
  for (std::size_t p = 0; p < kPhaseCount; ++p) {
    const auto phase = static_cast<Phase>(p);
    out[std::string(phase_name(phase))] = encode(s[phase]);
  }
  return out;
}
// {"name": value, ...}: int64 as integers, float64 as numbers (non-finite: null).
Json encode(const Hyperparameters& h) {
  Json out = Json::object();
  for (std::size_t i = 0; i < h.size(); ++i) {
    const HyperSpec& spec = h.spec(i);
    out[spec.name] = spec.type == HyperType::int64
                         ? encode(std::bit_cast<std::int64_t>(h.words()[i]))
                         : encode(h.as_double(i));
  }
  return out;
}
Json encode(const std::vector<DonorRecord>& donors);

struct Writer {
  Json& out;
  template <class T>
  void operator()(const char* key, const T& member) {
    out[key] = encode(member);
  }
  template <class T>
  void optional(const char* key, const T& member, bool present) {
    if (present) (*this)(key, member);
  }
};

Json encode(const std::vector<DonorRecord>& donors) {
  Json out = Json::array();
  for (const DonorRecord& d : donors) {
    Json one = Json::object();
    Writer w{one};
    visit_donor(d, w);
    out.push_back(std::move(one));
  }
  return out;
}

// --- reading --------------------------------------------------------------------------------

[[noreturn]] void malformed(std::string_view key, std::string_view what) {
  throw InvalidArgument("paramwin: event field \"" + std::string(key) + "\" is not " +
                        std::string(what));
}

void decode(const Json& j, std::string_view key, bool& b) {
  if (!j.is_boolean()) malformed(key, "a boolean");
  b = j.get<bool>();
}
void decode(const Json& j, std::string_view key, std::string& s) {
  if (!j.is_string()) malformed(key, "a string");
  s = j.get<std::string>();
}
void decode(const Json& j, std::string_view key, double& x) {
  if (j.is_null()) {
    x = std::numeric_limits<double>::quiet_NaN();  // written for NaN and infinities
  } else if (j.is_number()) {
    x = j.get<double>();
  } else {
    malformed(key, "a number or null");
  }
}
template <class Int>
requires std::is_integral_v<Int>
void decode(const Json& j, std::string_view key, Int& i) {
  if (!j.is_number_integer()) malformed(key, "an integer");
  i = j.get<Int>();
}
template <NamedEnum E>
void decode(const Json& j, std::string_view key, E& value) {
  if (!j.is_string()) malformed(key, "a name");
  value = parse_enum<E>(j.get<std::string>());
}
void decode(const Json& j, std::string_view key, PhaseSeconds& s) {
  if (!j.is_object()) malformed(key, "an object");
  double* const fields[] = {&s.decide, &s.pull, &s.mix, &s.publish, &s.assemble};
  for (std::size_t p = 0; p < kPhaseCount; ++p) {
    const std::string name(phase_name(static_cast<Phase>(p)));
    if (j.contains(name)) decode(j.at(name), name, *fields[p]);
  }
}
// The names as the line orders them; integers as int64, other numbers (and null) float64.
void decode(const Json& j, std::string_view key, Hyperparameters& h) {
  if (!j.is_object()) malformed(key, "an object");
  auto specs = std::make_shared<std::vector<HyperSpec>>();
  for (const auto& [name, value] : j.items()) {
    specs->push_back({name, value.is_number_integer() ? HyperType::int64 : HyperType::float64});
  }
  Hyperparameters out(std::move(specs));
  for (const auto& [name, value] : j.items()) {
    if (value.is_number_integer()) {
      out.set_int(name, value.get<std::int64_t>());
    } else {
      double x = 0.0;
      decode(value, name, x);
      out.set(name, x);
    }
  }
  h = std::move(out);
}
void decode(const Json& j, std::string_view key, std::vector<DonorRecord>& donors);

struct Reader {
  const Json& in;
  template <class T>
  void operator()(const char* key, T& member) {
    const auto it = in.find(key);
    if (it == in.end()) malformed(key, "present");
    decode(*it, key, member);
  }
  template <class T>
  void optional(const char* key, T& member, bool /*present: the line says*/) {
    if (in.contains(key)) (*this)(key, member);
  }
};

void decode(const Json& j, std::string_view key, std::vector<DonorRecord>& donors) {
  if (!j.is_array()) malformed(key, "an array");
  donors.clear();
  for (const Json& one : j) {
    if (!one.is_object()) malformed(key, "an array of objects");
    Reader r{one};
    visit_donor(donors.emplace_back(), r);
  }
}

}  // namespace

std::string to_json(const StepEvent& e) {
  Json out = Json::object();
  Writer w{out};
  visit_event(e, w);
  // Invalid UTF-8 in a note or a name is replaced (U+FFFD) rather than thrown.
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StepEvent step_event_from_json(std::string_view line) {
  const Json in = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) {
    throw InvalidArgument("paramwin: not an event line (a JSON object): '" + std::string(line) +
                          "'");
  }
  StepEvent e;
  Reader r{in};
  visit_event(e, r);
  if (!in.contains("hyper_before")) e.hyper_before = e.hyper;  // written only for deaths
  return e;
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
