# `docs` target: Doxygen over include/paramwin with docs/Doxyfile (warnings for undocumented
# public entities), HTML in <build>/docs/html. Only when doxygen is found; not part of `all`.
include_guard(GLOBAL)

find_package(Doxygen QUIET)
if(DOXYGEN_FOUND)
  # The same configuration as `doxygen docs/Doxyfile` from the source tree, with absolute
  # paths and the output in the build tree.
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/Doxyfile @ONLY CONTENT
"@INCLUDE = ${PROJECT_SOURCE_DIR}/docs/Doxyfile
PROJECT_NUMBER = ${PROJECT_VERSION}
INPUT = ${PROJECT_SOURCE_DIR}/include/paramwin
STRIP_FROM_PATH = ${PROJECT_SOURCE_DIR}/include
STRIP_FROM_INC_PATH = ${PROJECT_SOURCE_DIR}/include
OUTPUT_DIRECTORY = ${PROJECT_BINARY_DIR}/docs
")
  add_custom_target(docs
    COMMAND Doxygen::doxygen ${PROJECT_BINARY_DIR}/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Doxygen: API reference in ${PROJECT_BINARY_DIR}/docs/html"
    VERBATIM)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/Doxyfile)
else()
  message(STATUS "paramwin: doxygen not found, no `docs` target")
endif()
