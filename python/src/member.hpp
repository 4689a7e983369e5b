#pragma once
// Internal header of the Python extension: the methods every kind of agent (Agent<>,
// GroupAgent) offers Python, bound once for both from AgentInterface's calls. step(),
// publish() and the checkpoint calls release the GIL; the callables take it back.
#include <pybind11/stl.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "paramwin/agent_interface.hpp"
#include "paramwin/checkpoint.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {

/// @p a, or InvalidArgument when it was closed.
template <class A>
A& open_member(A& a) {
  if (!a.window().valid()) {
    throw InvalidArgument("paramwin: the agent is closed");
  }
  return a;
}

/// The checkpoint hooks from two Python callables: save() -> dict name -> bytes (in order),
/// load(blobs: dict name -> bytes, reborn: bool). Either may be None.
inline CheckpointHooks checkpoint_hooks_from(const py::object& save, const py::object& load) {
  CheckpointHooks h;
  if (!save.is_none()) {
    h.save = [fn = hold(save)] {
      const py::gil_scoped_acquire gil;
      std::vector<CheckpointBlob> out;
      const py::object blobs = (*fn)();
      if (!py::isinstance<py::dict>(blobs)) {
        throw InvalidArgument("paramwin: the checkpoint save hook must return a dict name -> "
                              "bytes");
      }
      for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(blobs)) {
        out.push_back(CheckpointBlob{.name = k.cast<std::string>(),
                                     .bytes = py::bytes(py::reinterpret_borrow<py::object>(v))});
      }
      return out;
    };
  }
  if (!load.is_none()) {
    h.load = [fn = hold(load)](const std::vector<CheckpointBlob>& blobs, bool reborn) {
      const py::gil_scoped_acquire gil;
      py::dict d;
      for (const CheckpointBlob& b : blobs) d[py::str(b.name)] = py::bytes(b.bytes);
      (*fn)(d, reborn);
    };
  }
  return h;
}

/// Binds AgentInterface's checkpoint calls on @p cls (A: Agent<> or GroupAgent).
template <class A>
void bind_member_checkpoints(py::class_<A>& cls);

/// Binds AgentInterface's calls on @p cls (A: Agent<> or GroupAgent).
template <class A>
void bind_member(py::class_<A>& cls) {
  cls.def(
         "step",
         [](A& a, std::int64_t iteration, double metric, const py::object& layers) {
           A& o = open_member(a);
           const LayerList list(layers, o.layout());
           const py::gil_scoped_release release;
           return o.step(iteration, metric, list.refs());
         },
         py::arg("iteration"), py::arg("metric"), py::arg("layers"))
      .def(
          "publish",
          [](A& a, const py::object& layers) {
            A& o = open_member(a);
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.publish(list.const_refs());
          },
          py::arg("layers"))
      .def("leave", [](A& a) { open_member(a).leave(); })
      .def("progress",
           [](A& a) {
             A& o = open_member(a);
             const py::gil_scoped_release release;
             o.progress();
           })
      .def("pause", [](A& a) { open_member(a).pause(); })
      .def("resume", [](A& a) { open_member(a).resume(); })
      .def_property_readonly("is_paused", [](A& a) { return a.is_paused(); })
      .def("close",
           [](A& a) {
             if (a.window().valid()) {
               const py::gil_scoped_release release;
               a.close();
             }
           })
      .def_property_readonly("valid", [](A& a) { return a.window().valid(); })
      .def_property_readonly("hyperparameters",
                             [](A& a) { return hyper_to_dict(a.hyperparameters()); })
      .def(
          "set_hyperparameters",
          [](A& a, const py::handle& values) {
            open_member(a).set_hyperparameters(hyper_from_dict(a.hyperparameters(), values));
          },
          py::arg("values"))
      .def_property_readonly("layout", [](A& a) { return open_member(a).layout(); })
      .def_property_readonly("memory",
                             [](A& a) {
                               return std::string(
                                   enum_name(open_member(a).window().options().memory));
                             })
      .def_property_readonly("steps", [](A& a) { return a.steps(); })
      .def_property_readonly("age", [](A& a) { return a.age(); })
      .def_property_readonly("max_age", [](A& a) { return a.max_age(); })
      .def_property_readonly("generation", [](A& a) { return a.generation(); })
      .def_property_readonly(
          "stats", [](A& a) -> const AgentStats& { return a.stats(); },
          py::return_value_policy::reference_internal)
      .def_property_readonly("event_log", [](A& a) { return a.options().event_log; })
      .def("summary", [](const A& a) {
        std::ostringstream out;
        a.write_summary(out);
        return out.str();
      });
  bind_member_checkpoints(cls);
}

template <class A>
void bind_member_checkpoints(py::class_<A>& cls) {
  cls.def(
         "save_checkpoint",
         [](A& a, const std::string& path, const py::object& layers) {
           A& o = open_member(a);
           const LayerList list(layers, o.layout());
           const py::gil_scoped_release release;
           o.save_checkpoint(path, list.const_refs());
         },
         py::arg("path"), py::arg("layers"))
      .def(
          "load_checkpoint",
          [](A& a, const std::string& path, const py::object& layers) {
            A& o = open_member(a);
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.load_checkpoint(path, list.refs());
          },
          py::arg("path"), py::arg("layers"))
      .def(
          "resume_newest",
          [](A& a, const py::object& layers) {
            A& o = open_member(a);
            const LayerList list(layers, o.layout());
            const py::gil_scoped_release release;
            return o.resume_newest(list.refs());
          },
          py::arg("layers"))
      .def("wait_checkpoint",
           [](A& a) {
             A& o = open_member(a);
             const py::gil_scoped_release release;
             o.wait_checkpoint();
           })
      .def(
          "set_checkpoint_hooks",
          [](A& a, const py::object& save, const py::object& load) {
            open_member(a).set_checkpoint_hooks(checkpoint_hooks_from(save, load));
          },
          py::arg("save"), py::arg("load"));
}

}  // namespace paramwin::python
