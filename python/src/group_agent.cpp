// paramwin._core.AgentGroups and paramwin._core.GroupAgent: agents made of several ranks
// (groups.hpp, group_agent.hpp). The pure-Python paramwin.AgentGroups and paramwin.GroupAgent
// wrap them. The calls GroupAgent shares with Agent are bound by bind_member (member.hpp).
#include <pybind11/stl.h>

#include <map>
#include <memory>

#include "bindings.hpp"
#include "member.hpp"
#include "paramwin/error.hpp"
#include "paramwin/group_agent.hpp"
#include "paramwin/groups.hpp"

namespace paramwin::python {

void bind_groups(py::module_& m) {
  py::class_<PyGroups>(m, "AgentGroups", "AgentGroups (see paramwin.AgentGroups).")
      .def(py::init([](const py::object& comm, int ranks_per_agent, int buffer_ranks,
                       bool coordinator, std::vector<int> assignment) {
             const MPI_Comm c = comm_from(comm);
             GroupOptions o;
             o.ranks_per_agent = ranks_per_agent;
             o.buffer_ranks = buffer_ranks;
             o.coordinator = coordinator;
             o.assignment = std::move(assignment);
             const py::gil_scoped_release release;
             return PyGroups{std::make_unique<AgentGroups>(c, o)};
           }),
           py::arg("comm"), py::arg("ranks_per_agent"), py::arg("buffer_ranks"),
           py::arg("coordinator"), py::arg("assignment"))
      .def("close",
           [](PyGroups& g) {
             const py::gil_scoped_release release;
             g.groups.reset();
           })
      .def_property_readonly("valid", [](const PyGroups& g) { return g.groups != nullptr; })
      .def_property_readonly("role",
                             [](const PyGroups& g) {
                               return std::string(role_name(g.get().role()));
                             })
      .def_property_readonly("is_agent_rank",
                             [](const PyGroups& g) { return g.get().is_agent_rank(); })
      .def_property_readonly("world_rank", [](const PyGroups& g) { return g.get().world_rank(); })
      .def_property_readonly("world_size", [](const PyGroups& g) { return g.get().world_size(); })
      .def_property_readonly("agents", [](const PyGroups& g) { return g.get().agents(); })
      .def_property_readonly("agent", [](const PyGroups& g) { return g.get().agent(); })
      .def_property_readonly("rank_in_agent",
                             [](const PyGroups& g) { return g.get().rank_in_agent(); })
      .def_property_readonly("uniform", [](const PyGroups& g) { return g.get().uniform(); })
      .def(
          "agent_size", [](const PyGroups& g, int id) { return g.get().agent_size(id); },
          py::arg("id") = -1)
      .def(
          "agent_ranks", [](const PyGroups& g, int id) { return g.get().agent_ranks(id); },
          py::arg("id"))
      .def_property_readonly("buffer_ranks",
                             [](const PyGroups& g) { return g.get().buffer_ranks(); })
      .def_property_readonly("coordinator_rank",
                             [](const PyGroups& g) { return g.get().coordinator_rank(); })
      .def_property_readonly("agent_comm",
                             [](const PyGroups& g) { return comm_to_py(g.get().agent_comm()); })
      .def_property_readonly("shard_comm",
                             [](const PyGroups& g) { return comm_to_py(g.get().shard_comm()); })
      .def_property_readonly("training_comm",
                             [](const PyGroups& g) { return comm_to_py(g.get().training_comm()); })
      .def_property_readonly("role_comm",
                             [](const PyGroups& g) { return comm_to_py(g.get().role_comm()); });
}

void bind_group_agent(py::module_& m) {
  py::class_<GroupAgent> agent(m, "GroupAgent", "GroupAgent (see paramwin.GroupAgent).");
  agent.def(py::init([](const PyGroups& groups, Layout layout,
                        const std::map<std::string, std::string, std::less<>>& config,
                        const py::dict& hooks, const std::string& transport, bool verify,
                        std::string name, const std::string& memory, int cuda_device,
                        std::optional<double> suspect_seconds,
                        std::optional<double> suspect_beats) {
              const AgentGroups& g = groups.get();
              AgentOptions o = make_agent_options(config, hooks);
              WindowOptions w;
              w.transport = parse_transport(transport);
              w.verify = verify;
              w.name = std::move(name);
              set_memory(w, memory, cuda_device);
              set_liveness(w, suspect_seconds, suspect_beats);
              const py::gil_scoped_release release;
              return std::make_unique<GroupAgent>(g, std::move(layout), std::move(o), w);
            }),
            py::arg("groups"), py::arg("layout"), py::arg("config"), py::arg("hooks"),
            py::arg("transport"), py::arg("verify"), py::arg("name"), py::arg("memory") = "host",
            py::arg("cuda_device") = kCurrentDevice, py::arg("suspect_seconds") = py::none(),
            py::arg("suspect_beats") = py::none(),
            py::keep_alive<1, 2>());  // the groups' communicators outlive the agent
  bind_member(agent);
  agent.def_property_readonly("agent", [](GroupAgent& a) { return open_member(a).agent(); })
      .def_property_readonly("agents", [](GroupAgent& a) { return open_member(a).agents(); })
      .def_property_readonly("rank_in_agent",
                             [](GroupAgent& a) { return open_member(a).rank_in_agent(); })
      .def_property_readonly("ranks_per_agent",
                             [](GroupAgent& a) { return open_member(a).ranks_per_agent(); })
      .def_property_readonly("leader", [](GroupAgent& a) { return open_member(a).leader(); })
      .def_property_readonly("epoch", [](GroupAgent& a) { return open_member(a).epoch(); })
      .def(
          "roster_all",
          [](GroupAgent& a, double timeout_seconds) {
            GroupAgent& o = open_member(a);
            const py::gil_scoped_release release;
            return o.window().roster_all(timeout_seconds);
          },
          py::arg("timeout_seconds") = 0.0);
}

}  // namespace paramwin::python
