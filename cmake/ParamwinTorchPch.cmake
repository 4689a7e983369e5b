# One precompiled <torch/torch.h> for the test suite's LibTorch programs: parsing LibTorch's
# umbrella header is close to half of each such file's compile (46 s -> 26 s for
# tests/torch/torch_adapter_errors_mpi_test.cpp on the 2-core development VM, 2026-12-02), and
# the suite compiles eight of them in each build that has the adapter. Tests only: the header is
# precompiled with the tests' flags (-O1 in a Release build, tests/CMakeLists.txt), and GCC
# uses a precompiled header only with the flags it was made with. Not part of the installed
# package: a user's program includes the adapter's headers as any other.
#   paramwin_torch_pch(<target>)   the target's C++ sources use the shared precompiled header
# PARAMWIN_TORCH_PCH=OFF compiles them without it (the same program; about 630 MB less in the
# build directory).
include_guard(GLOBAL)
include(ParamwinSharedPch)
option(PARAMWIN_TORCH_PCH "Precompile <torch/torch.h> once for the LibTorch tests" ON)
function(paramwin_torch_pch target)
  if(PARAMWIN_TORCH_PCH)
    paramwin_shared_pch(${target} paramwin_torch_pch LIBS paramwin::torch HEADERS <torch/torch.h>)
  endif()
endfunction()
