// The translation unit that compiles the shared precompiled <torch/torch.h>
// (cmake/ParamwinTorchPch.cmake); it has no code of its own.
