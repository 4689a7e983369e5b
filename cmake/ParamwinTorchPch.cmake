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
include(ParamwinWarnings)
option(PARAMWIN_TORCH_PCH "Precompile <torch/torch.h> once for the LibTorch tests" ON)
function(paramwin_torch_pch target)
  if(NOT PARAMWIN_TORCH_PCH)
    return()
  endif()
  if(NOT TARGET paramwin_torch_pch)
    # Its users are executables of tests/: their flags (the warnings, no -fPIC). CMake adds
    # -Winvalid-pch, so a header that cannot be used is a warning (an error with -Werror).
    add_library(paramwin_torch_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
    target_link_libraries(paramwin_torch_pch PRIVATE paramwin::torch)
    set_target_properties(paramwin_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    paramwin_warnings(paramwin_torch_pch)
    target_precompile_headers(paramwin_torch_pch PRIVATE <torch/torch.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM paramwin_torch_pch)
endfunction()
