# paramwin_shared_pch(<target> <pch target> LIBS <libraries...> HEADERS <headers...>)
# The target's C++ sources use one precompiled header shared by every target that names the
# same <pch target>: made once, in an object library of that name linked to LIBS (their
# include paths and definitions), with the flags of the directory of its first user. Its
# users are executables of tests/: their flags (the warnings, no -fPIC). CMake adds
# -Winvalid-pch, so a header that a user cannot use (other flags) is a warning, an error with
# -Werror: the build fails rather than silently parsing every header again.
# ParamwinTestPch.cmake and ParamwinTorchPch.cmake say which headers and why.
include_guard(GLOBAL)
include(ParamwinWarnings)
function(paramwin_shared_pch target pch)
  cmake_parse_arguments(ARG "" "" "LIBS;HEADERS" ${ARGN})
  if(NOT TARGET ${pch})
    add_library(${pch} OBJECT ${PROJECT_SOURCE_DIR}/cmake/shared_pch.cpp)
    target_link_libraries(${pch} PRIVATE ${ARG_LIBS})
    set_target_properties(${pch} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    paramwin_warnings(${pch})
    target_precompile_headers(${pch} PRIVATE ${ARG_HEADERS})
  endif()
  target_precompile_headers(${target} REUSE_FROM ${pch})
endfunction()
