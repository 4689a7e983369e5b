include_guard(GLOBAL)
option(PARAMWIN_WERROR "Treat warnings on paramwin's own targets as errors" OFF)
function(paramwin_warnings target)
  # C++ sources only: nvcc (CUDA sources, PARAMWIN_WITH_CUDA) takes other flags.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wconversion -Wshadow -Wsign-conversion
                              -Wnon-virtual-dtor>)
  if(PARAMWIN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()
