# Settings for ftopt's own targets (tests, examples, benchmarks); never pushed onto users.

find_package(Threads REQUIRED)

# Strict warnings on our code only. LibTorch's headers are system headers for us.
add_library(ftopt_strict INTERFACE)
target_compile_options(ftopt_strict INTERFACE -Wall -Wextra -Wpedantic -Werror
  -Wno-unused-parameter    # LibTorch's virtual interfaces make unused parameters routine
  -Wno-missing-field-initializers)  # g++ 12 warns on designated initializers that skip a field
target_link_libraries(ftopt_strict INTERFACE ftopt::ftopt Threads::Threads)

# One precompiled <torch/torch.h> shared by every target of ours (see docs/build.md).
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/ftopt_pch.cpp "// precompiled header carrier\n")
add_library(ftopt_pch OBJECT ${CMAKE_CURRENT_BINARY_DIR}/ftopt_pch.cpp)
target_link_libraries(ftopt_pch PRIVATE ftopt_strict)
target_precompile_headers(ftopt_pch PRIVATE <torch/torch.h>)

# ftopt_target(<name>): strict warnings and the shared PCH for one of our targets.
function(ftopt_target name)
  target_link_libraries(${name} PRIVATE ftopt_strict)
  target_precompile_headers(${name} REUSE_FROM ftopt_pch)
endfunction()

# ftopt_syntax_check(<name>): <name>'s sources are compiled as a check only, parsed and their
# templates instantiated, no code generated (cmake/syntax_only.sh, a compiler launcher that also
# leaves an empty object file, so the check reruns only when what it read changes).
function(ftopt_syntax_check name)
  set_target_properties(${name} PROPERTIES CXX_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
endfunction()
