// The translation unit that compiles the shared precompiled header of the GoogleTest programs
// (cmake/ParamwinTestPch.cmake); it has no code of its own.
