#pragma once
/// @file module.hpp
/// LibTorch adapter, part 1: a torch::nn::Module's tensors as a paramwin Layout, published
/// into and adopted from a ParameterWindow, optionally living in the window's memory.
///
/// Nothing here is part of the core library: link paramwin::torch.

#include <torch/nn/module.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "paramwin/layout.hpp"
#include "paramwin/options.hpp"
#include "paramwin/window.hpp"

namespace paramwin::torch {

/// Which tensors of a module are exchanged, and how.
struct ModuleOptions {
  /// Also exchange the module's registered floating-point buffers (e.g. batch-norm running
  /// mean and variance), after the parameters. Integer and boolean buffers (e.g.
  /// num_batches_tracked) are never exchanged: they are skipped and listed in
  /// ModuleTensors::skipped.
  bool buffers = false;
  /// Copy every tensor through a host (CPU) tensor even when it already is on the CPU: the
  /// path device tensors always take, forced so that it can be tested without a GPU.
  bool stage_through_host = false;
};

/// The tensors of a module that paramwin exchanges, in layout order (parameters in
/// named_parameters() order, 0-dim ones included, then the selected buffers).
struct ModuleTensors {
  std::vector<std::string> names;        ///< fully qualified names ("fc1.weight")
  std::vector<::torch::Tensor> tensors;  ///< shallow handles to the module's tensors
  std::vector<bool> is_buffer;           ///< per tensor: a buffer rather than a parameter
  Layout layout;                         ///< names, shapes and dtypes of the tensors
  /// Tensors left out, each with the reason ("bn.num_batches_tracked: Long buffer, not
  /// exchanged (integer)", "conv.bias: undefined").
  std::vector<std::string> skipped;
};

/// The paramwin dtype of a torch scalar type: float32, float64, bfloat16 or float16.
/// Throws InvalidArgument naming @p what (e.g. "parameter 'w'") and the type otherwise.
[[nodiscard]] DType dtype_of(::torch::ScalarType type, const std::string& what);

/// The exchanged tensors of @p module and their layout. Throws InvalidArgument naming the
/// parameter for a parameter of an unsupported dtype (integer, complex, ...) or a sparse one.
[[nodiscard]] ModuleTensors collect(const ::torch::nn::Module& module,
                                    const ModuleOptions& options = {});

/// The layout of @p module's exchanged tensors (collect(module, options).layout): pass it to
/// the ParameterWindow (or Agent) constructor.
[[nodiscard]] Layout layout_of(const ::torch::nn::Module& module,
                               const ModuleOptions& options = {});

/// Checks that @p tensors can be exchanged through @p window: the same names, shapes and
/// dtypes in the same order as the window's layout, each tensor contiguous and strided.
/// Throws InvalidArgument naming the first offending tensor (e.g. a parameter whose shape
/// changed since the window was created).
void check_against(const ModuleTensors& tensors, const Layout& window_layout);

/// Publishes @p module's exchanged tensors as the window's next version (snapshot
/// exposure), or, for a module bound with bind_live(), just advances the version. Tensors
/// on a device, or all of them with ModuleOptions::stage_through_host, are copied to host
/// tensors first.
PublishResult publish(Window& window, const ::torch::nn::Module& module,
                      const ModuleOptions& options = {});

/// Pulls @p donors through @p window and writes the result into @p module's exchanged
/// tensors, under torch::NoGradGuard, bumping their autograd version counters (a backward
/// through a graph recorded before the adoption then fails instead of computing wrong
/// gradients). Transactional like ParameterWindow::pull: on an exception the module is
/// unchanged. Device (or forced) tensors are staged through host copies.
PullResult adopt(Window& window, std::span<const int> donors, ::torch::nn::Module& module,
                 const PullOptions& pull_options = {}, const ModuleOptions& options = {});

/// Zero-copy mode, for a window created with Exposure::live: copies @p module's exchanged
/// tensors into the window memory, then makes each tensor use that memory (set_data under
/// NoGradGuard; the tensor objects, hence optimizer references, stay the same). Afterwards
/// training updates the window directly and publish() only advances the version. The
/// tensors must be CPU tensors (InvalidArgument otherwise) and ModuleOptions::
/// stage_through_host must be off. Call unbind_live() before the window is destroyed.
void bind_live(Window& window, ::torch::nn::Module& module, const ModuleOptions& options = {});

/// Gives every exchanged tensor of @p module its own memory again (a copy of the current
/// values), so that the module outlives the window it was bound to.
void unbind_live(::torch::nn::Module& module, const ModuleOptions& options = {});

/// True when every exchanged tensor of @p module lives in @p window's live memory.
[[nodiscard]] bool is_bound_live(Window& window, const ::torch::nn::Module& module,
                                 const ModuleOptions& options = {});

}  // namespace paramwin::torch
