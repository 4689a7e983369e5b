// Layer descriptors from Python (paramwin/_tensors.py) to LayerRef / ConstLayerRef: host
// memory, or device memory (paramwin::device_memory) for a device window.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "paramwin/error.hpp"

namespace paramwin::python {
namespace {

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) {
      s += shape.size() == 1 ? "," : ", ";
    }
  }
  return s + ")";
}

}  // namespace

LayerList::LayerList(const py::handle& descriptors, const Layout& layout) {
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(descriptors);
  const std::size_t n = seq.size();
  names_.reserve(n);  // no reallocation: the refs keep views of these strings
  refs_.reserve(n);
  const_refs_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const py::tuple d = seq[i].cast<py::tuple>();
    names_.push_back(d[0].is_none() ? std::string() : d[0].cast<std::string>());
    const auto address = d[1].cast<std::uintptr_t>();
    const DType dtype = parse_dtype(d[2].cast<std::string>());
    const auto shape = d[3].cast<std::vector<std::size_t>>();
    std::size_t count = 1;
    for (const std::size_t e : shape) {
      count *= e;
    }
    // Python arrays carry their shape: it must be the layer's (the C++ span API binds by
    // count; a (32, 64) array for a 64x32 layer is refused here, not reshaped).
    const std::string& name = names_.back();
    const std::size_t index = name.empty() ? i : layout.index_of(name);
    if (index < layout.size() && layout[index].shape != shape) {
      const std::string which =
          name.empty() ? "#" + std::to_string(i) + " (" + layout[index].describe() + ")"
                       : layout[index].describe();
      throw InvalidArgument("paramwin: layer " + which + ": got an array of shape " +
                            shape_text(shape) + " " + std::string(dtype_name(dtype)) +
                            ", expected shape " + shape_text(layout[index].shape));
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the address of the caller's array
    void* data = reinterpret_cast<void*>(address);
    if (d.size() > 4 && d[4].cast<bool>()) {
      refs_.emplace_back(name, data, count, dtype, device_memory);
      const_refs_.emplace_back(name, data, count, dtype, device_memory);
    } else {
      refs_.emplace_back(name, data, count, dtype);
      const_refs_.emplace_back(name, data, count, dtype);
    }
  }
}

}  // namespace paramwin::python
