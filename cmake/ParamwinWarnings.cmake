include_guard(GLOBAL)
option(PARAMWIN_WERROR "Treat warnings on paramwin's own targets as errors" OFF)
function(paramwin_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wconversion -Wshadow
                                           -Wsign-conversion -Wnon-virtual-dtor)
  if(PARAMWIN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
