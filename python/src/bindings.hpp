#pragma once
// Internal header of the Python extension paramwin._core: the pieces each binding unit adds
// to the module, and the conversions they share. Not installed.

#include <mpi.h>
#include <pybind11/pybind11.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "paramwin/agent_options.hpp"
#include "paramwin/averaging.hpp"
#include "paramwin/error.hpp"
#include "paramwin/groups.hpp"
#include "paramwin/hyper.hpp"
#include "paramwin/layer_ref.hpp"
#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"

namespace paramwin::python {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_layout(py::module_& m);
void bind_records(py::module_& m);
void bind_window(py::module_& m);
void bind_agent(py::module_& m);
void bind_enums(py::module_& m);
void bind_groups(py::module_& m);
void bind_group_agent(py::module_& m);
void bind_comm(py::module_& m);
void bind_averaging(py::module_& m);
void bind_elastic(py::module_& m);

/// A hyperparameter set as a dict name -> int (int64) or float (float64).
py::dict hyper_to_dict(const Hyperparameters& h);
/// @p base with the values of the dict @p values (name -> number) set; None: @p base.
/// InvalidArgument for an undeclared name, a non-number or a non-integral int64 value.
Hyperparameters hyper_from_dict(Hyperparameters base, const py::handle& values);

/// The options of an agent: @p config (the key/value form, parsed by parse_agent_options)
/// plus the Python callables of @p hooks (a dict hook name -> callable or None; the names are
/// those of hook_names()). Each callable runs with the GIL taken, only while it runs.
/// InvalidArgument for an unknown hook name.
AgentOptions make_agent_options(const std::map<std::string, std::string, std::less<>>& config,
                                const py::dict& hooks);
/// The hook names make_agent_options takes, in order.
std::vector<std::string> hook_names();

/// A Python callable that C++ code running without the GIL may copy and destroy anywhere:
/// the deleter takes the GIL.
std::shared_ptr<py::object> hold(const py::object& fn);

/// AveragingOptions from the Python wrapper's dict (paramwin/averaging.py's _options): the
/// topology keys ("topology", "k", "seed", "neighbours", "custom") and one key per option;
/// InvalidArgument for any other key.
AveragingOptions averaging_options(const py::dict& options);

/// "auto" (or "automatic"), "shm" or "rma"; InvalidArgument listing them otherwise.
Transport parse_transport(std::string_view text);

/// Sets @p o's memory (parse_enum<Memory>: "host" or "cuda") and cuda_device (an ordinal, or
/// -1: the device current on the creating thread); the window checks them at creation.
void set_memory(WindowOptions& o, std::string_view memory, int cuda_device);

/// Sets @p o's liveness bounds (LivenessOptions) where given; the window checks them at
/// creation (InvalidArgument for a negative or non-finite value).
void set_liveness(WindowOptions& o, std::optional<double> suspect_seconds,
                  std::optional<double> suspect_beats);

/// Imports mpi4py's C API (and with it mpi4py.MPI, which initialises MPI).
void import_mpi4py_api();

/// The MPI_Comm inside an mpi4py communicator; None means MPI_COMM_WORLD. Raises TypeError
/// for anything else.
MPI_Comm comm_from(const py::handle& comm);
/// An mpi4py communicator over @p comm (not owned: the Python object never frees it), or
/// None for MPI_COMM_NULL.
py::object comm_to_py(MPI_Comm comm);

/// AgentGroups with an explicit close() (paramwin._core.AgentGroups): its communicators are
/// freed collectively, so Python frees them at a call every rank makes, not whenever the
/// collector runs.
struct PyGroups {
  std::unique_ptr<AgentGroups> groups;

  /// The groups; InvalidArgument once closed.
  [[nodiscard]] const AgentGroups& get() const {
    if (!groups) {
      throw InvalidArgument("paramwin: the AgentGroups is closed");
    }
    return *groups;
  }
};

/// Python's layer descriptors, turned into layer references once the GIL is released.
///
/// Python passes one tuple per layer: (name or None, address, dtype name, shape tuple,
/// device), device true for CUDA memory given in place to a device window (a LayerRef with
/// paramwin::device_memory; the window checks the memory), false (or left out) for host
/// memory. The pure-Python side (paramwin/_tensors.py) makes them from numpy arrays and
/// torch tensors and keeps those alive for the call. The names are owned here because
/// LayerRef holds a string_view.
class LayerList {
 public:
  /// Reads @p descriptors (a sequence of tuples) and checks each against @p layout: the
  /// layer exists (by name, or by position for unnamed ones) and the shape is the layer's.
  /// Throws InvalidArgument naming the layer, before any MPI work.
  LayerList(const py::handle& descriptors, const Layout& layout);

  /// Writable references (for a pull or a step).
  [[nodiscard]] const std::vector<LayerRef>& refs() const noexcept { return refs_; }
  /// Read-only references (for a publish).
  [[nodiscard]] const std::vector<ConstLayerRef>& const_refs() const noexcept {
    return const_refs_;
  }

 private:
  std::vector<std::string> names_;
  std::vector<LayerRef> refs_;
  std::vector<ConstLayerRef> const_refs_;
};

}  // namespace paramwin::python
