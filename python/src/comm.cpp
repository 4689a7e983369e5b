// mpi4py communicators through mpi4py's C API (mpi4py/mpi4py.h, imported in module.cpp), and
// the library's agreement over one (paramwin/agreement.hpp) for the Python package's
// collective choices: the device-window choice is the library's (paramwin/device_choice.hpp).
#include <mpi4py/mpi4py.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "paramwin/agreement.hpp"
#include "paramwin/device_choice.hpp"

namespace paramwin::python {

// mpi4py's C API lives in static pointers of this translation unit: it is imported here.
void import_mpi4py_api() {
  if (import_mpi4py() < 0) {
    throw py::error_already_set();
  }
}

MPI_Comm comm_from(const py::handle& comm) {
  if (comm.is_none()) {
    return MPI_COMM_WORLD;
  }
  if (PyObject_TypeCheck(comm.ptr(), &PyMPIComm_Type) == 0) {
    throw py::type_error(
        "paramwin: comm must be an mpi4py.MPI.Comm (or None for COMM_WORLD), got " +
        std::string(py::str(py::type::of(comm))));
  }
  MPI_Comm* c = PyMPIComm_Get(comm.ptr());
  if (c == nullptr) {
    throw py::error_already_set();
  }
  if (*c == MPI_COMM_NULL) {
    throw py::value_error("paramwin: comm is MPI.COMM_NULL");
  }
  return *c;
}

py::object comm_to_py(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    return py::none();
  }
  PyObject* obj = PyMPIComm_New(comm);
  if (obj == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(obj);
}

void bind_comm(py::module_& m) {
  m.def(
      "agree",
      [](const py::object& comm, const std::string& local_error) {
        const MPI_Comm c = comm_from(comm);
        const py::gil_scoped_release release;
        return agreed_error(c, local_error);
      },
      py::arg("comm"), py::arg("local_error"),
      "Collective over comm (None: COMM_WORLD): '' when local_error is '' on every rank; "
      "otherwise this rank's own local_error, or 'paramwin: rank N failed: ...' with the "
      "lowest failing rank's (the library's agreement, one allreduce when all agree).");
  m.def(
      "device_obstacle",
      [](const std::vector<std::tuple<std::string, bool, int, std::string>>& tensors) {
        std::vector<TensorPlace> places;
        places.reserve(tensors.size());
        for (const auto& [name, cuda, device, where] : tensors) {
          places.push_back(
              TensorPlace{.name = name, .cuda = cuda, .device = device, .where = where});
        }
        const DeviceObstacle o = device_obstacle(places);
        return py::make_tuple(o.why, o.device, o.any_cuda);
      },
      py::arg("tensors"),
      "(why, device, any_cuda): why tensors [(name, is_cuda, device index, device text)] "
      "cannot live in a device window ('' if they can; paramwin::device_obstacle).");
  m.def(
      "choose_device_window",
      [](const py::object& comm, bool required, bool never, const py::function& obstacle,
         const std::string& prefix, const std::string& required_by) {
        const MPI_Comm c = comm_from(comm);
        // obstacle() runs with the GIL (it reads tensors); the agreement without it. Its
        // Python exception becomes this rank's obstacle (as a C++ one does).
        const auto ask = [&obstacle]() {
          const py::gil_scoped_acquire gil;
          try {
            const auto [why, device, any_cuda] =
                obstacle().cast<std::tuple<std::string, int, bool>>();
            return DeviceObstacle{.why = why, .device = device, .any_cuda = any_cuda};
          } catch (const py::error_already_set& e) {
            return DeviceObstacle{.why = e.what()};
          }
        };
        const py::gil_scoped_release release;
        const DeviceChoice choice =
            choose_device_window(c, required, never, ask,
                                 {.prefix = prefix, .required_by = required_by});
        return std::make_tuple(choice.device, choice.cuda_device);
      },
      py::arg("comm"), py::arg("required"), py::arg("never"), py::arg("obstacle"),
      py::arg("prefix"), py::arg("required_by"),
      "(device, cuda_device): paramwin::choose_device_window, collective over comm unless "
      "never (and not required); obstacle() returns device_obstacle's tuple.");
}

}  // namespace paramwin::python
