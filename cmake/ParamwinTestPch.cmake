# One precompiled header for the test suite's GoogleTest programs: <mpi.h>, <gtest/gtest.h>,
# <Kokkos_Core.hpp> and <paramwin/paramwin.hpp>, which nearly every test includes and which
# cost about 4 s of each test file's compile before its own code (the umbrella header alone
# 3.5 s, Kokkos 2.3 of them) on the 2-core development VM (2026-12-03: 4.8 -> 1.2 s for
# tests/reliability/membership_options_mpi_test.cpp, 11.7 -> 7.6 s for
# tests/averaging/averaging_mpi_test.cpp). The CI compiles the tests three times (MPICH, Open
# MPI, sanitized): docs/reliability.md "CI time". Tests only, like ParamwinTorchPch.cmake: the
# header is made with the tests' flags (-O1 in a Release build, tests/CMakeLists.txt), and GCC
# uses it only with those (CMake adds -Winvalid-pch, an error under -Werror, so a test whose
# flags differ fails to build rather than silently parsing everything). The library, the
# examples and the tools compile without it, as a user's program does, and the public headers'
# stand-alone compile (ParamwinHeaderCheck.cmake) checks that each header includes what it uses.
#   paramwin_test_pch(<target>)   the target's C++ sources use the shared precompiled header
# paramwin_add_mpi_test and paramwin_add_test call it; the LibTorch tests use the
# <torch/torch.h> one instead (paramwin_add_mpi_test with LIBS paramwin::torch).
# PARAMWIN_TEST_PCH=OFF compiles the tests without it (the same programs; about 200 MB less in
# the build directory).
include_guard(GLOBAL)
include(ParamwinSharedPch)
option(PARAMWIN_TEST_PCH "Precompile the test programs' common headers once" ON)
function(paramwin_test_pch target)
  if(PARAMWIN_TEST_PCH)
    paramwin_shared_pch(${target} paramwin_test_pch LIBS paramwin::paramwin GTest::gtest
                        HEADERS <mpi.h> <gtest/gtest.h> <Kokkos_Core.hpp> <paramwin/paramwin.hpp>)
  endif()
endfunction()
