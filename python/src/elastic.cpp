// paramwin._core.ElasticAgent: ElasticAgent<HostSpace> (docs/elastic.md, "Epochs and
// spares"), configured as _core.Agent is (parse_agent_options' key/value form plus Python
// callables), with the Membership's options. The pure-Python paramwin.ElasticAgent wraps it.
// paramwin._core.ElasticAveragingAgent: ElasticAveragingAgent ("Averaging populations"),
// configured as _core.AveragingAgent is (the options dict). Every call that may wait for
// other processes releases the GIL.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "paramwin/elastic_agent.hpp"
#include "paramwin/elastic_averaging.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {
namespace {

using PyElastic = ElasticAgent<>;
using PyElasticAveraging = ElasticAveragingAgent;

Replacement parse_replacement(const std::string& text) {
  if (text == "new_window") return Replacement::new_window;
  if (text == "standing_window") return Replacement::standing_window;
  throw InvalidArgument("paramwin: replacement must be 'new_window' or 'standing_window', not '" +
                        text + "'");
}

/// The ElasticAgent's membership and agent state, as read-only properties (and the
/// hyperparameters' setter).
void bind_elastic_state(py::class_<PyElastic>& cls) {
  cls.def_property_readonly("member", [](const PyElastic& a) { return a.member(); })
      .def_property_readonly("slot", [](const PyElastic& a) { return a.membership().slot(); })
      .def_property_readonly("slots", [](const PyElastic& a) { return a.membership().slots(); })
      .def_property_readonly("epoch", [](const PyElastic& a) { return a.membership().epoch(); })
      .def_property_readonly("members", [](const PyElastic& a) { return a.membership().members(); })
      .def_property_readonly("spares", [](const PyElastic& a) { return a.membership().spares(); })
      .def_property_readonly("world_rank",
                             [](const PyElastic& a) { return a.membership().world_rank(); })
      .def_property_readonly("refills",
                             [](const PyElastic& a) {
                               const RefillStats& r = a.membership().refills();
                               py::dict d;
                               d["refills"] = r.refills;
                               d["spawned"] = r.spawned;
                               d["failed"] = r.failed;
                               d["last_seconds"] = r.last_seconds;
                               d["total_seconds"] = r.total_seconds;
                               d["spawned_here"] = r.spawned_here;
                               d["joins"] = r.joins;
                               d["joined"] = r.joined;
                               d["joined_here"] = r.joined_here;
                               return d;
                             })
      .def_property_readonly("resume_iteration",
                             [](const PyElastic& a) { return a.resume_iteration(); })
      .def_property_readonly("joined",
                             [](PyElastic& a) {
                               return a.member() &&
                                      a.agent().policy().pending() == DeathReason::joined;
                             })
      .def_property_readonly("version", [](PyElastic& a) { return a.agent().window().version(); })
      .def_property_readonly("hyperparameters",
                             [](PyElastic& a) {
                               return hyper_to_dict(a.agent().hyperparameters());
                             })
      .def(
          "set_hyperparameters",
          [](PyElastic& a, const py::handle& values) {
            Agent<>& agent = a.agent();
            agent.set_hyperparameters(hyper_from_dict(agent.hyperparameters(), values));
          },
          py::arg("values"))
      .def_property_readonly("generation", [](PyElastic& a) { return a.agent().generation(); });
}

MembershipOptions membership_options(int members, const std::string& replacement,
                                     double check_seconds, double dead_after_seconds,
                                     double agree_seconds) {
  MembershipOptions mo;
  mo.members = members;
  mo.replacement = parse_replacement(replacement);
  mo.check_seconds = check_seconds;
  mo.dead_after_seconds = dead_after_seconds;
  mo.agree_seconds = agree_seconds;
  return mo;
}

/// finish(layers=None): finish() without @p layers; with them (the last step's, bound to
/// @p layout) finish(refs), which also fills a slot that dies meanwhile under new_window.
template <class E>
void finish_with(E& a, const py::object& layers, const Layout& layout) {
  if (layers.is_none()) {
    const py::gil_scoped_release release;
    a.finish();
    return;
  }
  const LayerList list(layers, layout);
  const py::gil_scoped_release release;
  a.finish(list.refs());
}

/// Every last-epoch member's @p value in slot order (collective over them, after finish()).
template <class E>
std::vector<double> members_gather(E& a, double value) {
  std::vector<double> out;
  const py::gil_scoped_release release;
  MPI_Comm c = a.membership().create_members_comm();
  int size = 0;
  MPI_Comm_size(c, &size);
  out.resize(static_cast<std::size_t>(size));
  MPI_Allgather(&value, 1, MPI_DOUBLE, out.data(), 1, MPI_DOUBLE, c);
  return out;
}

void bind_elastic_averaging(py::module_& m) {
  py::class_<PyElasticAveraging>
      cls(m, "ElasticAveragingAgent",
          "ElasticAveragingAgent over a host window (see paramwin.ElasticAveragingAgent).");
  cls.def(py::init([](const py::object& comm, Layout layout, const py::dict& options, int members,
                      const std::string& replacement, double check_seconds,
                      double dead_after_seconds, double agree_seconds) {
            const MPI_Comm c = comm_from(comm);
            AveragingOptions o = averaging_options(options);
            MembershipOptions mo = membership_options(members, replacement, check_seconds,
                                                      dead_after_seconds, agree_seconds);
            const py::gil_scoped_release release;
            return std::make_unique<PyElasticAveraging>(c, std::move(layout), std::move(o), mo);
          }),
          py::arg("comm"), py::arg("layout"), py::arg("options"), py::arg("members"),
          py::arg("replacement"), py::arg("check_seconds"), py::arg("dead_after_seconds"),
          py::arg("agree_seconds"))
      .def("wait_for_slot",
           [](PyElasticAveraging& a) {
             const py::gil_scoped_release release;
             return a.wait_for_slot();
           })
      .def(
          "step",
          [](PyElasticAveraging& a, const py::object& layers) {
            const LayerList list(layers, a.agent().layout());
            const py::gil_scoped_release release;
            return a.step(list.refs());
          },
          py::arg("layers"))
      .def("resign", [](PyElasticAveraging& a) { a.resign(); })
      .def(
          "finish",
          [](PyElasticAveraging& a, const py::object& layers) {
            finish_with(a, layers, a.agent().layout());  // not a member: "holds no slot"
          },
          py::arg("layers") = py::none())
      .def("members_gather", &members_gather<PyElasticAveraging>, py::arg("value"))
      .def_property_readonly("member", [](const PyElasticAveraging& a) { return a.member(); })
      .def_property_readonly("slot",
                             [](const PyElasticAveraging& a) { return a.membership().slot(); })
      .def_property_readonly("slots",
                             [](const PyElasticAveraging& a) { return a.membership().slots(); })
      .def_property_readonly("epoch",
                             [](const PyElasticAveraging& a) { return a.membership().epoch(); })
      .def_property_readonly("members",
                             [](const PyElasticAveraging& a) { return a.membership().members(); })
      .def_property_readonly("world_rank",
                             [](const PyElasticAveraging& a) {
                               return a.membership().world_rank();
                             })
      .def_property_readonly("resume_iteration",
                             [](const PyElasticAveraging& a) { return a.resume_iteration(); })
      .def_property_readonly("joining",
                             [](PyElasticAveraging& a) {
                               return a.member() && a.agent().joining();
                             })
      .def_property_readonly("version",
                             [](PyElasticAveraging& a) { return a.agent().window().version(); })
      .def_property_readonly("steps", [](PyElasticAveraging& a) { return a.agent().steps(); });
}

}  // namespace

