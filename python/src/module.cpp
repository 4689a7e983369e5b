// The extension module paramwin._core (see docs/python.md). The public API is the pure-Python
// package paramwin, which wraps these classes. paramwin/__init__.py checks, before importing
// this module, that the running mpi4py's MPI is the one it was built with (_build_info.py).
#include "bindings.hpp"

#ifndef PARAMWIN_VERSION
#error "PARAMWIN_VERSION is set by python/CMakeLists.txt (the project's version)"
#endif

PYBIND11_MODULE(_core, m) {
  namespace pw = paramwin::python;
  m.doc() = "paramwin's C++ core (use the paramwin package, not this module)";
  pw::import_mpi4py_api();
  pw::bind_errors(m);
  pw::bind_enums(m);
  pw::bind_layout(m);
  pw::bind_records(m);
  pw::bind_window(m);
  pw::bind_agent(m);
  pw::bind_groups(m);
  pw::bind_group_agent(m);
  pw::bind_comm(m);
  pw::bind_averaging(m);
  pw::bind_elastic(m);
  m.attr("version") = PARAMWIN_VERSION;
#ifdef OPEN_MPI
  m.attr("mpi_vendor") = "Open MPI";
  m.attr("mpi_version") =
      pybind11::make_tuple(OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH)
  m.attr("mpi_vendor") = "MPICH";
  m.attr("mpi_version") = MPICH_VERSION;
#else
  m.attr("mpi_vendor") = "unknown";
  m.attr("mpi_version") = "";
#endif
}
