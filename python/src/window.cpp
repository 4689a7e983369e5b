// paramwin._core.Window: the library's Window (paramwin/window_core.hpp) with keyword options,
// over host memory or (memory="cuda") a device window. The pure-Python paramwin.ParameterWindow
// wraps it (array and tensor handling, CUDA staging or in-place device tensors, context manager).
// Publish, pull and roster reads release the GIL for their MPI work.
#include <pybind11/stl.h>

#include <string>
#include <string_view>
#include <utility>

#include "bindings.hpp"
#include "paramwin/device_choice.hpp"
#include "paramwin/error.hpp"
#include "paramwin/window_core.hpp"

namespace paramwin::python {
namespace {

using Window = paramwin::Window;  // the one window class (ParameterWindow<> adds only types)

WindowOptions window_options(const std::string& transport, const std::string& wire,
                             const std::string& layout_check, bool verify, bool progress_thread,
                             unsigned progress_interval_us, std::string name,
                             const std::string& memory, int cuda_device) {
  WindowOptions o;
  set_memory(o, memory, cuda_device);
  o.transport = parse_transport(transport);
  o.wire = parse_enum<WireFormat>(wire);
  o.layout_check = parse_enum<LayoutCheck>(layout_check);
  o.verify = verify;
  o.progress_thread = progress_thread;
  o.progress_interval_us = progress_interval_us;
  o.name = std::move(name);
  return o;
}

PullOptions pull_options(const std::string& reduction, std::vector<double> weights, double momentum,
                         const std::string& non_finite, const std::string& read_mode,
                         unsigned optimistic_attempts, std::size_t chunk_bytes,
                         double timeout_seconds) {
  PullOptions o;
  o.reduction = parse_enum<Reduction>(reduction);
  o.weights = std::move(weights);
  o.momentum = momentum;
  o.non_finite = parse_enum<NonFinitePolicy>(non_finite);
  o.read_mode = parse_enum<ReadMode>(read_mode);
  o.optimistic_attempts = optimistic_attempts;
  o.chunk_bytes = chunk_bytes;
  o.timeout_seconds = timeout_seconds;
  return o;
}

// A closed (or moved-from) window raises InvalidArgument in Python rather than whatever the
// C++ layer does with an empty window.
Window& open(Window& w) {
  if (!w.valid()) {
    throw InvalidArgument("paramwin: the window is closed");
  }
  return w;
}

}  // namespace

void set_liveness(WindowOptions& o, std::optional<double> suspect_seconds,
                  std::optional<double> suspect_beats) {
  if (suspect_seconds) o.liveness.suspect_seconds = *suspect_seconds;
  if (suspect_beats) o.liveness.suspect_beats = *suspect_beats;
}

Transport parse_transport(std::string_view text) { return parse_enum<Transport>(text); }

void set_memory(WindowOptions& o, std::string_view memory, int cuda_device) {
  o.memory = parse_enum<Memory>(memory);
  o.cuda_device = cuda_device;
}

namespace {

// close() and the queries (name, sizes, transports, progress).
void bind_window_queries(py::class_<Window>& cls) {
  cls.def("close",
          [](Window& w) {
            if (w.valid()) {
              const py::gil_scoped_release release;
              w.close();
            }
          })
      .def_property_readonly("valid", &Window::valid)
      .def_property_readonly("rank", [](Window& w) { return open(w).rank(); })
      .def_property_readonly("size", [](Window& w) { return open(w).size(); })
      .def_property_readonly("layout", [](Window& w) { return open(w).layout(); })
      .def_property_readonly("name", [](Window& w) { return open(w).name(); })
      .def_property_readonly("memory",
                             [](Window& w) {
                               return std::string(enum_name(open(w).options().memory));
                             })
      .def_property_readonly("version", [](Window& w) { return open(w).version(); })
      .def_property_readonly("fingerprint", [](Window& w) { return open(w).fingerprint(); })
      .def_property_readonly("wire_bytes", [](Window& w) { return open(w).wire_bytes(); })
      .def_property_readonly("has_rma_readers", [](Window& w) { return open(w).has_rma_readers(); })
      .def_property_readonly("pending_rma", [](Window& w) { return open(w).pending_rma(); })
      .def(
          "transport_for",
          [](Window& w, int rank) {
            return std::string(transport_name(open(w).transport_for(rank)));
          },
          py::arg("rank"))
      .def("progress", [](Window& w) {
        Window& o = open(w);
        const py::gil_scoped_release release;
        o.progress();
      });
}

// What moves data: publish and pull.
void bind_window_transfers(py::class_<Window>& cls) {
  cls.def(
         "publish",
         [](Window& w, const py::object& layers, std::uint64_t stamp, const py::object& hyper) {
           Window& o = open(w);
           const LayerList list(layers, o.layout());
           if (hyper.is_none()) {
             const py::gil_scoped_release release;
             return o.publish(list.const_refs(), stamp);
           }
           const Hyperparameters h = hyper_from_dict(o.hyperparameters(), hyper);
           const py::gil_scoped_release release;
           return o.publish(list.const_refs(), h, stamp);
         },
         py::arg("layers"), py::arg("stamp") = 0, py::arg("hyper") = py::none())
      .def(
          "pull",
          [](Window& w, const std::vector<int>& donors, const py::object& layers,
             const std::string& reduction, std::vector<double> weights, double momentum,
             const std::string& non_finite, const std::string& read_mode,
             unsigned optimistic_attempts, std::size_t chunk_bytes, double timeout_seconds) {
            Window& o = open(w);
            const LayerList list(layers, o.layout());
            const PullOptions options =
                pull_options(reduction, std::move(weights), momentum, non_finite, read_mode,
                             optimistic_attempts, chunk_bytes, timeout_seconds);
            const py::gil_scoped_release release;
            return o.pull(donors, list.refs(), options);
          },
          py::arg("donors"), py::arg("layers"), py::arg("reduction"), py::arg("weights"),
          py::arg("momentum"), py::arg("non_finite"), py::arg("read_mode"),
          py::arg("optimistic_attempts"), py::arg("chunk_bytes"), py::arg("timeout_seconds"));
}

// The roster: read other agents' entries, set this one's.
void bind_window_roster(py::class_<Window>& cls) {
  cls.def(
         "roster",
         [](Window& w, int rank, double timeout_seconds) {
           Window& o = open(w);
           const py::gil_scoped_release release;
           return o.roster(rank, timeout_seconds);
         },
         py::arg("rank"), py::arg("timeout_seconds") = 0.0)
      .def(
          "roster_all",
          [](Window& w, double timeout_seconds) {
            Window& o = open(w);
            const py::gil_scoped_release release;
            return o.roster_all(timeout_seconds);
          },
          py::arg("timeout_seconds") = 0.0)
      .def(
          "set_status",
          [](Window& w, std::int64_t iteration, std::int64_t age, double metric,
             std::uint64_t generation, const std::string& state) {
            AgentStatus s;
            s.iteration = iteration;
            s.age = age;
            s.metric = metric;
            s.generation = generation;
            s.state = parse_enum<AgentState>(state);
            open(w).set_status(s);
          },
          py::arg("iteration"), py::arg("age"), py::arg("metric"), py::arg("generation"),
          py::arg("state"))
      .def_property_readonly("status", [](Window& w) { return open(w).status(); });
}

}  // namespace

void bind_window(py::module_& m) {
  m.def(
      "cuda_devices",
      [] {
        std::string why;
        const int n = cuda_device_count(&why);
        return py::make_tuple(n, why);
      },
      "(count, why): the CUDA devices this library sees (0 without a device, a driver or CUDA "
      "in this build, with CUDA's reason), as device windows see them.");
  py::class_<Window>
      cls(m, "Window",
          "ParameterWindow over host or device memory (see paramwin.ParameterWindow).");
  cls.def(py::init([](const py::object& comm, Layout layout, const std::string& transport,
                      const std::string& wire, const std::string& layout_check, bool verify,
                      bool progress_thread, unsigned progress_interval_us, std::string name,
                      const std::string& memory, int cuda_device,
                      std::optional<double> suspect_seconds, std::optional<double> suspect_beats) {
            const MPI_Comm c = comm_from(comm);
            WindowOptions o =
                window_options(transport, wire, layout_check, verify, progress_thread,
                               progress_interval_us, std::move(name), memory, cuda_device);
            set_liveness(o, suspect_seconds, suspect_beats);
            const py::gil_scoped_release release;
            return Window(c, std::move(layout), o);
          }),
          py::arg("comm"), py::arg("layout"), py::arg("transport"), py::arg("wire"),
          py::arg("layout_check"), py::arg("verify"), py::arg("progress_thread"),
          py::arg("progress_interval_us"), py::arg("name"), py::arg("memory") = "host",
          py::arg("cuda_device") = kCurrentDevice, py::arg("suspect_seconds") = py::none(),
          py::arg("suspect_beats") = py::none());
  bind_window_queries(cls);
  bind_window_transfers(cls);
  bind_window_roster(cls);
}

}  // namespace paramwin::python
