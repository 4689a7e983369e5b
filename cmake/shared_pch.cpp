// The translation unit that compiles a shared precompiled header of the test suite
// (cmake/ParamwinSharedPch.cmake); it has no code of its own.
