// The extension module paramwin._core (see docs/python.md). The public API is the pure-Python
// package paramwin, which wraps these classes.
#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  namespace pw = paramwin::python;
  m.doc() = "paramwin's C++ core (use the paramwin package, not this module)";
  pw::import_mpi4py_api();
  pw::bind_errors(m);
  pw::bind_layout(m);
  pw::bind_records(m);
  pw::bind_window(m);
  pw::bind_agent(m);
#ifdef OPEN_MPI
  m.attr("mpi_vendor") = "Open MPI";
#elif defined(MPICH)
  m.attr("mpi_vendor") = "MPICH";
#else
  m.attr("mpi_vendor") = "unknown";
#endif
}
