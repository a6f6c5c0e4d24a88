# One INTERFACE target carries the warning flags, so no global CMAKE_CXX_FLAGS edits.
add_library(devicerace_warnings INTERFACE)
add_library(devicerace::warnings ALIAS devicerace_warnings)
target_compile_options(devicerace_warnings INTERFACE
    $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)