void bind_elastic(py::module_& m) {
  py::class_<PyElastic> cls(m, "ElasticAgent",
                            "ElasticAgent over a host window (see paramwin.ElasticAgent).");
  cls.def(py::init([](const py::object& comm, Layout layout,
                      const std::map<std::string, std::string, std::less<>>& config,
                      const py::dict& hooks, const std::string& transport, std::string name,
                      int members, const std::string& replacement, double check_seconds,
                      double dead_after_seconds, double agree_seconds,
                      std::optional<double> suspect_seconds, std::optional<double> suspect_beats,
                      int spawn_pool, std::optional<std::string> spawn_command,
                      std::optional<std::vector<std::string>> spawn_args,
                      const std::string& join_service, bool joining, int spawn_low,
                      bool spawn_ahead) {
            const MPI_Comm c = comm_from(comm);
            AgentOptions o = make_agent_options(config, hooks);
            WindowOptions w;
            w.transport = parse_transport(transport);
            w.name = std::move(name);
            set_liveness(w, suspect_seconds, suspect_beats);
            MembershipOptions mo = membership_options(members, replacement, check_seconds,
                                                      dead_after_seconds, agree_seconds);
            mo.spawn.pool = spawn_pool;
            mo.spawn.low = spawn_low;
            mo.spawn.ahead = spawn_ahead;
            mo.spawn.command = spawn_command.value_or(std::string());
            mo.spawn.args = std::move(spawn_args);
            mo.join.service = join_service;
            mo.join.joining = joining;
            const py::gil_scoped_release release;
            return std::make_unique<PyElastic>(c, std::move(layout), std::move(o), w, mo);
          }),
          py::arg("comm"), py::arg("layout"), py::arg("config"), py::arg("hooks"),
          py::arg("transport"), py::arg("name"), py::arg("members"), py::arg("replacement"),
          py::arg("check_seconds"), py::arg("dead_after_seconds"), py::arg("agree_seconds"),
          py::arg("suspect_seconds") = py::none(), py::arg("suspect_beats") = py::none(),
          py::arg("spawn_pool") = 0, py::arg("spawn_command") = py::none(),
          py::arg("spawn_args") = py::none(), py::arg("join_service") = std::string(),
          py::arg("joining") = false, py::arg("spawn_low") = 0, py::arg("spawn_ahead") = false)
      .def("wait_for_slot",
           [](PyElastic& a) {
             const py::gil_scoped_release release;
             return a.wait_for_slot();
           })
      .def(
          "step",
          [](PyElastic& a, std::int64_t iteration, double metric, const py::object& layers) {
            const LayerList list(layers, a.agent().window().layout());
            const py::gil_scoped_release release;
            return a.step(iteration, metric, list.refs());
          },
          py::arg("iteration"), py::arg("metric"), py::arg("layers"))
      // Lambdas, not member pointers: these members are ElasticSlots' (the base), which
      // pybind11 would take as the self type.
      .def("resign", [](PyElastic& a) { a.resign(); })
      .def(
          "finish",
          [](PyElastic& a, const py::object& layers) {
            finish_with(a, layers, a.agent().window().layout());  // not a member: "holds no slot"
          },
          py::arg("layers") = py::none())
      .def("members_gather", &members_gather<PyElastic>, py::arg("value"));
  bind_elastic_state(cls);
  bind_elastic_averaging(m);
}

}  // namespace paramwin::python
