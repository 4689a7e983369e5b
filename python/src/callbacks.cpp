// The C++ hooks of AgentOptions as Python callables (make_agent_options): every hook runs with
// the GIL taken only while the callable runs (step() releases it for its MPI work). An
// exception a callable raises propagates through the core as pybind11's error_already_set
// (the core leaves the agent consistent, see Agent::step) and reaches the caller as the
// Python exception the package's wrapper raised (paramwin.CallbackError naming the hook).
#include <pybind11/stl.h>

#include <algorithm>

#include "bindings.hpp"
#include "paramwin/error.hpp"
#include "paramwin/event.hpp"
#include "paramwin/explore.hpp"
#include "paramwin/selection_options.hpp"

namespace paramwin::python {

std::shared_ptr<py::object> hold(const py::object& fn) {
  return {new py::object(fn), [](py::object* p) {
            const py::gil_scoped_acquire gil;
            delete p;
          }};
}

namespace {

// One hook: its name (the keyword of paramwin.Agent) and how it goes into AgentOptions.
struct Hook {
  const char* name;
  void (*set)(AgentOptions& o, const py::object& fn);
};

// The explore function's context, copied into Python values: (rank, generation, before,
// donors, weights, seed); the Python wrapper makes a paramwin.ExploreContext of it.
py::tuple explore_context(const ExploreContext& c) {
  py::list donors;
  for (const Hyperparameters& d : c.donors) donors.append(hyper_to_dict(d));
  py::list weights;
  for (const double w : c.weights) weights.append(w);
  return py::make_tuple(c.rank, c.generation,
                        c.before != nullptr ? hyper_to_dict(*c.before) : py::dict(), donors,
                        weights, c.seed);
}

const Hook kHooks[] = {
    {"on_rebirth",
     [](AgentOptions& o, const py::object& fn) {
       o.on_rebirth = [f = hold(fn)](const StepEvent& event, std::span<const LayerRef>) {
         const py::gil_scoped_acquire gil;
         (*f)(event);
       };
     }},
    {"reset",
     [](AgentOptions& o, const py::object& fn) {
       o.reset = [f = hold(fn)](std::span<const LayerRef>, std::uint64_t seed) {
         const py::gil_scoped_acquire gil;
         (*f)(seed);
       };
     }},
    {"custom_trigger",
     [](AgentOptions& o, const py::object& fn) {
       o.triggers.custom = [f = hold(fn)](const TriggerContext& c) {
         const py::gil_scoped_acquire gil;
         return (*f)(c).cast<bool>();
       };
     }},
    {"custom_explore",
     [](AgentOptions& o, const py::object& fn) {
       // Called with (context tuple, values dict); returns the new values (a dict of some
       // names) or None (unchanged).
       o.explore.custom = [f = hold(fn)](const ExploreContext& c, Hyperparameters& hyper) {
         const py::gil_scoped_acquire gil;
         const py::object out = (*f)(explore_context(c), hyper_to_dict(hyper));
         hyper = hyper_from_dict(hyper, out);
       };
     }},
    {"custom_selection",
     [](AgentOptions& o, const py::object& fn) {
       // Called with a SelectionContext; returns the donor ranks (a list of candidates' ranks;
       // empty: no donor now, the death stays pending).
       o.selection.custom = [f = hold(fn)](const SelectionContext& c) {
         const py::gil_scoped_acquire gil;
         return (*f)(c).cast<std::vector<int>>();
       };
     }},
    {"prepare_params",
     [](AgentOptions& o, const py::object& fn) {
       o.prepare_params = [f = hold(fn)]() {
         const py::gil_scoped_acquire gil;
         (*f)();
       };
     }},
};

}  // namespace

std::vector<std::string> hook_names() {
  std::vector<std::string> out;
  for (const Hook& h : kHooks) out.emplace_back(h.name);
  return out;
}

AgentOptions make_agent_options(const std::map<std::string, std::string, std::less<>>& config,
                                const py::dict& hooks) {
  AgentOptions o = parse_agent_options(config);
  for (const auto& [key, fn] : hooks) {
    const auto name = key.cast<std::string>();
    const Hook* hook = std::find_if(std::begin(kHooks), std::end(kHooks),
                                    [&](const Hook& h) { return name == h.name; });
    if (hook == std::end(kHooks)) {
      std::string valid;
      for (const Hook& h : kHooks) valid.append(valid.empty() ? "" : ", ").append(h.name);
      throw InvalidArgument("paramwin: unknown hook '" + name + "' (valid: " + valid + ")");
    }
    if (!fn.is_none()) {
      hook->set(o, py::reinterpret_borrow<py::object>(fn));
      // A selection function chooses the donors unless the options named another kind
      // (which validation then refuses), as a custom trigger is enabled by being set.
      if (name == "custom_selection" && config.find("selection") == config.end()) {
        o.selection.kind = SelectionKind::custom;
      }
    }
  }
  return o;
}

}  // namespace paramwin::python
