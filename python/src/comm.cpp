// mpi4py communicators through mpi4py's C API (mpi4py/mpi4py.h, imported in module.cpp), and
// the library's agreement over one (paramwin/agreement.hpp) for the Python package's
// collective choices.
#include <mpi4py/mpi4py.h>

#include <string>

#include "bindings.hpp"
#include "paramwin/agreement.hpp"

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
}

}  // namespace paramwin::python
