# Parallel HDF5 and xxHash for population checkpoints (docs/checkpoints.md).
#
# Debian installs one parallel HDF5 per MPI side by side: libhdf5-mpich-dev under
# /usr/lib/x86_64-linux-gnu/hdf5/mpich (headers /usr/include/hdf5/mpich) and libhdf5-openmpi-dev
# under .../hdf5/openmpi. The one of the MPI being built (PARAMWIN_MPI) is used; an HDF5 built
# with the other MPI (PARAMWIN_HDF5_ROOT pointing at it, or a serial HDF5) is refused here, since
# two MPI libraries in one process fail at run time in obscure ways.
#
# Sets PARAMWIN_HDF5_INCLUDE_DIR, PARAMWIN_HDF5_LIBRARY, PARAMWIN_XXHASH_INCLUDE_DIR and
# PARAMWIN_XXHASH_LIBRARY (full paths: they travel into the installed export as they are).
include_guard(GLOBAL)

if(PARAMWIN_MPI STREQUAL "MPICH")
  set(_pw_h5_flavour mpich)
  set(_pw_h5_other openmpi)
  set(_pw_h5_package libhdf5-mpich-dev)
else()
  set(_pw_h5_flavour openmpi)
  set(_pw_h5_other mpich)
  set(_pw_h5_package libhdf5-openmpi-dev)
endif()
set(PARAMWIN_HDF5_ROOT "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/hdf5/${_pw_h5_flavour}"
    CACHE PATH "Directory of the parallel HDF5 library built with this build's MPI")

find_library(PARAMWIN_HDF5_LIBRARY NAMES hdf5 PATHS ${PARAMWIN_HDF5_ROOT}
             PATH_SUFFIXES lib NO_DEFAULT_PATH)
find_path(PARAMWIN_HDF5_INCLUDE_DIR NAMES hdf5.h H5FDmpio.h
          PATHS ${PARAMWIN_HDF5_ROOT}/include /usr/include/hdf5/${_pw_h5_flavour} NO_DEFAULT_PATH)
if(NOT PARAMWIN_HDF5_LIBRARY OR NOT PARAMWIN_HDF5_INCLUDE_DIR)
  message(FATAL_ERROR "paramwin: the parallel HDF5 of ${PARAMWIN_MPI} was not found under "
          "PARAMWIN_HDF5_ROOT=${PARAMWIN_HDF5_ROOT} (library ${PARAMWIN_HDF5_LIBRARY}, headers "
          "${PARAMWIN_HDF5_INCLUDE_DIR}); install ${_pw_h5_package} (scripts/setup.sh does).")
endif()

# The library's settings and its configuration header name the MPI it was built with.
get_filename_component(_pw_h5_libdir "${PARAMWIN_HDF5_LIBRARY}" DIRECTORY)
set(_pw_h5_settings "")
if(EXISTS "${_pw_h5_libdir}/libhdf5.settings")
  file(STRINGS "${_pw_h5_libdir}/libhdf5.settings" _pw_h5_settings REGEX "C Compiler:|Parallel HDF5:")
endif()
file(STRINGS "${PARAMWIN_HDF5_INCLUDE_DIR}/H5pubconf.h" _pw_h5_parallel REGEX "define H5_HAVE_PARALLEL 1")
if(NOT _pw_h5_parallel)
  message(FATAL_ERROR "paramwin: ${PARAMWIN_HDF5_INCLUDE_DIR} is a serial HDF5: checkpoints need "
          "the parallel HDF5 of ${PARAMWIN_MPI} (${_pw_h5_package}).")
endif()
foreach(_pw_path IN ITEMS "${PARAMWIN_HDF5_LIBRARY}" "${PARAMWIN_HDF5_INCLUDE_DIR}" "${_pw_h5_settings}")
  if(_pw_path MATCHES "[/.]${_pw_h5_other}([/ .]|$)")
    message(FATAL_ERROR "paramwin: this build uses ${PARAMWIN_MPI}, but the HDF5 found "
            "(${PARAMWIN_HDF5_LIBRARY}, headers ${PARAMWIN_HDF5_INCLUDE_DIR}) was built with "
            "${_pw_h5_other}: one process cannot hold two MPIs. Install ${_pw_h5_package} and "
            "point PARAMWIN_HDF5_ROOT at it, or configure a build directory for the other MPI.")
  endif()
endforeach()

find_library(PARAMWIN_XXHASH_LIBRARY NAMES xxhash)
find_path(PARAMWIN_XXHASH_INCLUDE_DIR NAMES xxhash.h)
if(NOT PARAMWIN_XXHASH_LIBRARY OR NOT PARAMWIN_XXHASH_INCLUDE_DIR)
  message(FATAL_ERROR "paramwin: xxHash (checkpoint checksums) was not found; install "
          "libxxhash-dev (scripts/setup.sh does).")
endif()
message(STATUS "paramwin: parallel HDF5 ${PARAMWIN_HDF5_LIBRARY}, xxHash ${PARAMWIN_XXHASH_LIBRARY}")
