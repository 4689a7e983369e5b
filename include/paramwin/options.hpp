#pragma once
/// @file options.hpp
/// Window options (window_options.hpp) and pull options and results (pull.hpp) together,
/// for code that includes this header by its former name.

#include "paramwin/pull.hpp"            // IWYU pragma: export
#include "paramwin/window_options.hpp"  // IWYU pragma: export
