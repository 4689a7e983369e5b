# Debian's libtrilinos-kokkos-dev ships a Kokkos::kokkos target whose include directory is
# /usr/lib/include (it does not exist); the headers live in /usr/include/trilinos.
# Point the imported target at the directory that really holds Kokkos_Core.hpp.
include_guard(GLOBAL)
if(NOT TARGET Kokkos::kokkos)
  return()
endif()
get_target_property(_pw_kokkos_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_pw_kokkos_ok FALSE)
foreach(_dir IN LISTS _pw_kokkos_inc)
  if(EXISTS "${_dir}/Kokkos_Core.hpp")
    set(_pw_kokkos_ok TRUE)
  endif()
endforeach()
if(NOT _pw_kokkos_ok)
  find_path(PARAMWIN_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp
    HINTS ${_pw_kokkos_inc} /usr/include/trilinos /usr/local/include/trilinos
    PATH_SUFFIXES trilinos)
  if(NOT PARAMWIN_KOKKOS_INCLUDE_DIR)
    message(FATAL_ERROR "Kokkos::kokkos has no usable include directory (${_pw_kokkos_inc}) "
                        "and Kokkos_Core.hpp was not found; install libtrilinos-kokkos-dev")
  endif()
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${PARAMWIN_KOKKOS_INCLUDE_DIR}")
  message(STATUS "paramwin: repaired Kokkos::kokkos include directory -> ${PARAMWIN_KOKKOS_INCLUDE_DIR}")
endif()
