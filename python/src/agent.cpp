// paramwin._core.Agent: Agent<HostSpace>, configured from parse_agent_options' key/value form
// plus Python callables (callbacks.cpp), over a host or (memory="cuda") a device window. The
// pure-Python paramwin.Agent wraps it. The calls shared with GroupAgent are bound by bind_member
// (member.hpp).
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <map>

#include "bindings.hpp"
#include "member.hpp"
#include "paramwin/agent.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {
namespace {

using PyAgent = Agent<>;

}  // namespace

void bind_agent(py::module_& m) {
  py::class_<TriggerContext>(m, "TriggerContext", "What a custom trigger sees.")
      .def_readonly("rank", &TriggerContext::rank)
      .def_readonly("population", &TriggerContext::population)
      .def_readonly("iteration", &TriggerContext::iteration)
      .def_readonly("step", &TriggerContext::step)
      .def_readonly("age", &TriggerContext::age)
      .def_readonly("max_age", &TriggerContext::max_age)
      .def_readonly("metric", &TriggerContext::metric)
      .def_readonly("generation", &TriggerContext::generation);
  py::class_<SelectionContext>(m, "SelectionContext",
                               "What a custom selection function sees (valid during the call).")
      .def_readonly("rank", &SelectionContext::rank)
      .def_readonly("population", &SelectionContext::population)
      .def_property_readonly("direction",
                             [](const SelectionContext& c) { return enum_name(c.direction); })
      .def_readonly("want", &SelectionContext::want)
      .def_property_readonly("candidates",
                             [](const SelectionContext& c) {
                               py::list out;  // (rank, metric), best first
                               for (const SelectionCandidate& x : c.candidates) {
                                 out.append(py::make_tuple(x.rank, x.metric));
                               }
                               return out;
                             })
      .def_readonly("seed", &SelectionContext::seed);

  m.def(
      "option_keys",
      [] {
        py::list out;
        for (const OptionKey& k : agent_option_keys()) {
          out.append(py::make_tuple(std::string(k.key), std::string(k.aliases),
                                    std::string(k.value), std::string(k.doc)));
        }
        return out;
      },
      "The agent option keys (key, aliases, value, doc), from the library's key table: what "
      "Agent and TorchAgent accept as keywords.");
  m.def("hook_names", &hook_names,
        "The callables an agent takes (on_rebirth, reset, custom_trigger, custom_explore, "
        "prepare_params).");
  m.def(
      "check_agent_options",
      [](const std::map<std::string, std::string, std::less<>>& config, int population) {
        validate(parse_agent_options(config), population);
      },
      py::arg("config"), py::arg("population"),
      "Parses and validates agent options for a population (raises InvalidArgument).");
  py::class_<PyAgent> agent(m, "Agent", "Agent over a host or device window (see paramwin.Agent).");
  agent.def(py::init([](const py::object& comm, Layout layout,
                        const std::map<std::string, std::string, std::less<>>& config,
                        const py::dict& hooks, const std::string& transport, bool verify,
                        std::string name, const std::string& memory, int cuda_device,
                        std::optional<double> suspect_seconds,
                        std::optional<double> suspect_beats) {
              const MPI_Comm c = comm_from(comm);
              AgentOptions o = make_agent_options(config, hooks);
              WindowOptions w;
              w.transport = parse_transport(transport);
              w.verify = verify;
              w.name = std::move(name);
              set_memory(w, memory, cuda_device);
              set_liveness(w, suspect_seconds, suspect_beats);
              const py::gil_scoped_release release;
              return PyAgent(c, std::move(layout), std::move(o), w);
            }),
            py::arg("comm"), py::arg("layout"), py::arg("config"), py::arg("hooks"),
            py::arg("transport"), py::arg("verify"), py::arg("name"), py::arg("memory") = "host",
            py::arg("cuda_device") = kCurrentDevice, py::arg("suspect_seconds") = py::none(),
            py::arg("suspect_beats") = py::none());
  bind_member(agent);
  agent
      .def(
          "roster_all",
          [](PyAgent& a, double timeout_seconds) {
            PyAgent& o = open_member(a);
            const py::gil_scoped_release release;
            return o.window().roster_all(timeout_seconds);
          },
          py::arg("timeout_seconds") = 0.0)
      .def(
          "roster",
          [](PyAgent& a, int rank, double timeout_seconds) {
            PyAgent& o = open_member(a);
            const py::gil_scoped_release release;
            return o.window().roster(rank, timeout_seconds);
          },
          py::arg("rank"), py::arg("timeout_seconds") = 0.0)
      .def_property_readonly("rank", [](PyAgent& a) { return open_member(a).rank(); })
      .def_property_readonly("size", [](PyAgent& a) { return open_member(a).size(); })
      .def_property_readonly("version",
                             [](PyAgent& a) { return open_member(a).window().version(); });
}

}  // namespace paramwin::python
