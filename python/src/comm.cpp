// mpi4py communicators through mpi4py's C API (mpi4py/mpi4py.h, imported in module.cpp).
#include <mpi4py/mpi4py.h>

#include "bindings.hpp"

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

}  // namespace paramwin::python
