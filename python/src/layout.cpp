// paramwin.Layout and paramwin.LayerSpec.
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {

namespace {

// A layer's dimensions from Python: a tuple of dimensions (() for a 0-dim scalar) or an
// element count; negative values refused naming the layer.
std::vector<std::size_t> dims_from(const std::string& name, const py::object& shape) {
  std::vector<std::size_t> dims;
  if (py::isinstance<py::int_>(shape)) {
    const auto count = shape.cast<long long>();
    if (count < 0) {
      throw InvalidArgument("paramwin: layer '" + name + "': negative element count " +
                            std::to_string(count));
    }
    dims.push_back(static_cast<std::size_t>(count));
    return dims;
  }
  for (const py::handle d : shape) {
    const auto e = d.cast<long long>();
    if (e < 0) {
      throw InvalidArgument("paramwin: layer '" + name + "': negative dimension " +
                            std::to_string(e));
    }
    dims.push_back(static_cast<std::size_t>(e));
  }
  return dims;
}

// The Layout as a Python sequence of LayerSpec: len, indexing by position or name, iteration,
// membership by name.
void bind_layout_sequence(py::class_<Layout>& cls) {
  cls.def("__len__", &Layout::size)
      .def(
          "__getitem__",
          [](const Layout& self, const py::object& key) -> const LayerSpec& {
            if (py::isinstance<py::str>(key)) {
              return self[self.index_of(key.cast<std::string>())];
            }
            auto i = key.cast<long long>();
            if (i < 0) {
              i += static_cast<long long>(self.size());
            }
            if (i < 0 || static_cast<std::size_t>(i) >= self.size()) {
              throw py::index_error("paramwin: layer index " + std::string(py::str(key)) +
                                    " out of range (" + std::to_string(self.size()) + " layers)");
            }
            return self[static_cast<std::size_t>(i)];
          },
          py::return_value_policy::reference_internal)
      .def(
          "__iter__",
          [](const Layout& self) {
            return py::make_iterator(self.layers().begin(), self.layers().end());
          },
          py::keep_alive<0, 1>())
      .def("__contains__",
           [](const Layout& self, const std::string& name) { return self.find(name).has_value(); });
}

}  // namespace

void bind_layout(py::module_& m) {
  py::class_<LayerSpec>(m, "LayerSpec", "One named layer: name, shape, element count, dtype.")
      .def_readonly("name", &LayerSpec::name)
      .def_property_readonly(
          "shape", [](const LayerSpec& s) { return py::tuple(py::cast(s.shape)); },
          "Dimensions; () for a 0-dim scalar.")
      .def_readonly("count", &LayerSpec::count)
      .def_property_readonly("dtype",
                             [](const LayerSpec& s) { return std::string(dtype_name(s.dtype)); })
      .def("__eq__", [](const LayerSpec& a, const LayerSpec& b) { return a == b; })
      .def("__repr__", [](const LayerSpec& s) { return "LayerSpec(" + s.describe() + ")"; });

  py::class_<Layout> layout(m, "Layout", "Ordered named layers with a fingerprint.");
  bind_layout_sequence(layout);
  layout.def(py::init<>())
      .def(
          "add",
          [](Layout& self, std::string name, const py::object& shape,
             const std::string& dtype) -> Layout& {
            std::vector<std::size_t> dims = dims_from(name, shape);
            return self.add(std::move(name), std::move(dims), parse_dtype(dtype));
          },
          py::arg("name"), py::arg("shape") = py::tuple(), py::arg("dtype") = "float32",
          py::return_value_policy::reference_internal,
          "Appends a layer; shape is a tuple (() for a scalar) or an element count. Returns "
          "the layout, so calls chain.")
      .def(
          "add_hyperparameter",
          [](Layout& self, std::string name, const std::string& type) -> Layout& {
            if (type != "float64" && type != "int64") {
              throw InvalidArgument("paramwin: hyperparameter '" + name + "': unknown type '" +
                                    type + "' (valid: float64, int64)");
            }
            return self.add_hyperparameter(std::move(name),
                                           type == "int64" ? HyperType::int64 : HyperType::float64);
          },
          py::arg("name"), py::arg("type") = "float64", py::return_value_policy::reference_internal,
          "Declares a hyperparameter published inside every snapshot with the layers.")
      .def_property_readonly(
          "hyperparameters",
          [](const Layout& self) {
            py::dict d;
            for (const HyperSpec& h : self.hyperparameters()) {
              d[py::str(h.name)] = std::string(hyper_type_name(h.type));
            }
            return d;
          },
          "Declared hyperparameters: name -> type.")
      .def("index_of", &Layout::index_of, py::arg("name"))
      .def_property_readonly("names",
                             [](const Layout& self) {
                               py::list names;
                               for (const LayerSpec& s : self.layers()) {
                                 names.append(s.name);
                               }
                               return names;
                             })
      .def_property_readonly("total_elements", &Layout::total_elements)
      .def_property_readonly("total_bytes", &Layout::total_bytes)
      .def_property_readonly("fingerprint", &Layout::fingerprint)
      .def("serialize", &Layout::serialize)
      .def_static("deserialize", [](const std::string& text) { return Layout::deserialize(text); })
      .def_static("first_difference", &Layout::first_difference)
      .def("__eq__", [](const Layout& a, const Layout& b) { return a == b; })
      .def("__repr__", [](const Layout& self) {
        std::string s = "Layout([";
        for (std::size_t i = 0; i < self.size(); ++i) {
          s += (i == 0 ? "" : ", ") + self[i].describe();
        }
        return s + "])";
      });
}

}  // namespace paramwin::python
