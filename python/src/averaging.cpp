// paramwin._core.AveragingAgent and HierarchicalAveragingAgent: the library's averaging agents
// (paramwin/averaging.hpp, hierarchical_averaging.hpp) with their options as one dict, their
// rounds as read-only records whose enum fields read as strings ("gossip", "stale", "shm"),
// and a custom topology as a Python callable. The pure-Python paramwin.AveragingAgent and
// HierarchicalAveragingAgent wrap them (arrays and tensors, staging, context manager).
// step(), publish() and finish() release the GIL; a custom topology takes it back while it
// runs.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "member.hpp"  // checkpoint_hooks_from
#include "paramwin/averaging.hpp"
#include "paramwin/error.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hierarchical_averaging.hpp"

namespace paramwin::python {
namespace {

// What Python holds: the agent until close() frees it (collectively).
template <class A>
struct Held {
  std::optional<A> agent;

  /// The open agent; InvalidArgument in Python once closed.
  A& get() {
    if (!agent) {
      throw InvalidArgument("paramwin: the averaging agent is closed");
    }
    return *agent;
  }
};

/// The calls both averaging agents offer: step, publish, finish (GIL released), pause,
/// resume, close and the common queries.
template <class A>
void bind_calls(py::class_<Held<A>>& cls) {
  cls.def(
         "step",
         [](Held<A>& a, const py::handle& layers) {
           A& o = a.get();
           const LayerList list(layers, o.layout());
           const py::gil_scoped_release release;
           return o.step(list.refs());
         },
         py::arg("layers"))
      .def(
          "publish",
          [](Held<A>& a, const py::handle& layers) {
            A& o = a.get();
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.publish(list.const_refs());
          },
          py::arg("layers"))
      .def(
          "finish",
          [](Held<A>& a, const py::handle& layers) {
            A& o = a.get();
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.finish(list.refs());
          },
          py::arg("layers"))
      .def("pause", [](Held<A>& a) { a.get().pause(); })
      .def("resume", [](Held<A>& a) { a.get().resume(); })
      .def("is_paused", [](Held<A>& a) { return a.get().is_paused(); })
      .def("close",
           [](Held<A>& a) {
             const py::gil_scoped_release release;
             a.agent.reset();  // collective; closing twice is a no-op
           })
      .def_property_readonly("valid", [](Held<A>& a) { return a.agent.has_value(); })
      .def_property_readonly("steps", [](Held<A>& a) { return a.get().steps(); })
      .def_property_readonly("layout", [](Held<A>& a) { return a.get().layout(); });
}

/// The checkpoint calls of both averaging agents (docs/averaging.md, "Checkpoints"): save and
/// load, the GIL released (AveragingAgent's hooks take it back).
template <class A>
void bind_checkpoints(py::class_<Held<A>>& cls) {
  cls.def(
         "save_checkpoint",
         [](Held<A>& a, const std::string& path, const py::handle& layers) {
           A& o = a.get();
           const LayerList list(layers, o.layout());
           const py::gil_scoped_release release;
           o.save_checkpoint(path, list.const_refs());
         },
         py::arg("path"), py::arg("layers"))
      .def(
          "load_checkpoint",
          [](Held<A>& a, const std::string& path, const py::handle& layers) {
            A& o = a.get();
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.load_checkpoint(path, list.refs());
          },
          py::arg("path"), py::arg("layers"));
}

// The topology from the Python keywords: a kind name with its k and seed, neighbour lists,
// or a callable (round, rank, size) -> peers run with the GIL taken.
Topology topology_from(const std::string& kind, int k, std::uint64_t seed,
                       std::vector<std::vector<int>> neighbours, const py::object& custom) {
  Topology t;
  t.kind = parse_enum<TopologyKind>(kind);
  t.k = k;
  t.seed = seed;
  t.neighbours = std::move(neighbours);
  if (!custom.is_none()) {
    if (t.kind != TopologyKind::custom) {
      throw InvalidArgument("paramwin: AveragingAgent: a topology callable needs topology "
                            "\"custom\", got \"" +
                            std::string(enum_name(t.kind)) + "\"");
    }
    t.custom = [fn = hold(custom)](std::int64_t round, int rank, int size) {
      const py::gil_scoped_acquire gil;
      return (*fn)(round, rank, size).cast<std::vector<int>>();
    };
  }
  return t;
}

// One option of the Python dict: its key and how it goes into AveragingOptions.
struct OptionSetter {
  const char* key;
  void (*set)(AveragingOptions& o, const py::handle& value);
};

const OptionSetter kOptionSetters[] = {
    {"interval",
     [](AveragingOptions& o, const py::handle& v) { o.interval = v.cast<std::int64_t>(); }},
    {"interval_ms",
     [](AveragingOptions& o, const py::handle& v) { o.interval_ms = v.cast<double>(); }},
    {"self_weight",
     [](AveragingOptions& o, const py::handle& v) {
       o.self_weight = v.is_none() ? std::numeric_limits<double>::quiet_NaN() : v.cast<double>();
     }},
    {"peer_weights", [](AveragingOptions& o,
                        const py::handle& v) { o.peer_weights = v.cast<std::vector<double>>(); }},
    {"normalize_weights",
     [](AveragingOptions& o, const py::handle& v) { o.normalize_weights = v.cast<bool>(); }},
    {"warmup_steps",
     [](AveragingOptions& o, const py::handle& v) { o.warmup_steps = v.cast<std::int64_t>(); }},
    {"cooldown_steps",
     [](AveragingOptions& o, const py::handle& v) { o.cooldown_steps = v.cast<std::int64_t>(); }},
    {"total_steps",
     [](AveragingOptions& o, const py::handle& v) { o.total_steps = v.cast<std::int64_t>(); }},
    {"publish_every",
     [](AveragingOptions& o, const py::handle& v) { o.publish_every = v.cast<std::int64_t>(); }},
    {"stale_steps",
     [](AveragingOptions& o, const py::handle& v) { o.stale_steps = v.cast<std::int64_t>(); }},
    {"stale_seconds",
     [](AveragingOptions& o, const py::handle& v) { o.stale_seconds = v.cast<double>(); }},
    {"background", [](AveragingOptions& o, const py::handle& v) { o.background = v.cast<bool>(); }},
    {"background_worker",
     [](AveragingOptions& o, const py::handle& v) { o.background_worker = v.cast<bool>(); }},
    {"symmetric", [](AveragingOptions& o, const py::handle& v) { o.symmetric = v.cast<bool>(); }},
    {"timeout_seconds",
     [](AveragingOptions& o, const py::handle& v) { o.timeout_seconds = v.cast<double>(); }},
    {"event_log",
     [](AveragingOptions& o, const py::handle& v) { o.event_log = v.cast<std::string>(); }},
    {"transport",
     [](AveragingOptions& o, const py::handle& v) {
       o.window.transport = parse_transport(v.cast<std::string>());
     }},
    {"wire",
     [](AveragingOptions& o, const py::handle& v) {
       o.window.wire = parse_enum<WireFormat>(v.cast<std::string>());
     }},
    {"verify", [](AveragingOptions& o, const py::handle& v) { o.window.verify = v.cast<bool>(); }},
    {"name",
     [](AveragingOptions& o, const py::handle& v) { o.window.name = v.cast<std::string>(); }},
    {"memory",
     [](AveragingOptions& o, const py::handle& v) {
       set_memory(o.window, v.cast<std::string>(), o.window.cuda_device);
     }},
    {"cuda_device",
     [](AveragingOptions& o, const py::handle& v) { o.window.cuda_device = v.cast<int>(); }},
    {"suspect_seconds",
     [](AveragingOptions& o, const py::handle& v) {
       if (!v.is_none()) o.window.liveness.suspect_seconds = v.cast<double>();
     }},
    {"suspect_beats",
     [](AveragingOptions& o, const py::handle& v) {
       if (!v.is_none()) o.window.liveness.suspect_beats = v.cast<double>();
     }},
};

}  // namespace

AveragingOptions averaging_options(const py::dict& options) {
  AveragingOptions o;
  std::string kind = "all";
  int k = 1;
  std::uint64_t seed = 0;
  std::vector<std::vector<int>> neighbours;
  py::object custom = py::none();
  for (const auto& [key_handle, value] : options) {
    const auto key = key_handle.cast<std::string>();
    if (key == "topology") {
      kind = value.cast<std::string>();
    } else if (key == "k") {
      k = value.cast<int>();
    } else if (key == "seed") {
      seed = value.cast<std::uint64_t>();
    } else if (key == "neighbours") {
      neighbours = value.cast<std::vector<std::vector<int>>>();
    } else if (key == "custom") {
      custom = py::reinterpret_borrow<py::object>(value);
    } else {
      const auto* it = std::find_if(std::begin(kOptionSetters), std::end(kOptionSetters),
                                    [&](const OptionSetter& s) { return key == s.key; });
      if (it == std::end(kOptionSetters)) {
        throw InvalidArgument("paramwin: AveragingAgent: unknown option '" + key + "'");
      }
      it->set(o, value);
    }
  }
  o.topology = topology_from(kind, k, seed, std::move(neighbours), custom);
  return o;
}

namespace {

void bind_averaging_records(py::module_& m) {
  py::class_<AveragingPeer>(m, "AveragingPeer", "One peer of an averaging round.")
      .def_readonly("rank", &AveragingPeer::rank)
      .def_readonly("version", &AveragingPeer::version)
      .def_readonly("stamp", &AveragingPeer::stamp)
      .def_readonly("weight", &AveragingPeer::weight)
      .def_property_readonly(
          "skipped", [](const AveragingPeer& p) { return std::string(enum_name(p.skipped)); },
          "Why it was left out (\"none\": read and mixed in).")
      .def_property_readonly("transport",
                             [](const AveragingPeer& p) {
                               return std::string(enum_name(p.transport));
                             })
      .def("__repr__", [](const AveragingPeer& p) {
        return "AveragingPeer(rank=" + std::to_string(p.rank) +
               ", version=" + std::to_string(p.version) + ", weight=" + std::to_string(p.weight) +
               ", skipped='" + std::string(enum_name(p.skipped)) + "')";
      });

  py::class_<AveragingRound>(m, "AveragingRound", "What one averaging step (or finish) did.")
      .def_readonly("rank", &AveragingRound::rank)
      .def_readonly("step", &AveragingRound::step)
      .def_readonly("round", &AveragingRound::round)
      .def_property_readonly("kind",
                             [](const AveragingRound& r) { return std::string(enum_name(r.kind)); })
      .def_readonly("applied", &AveragingRound::applied)
      .def_readonly("background_applied", &AveragingRound::background_applied)
      .def_readonly("overlapped", &AveragingRound::overlapped)
      .def_readonly("read_step", &AveragingRound::read_step)
      .def_readonly("started_round", &AveragingRound::started_round)
      .def_readonly("busy", &AveragingRound::busy)
      .def_readonly("received", &AveragingRound::received)
      .def_readonly("self_weight", &AveragingRound::self_weight)
      .def_readonly("peers", &AveragingRound::peers)
      .def_readonly("note", &AveragingRound::note)
      .def_readonly("paused", &AveragingRound::paused)
      .def_readonly("published", &AveragingRound::published)
      .def_readonly("joining", &AveragingRound::joining)
      .def_readonly("version", &AveragingRound::version)
      .def_readonly("bytes", &AveragingRound::bytes)
      .def_readonly("seconds", &AveragingRound::seconds)
      .def(
          "to_json", [](const AveragingRound& r) { return to_json(r); },
          "The round as one JSON object (a line of the event log).")
      .def("__repr__", [](const AveragingRound& r) {
        return "AveragingRound(step=" + std::to_string(r.step) +
               ", round=" + std::to_string(r.round) + ", kind='" + std::string(enum_name(r.kind)) +
               "', applied=" + (r.applied ? "True" : "False") +
               ", peers=" + std::to_string(r.peers.size()) + ")";
      });
}

}  // namespace

void bind_averaging(py::module_& m) {
  bind_averaging_records(m);
  m.def(
      "topology_peers",
      [](const std::string& kind, int k, std::uint64_t seed,
         std::vector<std::vector<int>> neighbours, const py::object& custom, std::int64_t round,
         int rank, int size) {
        const Topology t = topology_from(kind, k, seed, std::move(neighbours), custom);
        std::vector<int> peers = t.peers(round, rank, size);
        if (const std::string why = check_peers(peers, rank, size); !why.empty()) {
          throw InvalidArgument(why);
        }
        return peers;
      },
      py::arg("kind"), py::arg("k"), py::arg("seed"), py::arg("neighbours"), py::arg("custom"),
      py::arg("round"), py::arg("rank"), py::arg("size"),
      "The peers a topology names for rank at its round (the library's Topology::peers).");

  py::class_<HierarchicalRound>(m, "HierarchicalRound",
                                "What one hierarchical averaging step (or finish) did.")
      .def_readonly("group", &HierarchicalRound::group)
      .def_readonly("group_size", &HierarchicalRound::group_size)
      .def_readonly("group_seconds", &HierarchicalRound::group_seconds)
      .def_readonly("across", &HierarchicalRound::across)
      .def("__repr__", [](const HierarchicalRound& r) {
        return "HierarchicalRound(group=" + std::to_string(r.group) +
               ", group_size=" + std::to_string(r.group_size) + ", across_kind='" +
               std::string(enum_name(r.across.kind)) + "')";
      });

  py::class_<Held<AveragingAgent>> flat(m, "AveragingAgent",
                                        "AveragingAgent (see paramwin.AveragingAgent).");
  flat.def(py::init([](const py::object& comm, Layout layout, const py::dict& options) {
             const MPI_Comm c = comm_from(comm);
             AveragingOptions o = averaging_options(options);
             const py::gil_scoped_release release;
             auto out = std::make_unique<Held<AveragingAgent>>();
             out->agent.emplace(c, std::move(layout), std::move(o));
             return out;
           }),
           py::arg("comm"), py::arg("layout"), py::arg("options"));
  bind_calls(flat);
  bind_checkpoints(flat);
  flat.def(
      "set_checkpoint_hooks",
      [](Held<AveragingAgent>& a, const py::object& save, const py::object& load) {
        a.get().set_checkpoint_hooks(checkpoint_hooks_from(save, load));
      },
      py::arg("save"), py::arg("load"));
  flat.def_property_readonly("rank", [](Held<AveragingAgent>& a) { return a.get().rank(); })
      .def_property_readonly("size", [](Held<AveragingAgent>& a) { return a.get().size(); })
      .def_property_readonly("rounds", [](Held<AveragingAgent>& a) { return a.get().rounds(); })
      .def_property_readonly("version",
                             [](Held<AveragingAgent>& a) { return a.get().window().version(); })
      .def_property_readonly(
          "background_inline_reason",
          [](Held<AveragingAgent>& a) { return a.get().background_inline_reason(); },
          "Background averaging: \"\" when its reads run on the worker thread, else why they "
          "run inside step().")
      .def_property_readonly("memory",
                             [](Held<AveragingAgent>& a) {
                               return std::string(enum_name(a.get().window().options().memory));
                             })
      .def(
          "roster_all",
          [](Held<AveragingAgent>& a, double timeout_seconds) {
            AveragingAgent& o = a.get();
            const py::gil_scoped_release release;
            return o.window().roster_all(timeout_seconds);
          },
          py::arg("timeout_seconds") = 0.0);

  py::class_<Held<HierarchicalAveragingAgent>>
      tiered(m, "HierarchicalAveragingAgent",
             "HierarchicalAveragingAgent (see paramwin.HierarchicalAveragingAgent).");
  tiered.def(py::init([](const PyGroups& groups, Layout layout, const py::dict& options) {
               AveragingOptions o = averaging_options(options);
               const AgentGroups& g = groups.get();
               const py::gil_scoped_release release;
               auto out = std::make_unique<Held<HierarchicalAveragingAgent>>();
               out->agent.emplace(g, std::move(layout), std::move(o));
               return out;
             }),
             py::arg("groups"), py::arg("layout"), py::arg("options"));
  bind_calls(tiered);
  bind_checkpoints(tiered);
  using Tiered = Held<HierarchicalAveragingAgent>;
  tiered.def_property_readonly("group", [](Tiered& a) { return a.get().group(); })
      .def_property_readonly("groups", [](Tiered& a) { return a.get().groups(); })
      .def_property_readonly("rank_in_group", [](Tiered& a) { return a.get().rank_in_group(); })
      .def_property_readonly("group_size", [](Tiered& a) { return a.get().group_size(); })
      .def_property_readonly("leader", [](Tiered& a) { return a.get().leader(); })
      .def_property_readonly("rounds", [](Tiered& a) {
        HierarchicalAveragingAgent& h = a.get();
        return h.leader() ? h.across().rounds() : std::int64_t{-1};
      });
}

}  // namespace paramwin::python
