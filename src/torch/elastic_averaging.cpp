// LibTorch adapter: torch::ElasticAveragingAgent, the core's ElasticAveragingAgent driven by a
// module's tensors (detail::ModuleLayers, as torch::AveragingAgent's).
#include "paramwin/torch/elastic_averaging.hpp"

#include <mpi.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../mpi/agree.hpp"
#include "module_layers.hpp"
#include "paramwin/error.hpp"

namespace paramwin::torch {

struct ElasticAveragingAgent::Impl {
  detail::ModuleLayers layers;
  std::unique_ptr<paramwin::ElasticAveragingAgent> elastic;

  Impl(::torch::nn::Module& m, ::torch::optim::Optimizer* opt, TorchAveragingOptions o)
      : layers(m, opt, std::move(o)) {}

  void create(MPI_Comm world, AveragingOptions averaging, MembershipOptions membership) {
    std::exception_ptr error;
    Layout layout;
    try {
      layout = layers.prepare(averaging.window, "ElasticAveragingAgent");
    } catch (...) {
      error = std::current_exception();
    }
    // A process's error on every process, before the core's collective creation (which checks
    // the options against every slot and the layouts on every process itself).
    paramwin::detail::agree_or_rethrow<InvalidArgument>(world, error);
    elastic = std::make_unique<paramwin::ElasticAveragingAgent>(world, std::move(layout),
                                                                std::move(averaging),
                                                                std::move(membership));
  }
};

ElasticAveragingAgent::ElasticAveragingAgent(MPI_Comm world, ::torch::nn::Module& module,
                                             AveragingOptions options,
                                             TorchAveragingOptions torch_options,
                                             MembershipOptions membership)
    : impl_(std::make_unique<Impl>(module, nullptr, std::move(torch_options))) {
  impl_->create(world, std::move(options), std::move(membership));
}

ElasticAveragingAgent::ElasticAveragingAgent(MPI_Comm world, ::torch::nn::Module& module,
                                             ::torch::optim::Optimizer& optimizer,
                                             AveragingOptions options,
                                             TorchAveragingOptions torch_options,
                                             MembershipOptions membership)
    : impl_(std::make_unique<Impl>(module, &optimizer, std::move(torch_options))) {
  impl_->create(world, std::move(options), std::move(membership));
}

ElasticAveragingAgent::ElasticAveragingAgent(ElasticAveragingAgent&&) noexcept = default;
ElasticAveragingAgent& ElasticAveragingAgent::operator=(ElasticAveragingAgent&&) noexcept = default;
ElasticAveragingAgent::~ElasticAveragingAgent() = default;

ElasticAveragingAgent::Impl& ElasticAveragingAgent::live() const {
  if (!impl_) throw Error("paramwin: use of a torch::ElasticAveragingAgent that was moved from");
  return *impl_;
}

bool ElasticAveragingAgent::wait_for_slot() { return live().elastic->wait_for_slot(); }

AveragingRound ElasticAveragingAgent::step() {
  Impl& impl = live();
  // A module that no longer fits is this process's error (nothing collective runs here):
  // thrown before the membership or the round changed anything.
  impl.layers.bind();
  impl.layers.stage_in();
  AveragingRound round = impl.elastic->step(impl.layers.refs());
  if (round.applied) {
    // A join takes over the members' training: their mixed Adam step count with their
    // moments; the other rounds keep the rank's own (its bias correction follows its steps).
    impl.layers.take_layers(/*keep_own_counts=*/round.kind != RoundKind::joined);
  }
  return round;
}

void ElasticAveragingAgent::resign() { live().elastic->resign(); }
void ElasticAveragingAgent::finish() {
  Impl& impl = live();
  // The module's parameters, republished in a new epoch's window while this member waits (a
  // slot that dies meanwhile is filled too).
  impl.layers.bind();
  impl.layers.stage_in();
  impl.elastic->finish(impl.layers.refs());
}
bool ElasticAveragingAgent::member() const { return live().elastic->member(); }
std::int64_t ElasticAveragingAgent::resume_iteration() const {
  return live().elastic->resume_iteration();
}
const Membership& ElasticAveragingAgent::membership() const {
  return std::as_const(*live().elastic).membership();
}
paramwin::ElasticAveragingAgent& ElasticAveragingAgent::elastic() { return *live().elastic; }
::torch::nn::Module& ElasticAveragingAgent::module() { return live().layers.module(); }
const std::vector<std::string>& ElasticAveragingAgent::skipped() const {
  return live().layers.skipped();
}
const TorchStagingStats& ElasticAveragingAgent::staging_stats() const {
  return live().layers.staging_stats();
}
std::uint64_t ElasticAveragingAgent::optimizer_states_mixed() const {
  return live().layers.states_mixed();
}

}  // namespace paramwin::torch
