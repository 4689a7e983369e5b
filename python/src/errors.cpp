// C++ exceptions of paramwin/error.hpp raised as the Python classes of paramwin/errors.py,
// with the same messages (and DonorError::rank, MpiError::code/call as attributes);
// paramwin::TimeoutError is raised as paramwin.ReadTimeout.
#include "paramwin/checkpoint.hpp"
#include "paramwin/error.hpp"

#include "bindings.hpp"

namespace paramwin::python {
namespace {

// The classes live as long as the interpreter: leaked references, never released at exit
// (when the module's own objects may already be gone).
struct Classes {
  py::handle error, invalid_argument, layout_mismatch, donor, timeout, verification, mpi,
      checkpoint, evicted;
};

Classes& classes() {
  static Classes c;
  return c;
}

void raise(py::handle cls, const py::object& instance) {
  PyErr_SetObject(cls.ptr(), instance.ptr());
}

}  // namespace

void bind_errors(py::module_& /*m*/) {
  const py::module_ errors = py::module_::import("paramwin.errors");
  Classes& c = classes();
  c.error = py::object(errors.attr("Error")).release();
  c.invalid_argument = py::object(errors.attr("InvalidArgument")).release();
  c.layout_mismatch = py::object(errors.attr("LayoutMismatch")).release();
  c.donor = py::object(errors.attr("DonorError")).release();
  c.timeout = py::object(errors.attr("ReadTimeout")).release();
  c.verification = py::object(errors.attr("VerificationError")).release();
  c.mpi = py::object(errors.attr("MpiError")).release();
  c.checkpoint = py::object(errors.attr("CheckpointError")).release();
  c.evicted = py::object(errors.attr("EvictedError")).release();
  py::register_exception_translator([](std::exception_ptr p) {
    const Classes& k = classes();
    try {
      if (p) {
        std::rethrow_exception(p);
      }
    } catch (const TimeoutError& e) {
      raise(k.timeout, k.timeout(e.what(), e.rank()));
    } catch (const DonorError& e) {
      raise(k.donor, k.donor(e.what(), e.rank()));
    } catch (const InvalidArgument& e) {
      raise(k.invalid_argument, k.invalid_argument(e.what()));
    } catch (const LayoutMismatch& e) {
      raise(k.layout_mismatch, k.layout_mismatch(e.what()));
    } catch (const VerificationError& e) {
      raise(k.verification, k.verification(e.what()));
    } catch (const MpiError& e) {
      raise(k.mpi, k.mpi(e.what(), e.code(), e.call()));
    } catch (const CheckpointError& e) {
      raise(k.checkpoint, k.checkpoint(e.what()));
    } catch (const EvictedError& e) {
      raise(k.evicted, k.evicted(e.what()));
    } catch (const Error& e) {
      raise(k.error, k.error(e.what()));
    }
  });
}

}  // namespace paramwin::python
