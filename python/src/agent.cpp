// paramwin._core.Agent: Agent<HostSpace>, configured from parse_agent_options' key/value form
// plus Python callables. The pure-Python paramwin.Agent wraps it. step(), publish() and the
// roster reads release the GIL; the callbacks take it back while they run.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <map>
#include <sstream>

#include "bindings.hpp"
#include "paramwin/agent.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {
namespace {

using PyAgent = Agent<>;

// A Python callable called from C++ code that runs without the GIL. Holding the callable in
// a shared_ptr whose deleter takes the GIL lets the std::function be copied and destroyed
// anywhere.
std::shared_ptr<py::object> hold(const py::object& fn) {
  return {new py::object(fn), [](py::object* p) {
            const py::gil_scoped_acquire gil;
            delete p;
          }};
}

AgentOptions make_options(const std::map<std::string, std::string, std::less<>>& config,
                          const py::object& on_rebirth, const py::object& reset,
                          const py::object& custom_trigger, const py::object& prepare_params) {
  AgentOptions o = parse_agent_options(config);
  if (!on_rebirth.is_none()) {
    o.on_rebirth = [fn = hold(on_rebirth)](const StepEvent& event, std::span<const LayerRef>) {
      const py::gil_scoped_acquire gil;
      (*fn)(event);
    };
  }
  if (!reset.is_none()) {
    o.reset = [fn = hold(reset)](std::span<const LayerRef>, std::uint64_t seed) {
      const py::gil_scoped_acquire gil;
      (*fn)(seed);
    };
  }
  if (!custom_trigger.is_none()) {
    o.triggers.custom = [fn = hold(custom_trigger)](const TriggerContext& c) {
      const py::gil_scoped_acquire gil;
      return (*fn)(c).cast<bool>();
    };
  }
  if (!prepare_params.is_none()) {
    o.prepare_params = [fn = hold(prepare_params)]() {
      const py::gil_scoped_acquire gil;
      (*fn)();
    };
  }
  return o;
}

PyAgent& open(PyAgent& a) {
  if (!a.window().valid()) {
    throw InvalidArgument("paramwin: the agent is closed");
  }
  return a;
}

}  // namespace

// Over 100 lines: one pybind11 registration, a statement per bound name, read as one table.
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
  m.def(
      "check_agent_options",
      [](const std::map<std::string, std::string, std::less<>>& config, int population) {
        validate(parse_agent_options(config), population);
      },
      py::arg("config"), py::arg("population"),
      "Parses and validates agent options for a population (raises InvalidArgument).");

  py::class_<PyAgent>(m, "Agent", "Agent over host memory (see paramwin.Agent).")
      .def(py::init([](const py::object& comm, Layout layout,
                       const std::map<std::string, std::string, std::less<>>& config,
                       const py::object& on_rebirth, const py::object& reset,
                       const py::object& custom_trigger, const py::object& prepare_params,
                       const std::string& transport, bool verify, std::string name) {
             const MPI_Comm c = comm_from(comm);
             AgentOptions o =
                 make_options(config, on_rebirth, reset, custom_trigger, prepare_params);
             WindowOptions w;
             w.transport = parse_transport(transport);
             w.verify = verify;
             w.name = std::move(name);
             const py::gil_scoped_release release;
             return PyAgent(c, std::move(layout), std::move(o), w);
           }),
           py::arg("comm"), py::arg("layout"), py::arg("config"), py::arg("on_rebirth"),
           py::arg("reset"), py::arg("custom_trigger"), py::arg("prepare_params"),
           py::arg("transport"), py::arg("verify"), py::arg("name"))
      .def(
          "step",
          [](PyAgent& a, std::int64_t iteration, double metric, const py::object& layers) {
            PyAgent& o = open(a);
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.step(iteration, metric, list.refs());
          },
          py::arg("iteration"), py::arg("metric"), py::arg("layers"))
      .def(
          "publish",
          [](PyAgent& a, const py::object& layers) {
            PyAgent& o = open(a);
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.publish(list.const_refs());
          },
          py::arg("layers"))
      .def("leave", [](PyAgent& a) { open(a).leave(); })
      .def("progress",
           [](PyAgent& a) {
             PyAgent& o = open(a);
             const py::gil_scoped_release release;
             o.progress();
           })
      .def("pause", [](PyAgent& a) { open(a).pause(); })
      .def("resume", [](PyAgent& a) { open(a).resume(); })
      .def_property_readonly("is_paused", [](PyAgent& a) { return a.is_paused(); })
      .def("close",
           [](PyAgent& a) {
             if (a.window().valid()) {
               const py::gil_scoped_release release;
               a.close();
             }
           })
      .def_property_readonly("valid", [](PyAgent& a) { return a.window().valid(); })
      .def(
          "roster_all",
          [](PyAgent& a, double timeout_seconds) {
            PyAgent& o = open(a);
            const py::gil_scoped_release release;
            return o.window().roster_all(timeout_seconds);
          },
          py::arg("timeout_seconds") = 0.0)
      .def(
          "roster",
          [](PyAgent& a, int rank, double timeout_seconds) {
            PyAgent& o = open(a);
            const py::gil_scoped_release release;
            return o.window().roster(rank, timeout_seconds);
          },
          py::arg("rank"), py::arg("timeout_seconds") = 0.0)
      .def_property_readonly("hyperparameters",
                             [](PyAgent& a) { return hyper_to_dict(a.hyperparameters()); })
      .def(
          "set_hyperparameters",
          [](PyAgent& a, const py::handle& values) {
            open(a).set_hyperparameters(hyper_from_dict(a.hyperparameters(), values));
          },
          py::arg("values"))
      .def_property_readonly("rank", [](PyAgent& a) { return open(a).rank(); })
      .def_property_readonly("size", [](PyAgent& a) { return open(a).size(); })
      .def_property_readonly("layout", [](PyAgent& a) { return open(a).layout(); })
      .def_property_readonly("version", [](PyAgent& a) { return open(a).window().version(); })
      .def_property_readonly("steps", &PyAgent::steps)
      .def_property_readonly("age", &PyAgent::age)
      .def_property_readonly("max_age", &PyAgent::max_age)
      .def_property_readonly("generation", &PyAgent::generation)
      .def_property_readonly("stats", &PyAgent::stats, py::return_value_policy::reference_internal)
      .def("summary", [](const PyAgent& a) {
        std::ostringstream out;
        a.write_summary(out);
        return out.str();
      });
}

}  // namespace paramwin::python
