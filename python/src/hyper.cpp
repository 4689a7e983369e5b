// Hyperparameters (paramwin/hyper.hpp) as Python dicts name -> int (int64) or float (float64).
#include "bindings.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {

py::dict hyper_to_dict(const Hyperparameters& h) {
  py::dict d;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const HyperSpec& s = h.spec(i);
    if (s.type == HyperType::int64) {
      d[py::str(s.name)] = h.get_int(s.name);
    } else {
      d[py::str(s.name)] = h.as_double(i);
    }
  }
  return d;
}

Hyperparameters hyper_from_dict(Hyperparameters base, const py::handle& values) {
  if (values.is_none()) {
    return base;
  }
  if (!py::isinstance<py::dict>(values)) {
    throw InvalidArgument("paramwin: hyperparameters must be a dict name -> number, got " +
                          std::string(py::str(py::type::of(values).attr("__name__"))));
  }
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(values)) {
    const auto name = key.cast<std::string>();
    const std::size_t i = base.index_of(name);  // InvalidArgument naming the declared ones
    if (py::isinstance<py::bool_>(value) ||
        !(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value))) {
      throw InvalidArgument("paramwin: hyperparameter '" + name + "' must be a number, got " +
                            std::string(py::str(py::type::of(value).attr("__name__"))));
    }
    if (base.spec(i).type == HyperType::int64 && py::isinstance<py::int_>(value)) {
      base.set_int(name, value.cast<std::int64_t>());
    } else {
      base.set(i, value.cast<double>());
    }
  }
  return base;
}

}  // namespace paramwin::python
