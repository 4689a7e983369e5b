// The records publish, pull, roster reads and steps return, as read-only Python objects whose
// enum fields read as strings ("shm", "age", ...).
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/options.hpp"
#include "paramwin/roster.hpp"

namespace paramwin::python {

namespace {

// One pybind11 registration per record, a statement per bound name, read as a table.

// What a publish and a pull return.
void bind_pull_records(py::module_& m) {
  py::class_<PublishResult>(m, "PublishResult", "What a publish did.")
      .def_readonly("published", &PublishResult::published)
      .def_readonly("version", &PublishResult::version)
      .def_readonly("seconds", &PublishResult::seconds)
      .def("__bool__", [](const PublishResult& r) { return r.published; })
      .def("__repr__", [](const PublishResult& r) {
        return "PublishResult(published=" + std::string(r.published ? "True" : "False") +
               ", version=" + std::to_string(r.version) + ")";
      });

  py::class_<DonorRead>(m, "DonorRead", "What a pull read from one donor.")
      .def_readonly("rank", &DonorRead::rank)
      .def_readonly("version", &DonorRead::version)
      .def_readonly("stamp", &DonorRead::stamp)
      .def_property_readonly("transport",
                             [](const DonorRead& d) {
                               return std::string(transport_name(d.transport));
                             })
      .def_readonly("bytes", &DonorRead::bytes)
      .def_readonly("attempts", &DonorRead::attempts)
      .def_readonly("pinned", &DonorRead::pinned)
      .def_readonly("skipped", &DonorRead::skipped)
      .def_readonly("weight", &DonorRead::weight)
      .def_readonly("metric", &DonorRead::metric)
      .def_property_readonly(
          "hyper", [](const DonorRead& d) { return hyper_to_dict(d.hyper); },
          "Hyperparameters the donor published with the version read.")
      .def("__repr__", [](const DonorRead& d) {
        return "DonorRead(rank=" + std::to_string(d.rank) +
               ", version=" + std::to_string(d.version) + ", transport='" +
               std::string(transport_name(d.transport)) + "')";
      });

  py::class_<PullResult>(m, "PullResult", "What a pull did.")
      .def_readonly("donors", &PullResult::donors)
      .def_readonly("bytes", &PullResult::bytes)
      .def_readonly("seconds", &PullResult::seconds)
      .def("__repr__", [](const PullResult& r) {
        return "PullResult(donors=" + std::to_string(r.donors.size()) +
               ", bytes=" + std::to_string(r.bytes) + ", seconds=" + std::to_string(r.seconds) +
               ")";
      });
}

// What roster reads return.
void bind_roster_records(py::module_& m) {
  py::class_<AgentStatus>(m, "AgentStatus", "The fields an agent sets about itself.")
      .def_readonly("iteration", &AgentStatus::iteration)
      .def_readonly("age", &AgentStatus::age)
      .def_readonly("metric", &AgentStatus::metric)
      .def_readonly("generation", &AgentStatus::generation)
      .def_property_readonly("state",
                             [](const AgentStatus& s) { return std::string(state_name(s.state)); });

  py::class_<RosterEntry>(m, "RosterEntry", "One agent's roster as read at one instant.")
      .def_readonly("rank", &RosterEntry::rank)
      .def_readonly("version", &RosterEntry::version)
      .def_readonly("fingerprint", &RosterEntry::fingerprint)
      .def_readonly("status_updates", &RosterEntry::status_updates)
      .def_readonly("publish_time", &RosterEntry::publish_time)
      .def_readonly("answered", &RosterEntry::answered)
      .def_readonly("suspect", &RosterEntry::suspect)
      .def_readonly("suspect_reason", &RosterEntry::suspect_reason)
      .def_property_readonly("heartbeat", [](const RosterEntry& e) { return e.liveness.heartbeat; })
      .def_property_readonly("pid", [](const RosterEntry& e) { return e.liveness.pid; })
      .def_property_readonly("incarnation",
                             [](const RosterEntry& e) { return e.liveness.incarnation; })
      .def_property_readonly("hyper", [](const RosterEntry& e) { return hyper_to_dict(e.hyper); })
      .def_property_readonly("iteration", [](const RosterEntry& e) { return e.status.iteration; })
      .def_property_readonly("age", [](const RosterEntry& e) { return e.status.age; })
      .def_property_readonly("metric", [](const RosterEntry& e) { return e.status.metric; })
      .def_property_readonly("generation", [](const RosterEntry& e) { return e.status.generation; })
      .def_property_readonly(
          "previous",
          [](const RosterEntry& e) -> py::object {
            if (!e.previous) return py::none();
            return py::make_tuple(e.previous->iteration, e.previous->metric);
          },
          "(iteration, metric) of the report before the latest iteration, or None")
      .def_property_readonly("state",
                             [](const RosterEntry& e) {
                               return std::string(state_name(e.status.state));
                             })
      .def("__repr__", [](const RosterEntry& e) {
        return "RosterEntry(rank=" + std::to_string(e.rank) +
               ", version=" + std::to_string(e.version) + ", state='" +
               std::string(state_name(e.status.state)) +
               "', metric=" + std::to_string(e.status.metric) + ")";
      });
}

// What a step returns: its phases, its donors, the event (and its event-log line).
void bind_step_records(py::module_& m) {
  py::class_<PhaseSeconds>(m, "PhaseSeconds", "Seconds spent in each phase of one step.")
      .def_readonly("decide", &PhaseSeconds::decide)
      .def_readonly("pull", &PhaseSeconds::pull)
      .def_readonly("mix", &PhaseSeconds::mix)
      .def_readonly("publish", &PhaseSeconds::publish)
      .def_readonly("assemble", &PhaseSeconds::assemble)
      .def_property_readonly("total", &PhaseSeconds::total);

  py::class_<DonorRecord>(m, "DonorRecord", "One donor of a rebirth.")
      .def_readonly("rank", &DonorRecord::rank)
      .def_readonly("version", &DonorRecord::version)
      .def_readonly("metric", &DonorRecord::metric)
      .def_readonly("weight", &DonorRecord::weight)
      .def_readonly("bytes", &DonorRecord::bytes)
      .def_property_readonly("transport",
                             [](const DonorRecord& d) {
                               return std::string(transport_name(d.transport));
                             })
      .def_readonly("skipped", &DonorRecord::skipped)
      .def_readonly("staleness_seconds", &DonorRecord::staleness_seconds)
      .def("__repr__", [](const DonorRecord& d) {
        return "DonorRecord(rank=" + std::to_string(d.rank) +
               ", version=" + std::to_string(d.version) + ", weight=" + std::to_string(d.weight) +
               ")";
      });

  py::class_<StepEvent>(m, "StepEvent", "What one Agent.step did.")
      .def_readonly("rank", &StepEvent::rank)
      .def_readonly("iteration", &StepEvent::iteration)
      .def_readonly("step", &StepEvent::step)
      .def_readonly("metric", &StepEvent::metric)
      .def_readonly("died", &StepEvent::died)
      .def_property_readonly("reason",
                             [](const StepEvent& e) { return std::string(reason_name(e.reason)); })
      .def_readonly("deferred", &StepEvent::deferred)
      .def_readonly("paused", &StepEvent::paused)
      .def_readonly("note", &StepEvent::note)
      .def_readonly("age", &StepEvent::age)
      .def_readonly("max_age", &StepEvent::max_age)
      .def_readonly("next_max_age", &StepEvent::next_max_age)
      .def_readonly("generation", &StepEvent::generation)
      .def_property_readonly("mixing",
                             [](const StepEvent& e) { return std::string(mixing_name(e.mixing)); })
      .def_readonly("donors", &StepEvent::donors)
      .def_readonly("bytes", &StepEvent::bytes)
      .def_readonly("published", &StepEvent::published)
      .def_readonly("publish_skipped", &StepEvent::publish_skipped)
      .def_readonly("publish_attempts", &StepEvent::publish_attempts)
      .def_readonly("version", &StepEvent::version)
      .def_readonly("seconds", &StepEvent::seconds)
      .def_property_readonly(
          "hyper", [](const StepEvent& e) { return hyper_to_dict(e.hyper); },
          "Hyperparameters after the step (after a rebirth's exploit/explore).")
      .def_property_readonly("hyper_before",
                             [](const StepEvent& e) { return hyper_to_dict(e.hyper_before); })
      .def(
          "to_json", [](const StepEvent& e) { return to_json(e); },
          "One JSON object, as the event log writes.")
      .def("__repr__", [](const StepEvent& e) { return "StepEvent(" + to_json(e) + ")"; });
}

// What a checkpoint load restored, and the counters and timers over an agent's steps.
void bind_stats_records(py::module_& m) {
  py::class_<CheckpointLoad>(m, "CheckpointLoad", "What a checkpoint load restored on this rank.")
      .def_readonly("path", &CheckpointLoad::path)
      .def_readonly("agents", &CheckpointLoad::agents)
      .def_readonly("source", &CheckpointLoad::source)
      .def_readonly("reborn", &CheckpointLoad::reborn)
      .def_readonly("steps", &CheckpointLoad::steps)
      .def("__repr__", [](const CheckpointLoad& c) {
        return "CheckpointLoad(path='" + c.path + "', agents=" + std::to_string(c.agents) +
               ", source=" + std::to_string(c.source) +
               ", reborn=" + (c.reborn ? "True" : "False") + ", steps=" + std::to_string(c.steps) +
               ")";
      });

  py::class_<TimerSummary>(m, "TimerSummary", "count/min/median/max/total/mean of a timer.")
      .def_readonly("count", &TimerSummary::count)
      .def_readonly("min", &TimerSummary::min)
      .def_readonly("median", &TimerSummary::median)
      .def_readonly("max", &TimerSummary::max)
      .def_readonly("total", &TimerSummary::total)
      .def_readonly("mean", &TimerSummary::mean)
      .def_readonly("median_exact", &TimerSummary::median_exact);

  py::class_<AgentStats>(m, "AgentStats", "Counters and phase timers over an agent's steps.")
      .def_property_readonly("steps", &AgentStats::steps)
      .def_property_readonly("deaths", [](const AgentStats& s) { return s.deaths(); })
      .def(
          "deaths_by",
          [](const AgentStats& s, const std::string& reason) {
            return s.deaths(parse_trigger(reason));
          },
          py::arg("reason"))
      .def_property_readonly("deferred", &AgentStats::deferred)
      .def_property_readonly("pulls", &AgentStats::pulls)
      .def_property_readonly("bytes_pulled", &AgentStats::bytes_pulled)
      .def_property_readonly("donors_used", &AgentStats::donors_used)
      .def_property_readonly("publishes", &AgentStats::publishes)
      .def_property_readonly("publishes_skipped", &AgentStats::publishes_skipped)
      .def(
          "timer",
          [](const AgentStats& s, const std::string& phase) {
            for (std::size_t i = 0; i < kPhaseCount; ++i) {
              if (phase_name(static_cast<Phase>(i)) == phase) {
                return s.timer(static_cast<Phase>(i));
              }
            }
            throw InvalidArgument("paramwin: unknown phase '" + phase +
                                  "' (decide, pull, mix, publish, assemble)");
          },
          py::arg("phase"))
      .def_property_readonly("rebirth_timer", &AgentStats::rebirth_timer);
}

}  // namespace

void bind_records(py::module_& m) {
  bind_pull_records(m);
  bind_roster_records(m);
  bind_step_records(m);
  bind_stats_records(m);
}

}  // namespace paramwin::python
