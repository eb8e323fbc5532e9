# Every public header compiles on its own, without the shared PCH: built by the test
# `headers.self_contained` (not part of the default build). cmake/header_chains.py groups the
# headers into chains in which each header includes all the ones before it, so that one source
# per chain checks each header as strictly as a source of its own would, with one parse of
# LibTorch's headers per chain, not one per header. A chain whose first header includes one of
# LibTorch's largest headers (torch/nn/module.h, ATen/ATen.h, ATen/core/Tensor.h) starts from
# that header precompiled, which checks it as strictly (the script says why). The sources are
# parsed and their templates instantiated, never compiled to code (ftopt_syntax_check; a chain
# is checked again only when a header it reads changes). The test first verifies that the chains
# written here still hold for the headers as they are now (else: re-run cmake).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(ftopt_chains_dir ${CMAKE_BINARY_DIR}/header_chains)
set(ftopt_chains ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/header_chains.py)
# A header added or removed re-runs cmake, and with it the grouping.
file(GLOB_RECURSE ftopt_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/*.hpp)
execute_process(COMMAND ${ftopt_chains} write ${PROJECT_SOURCE_DIR}/include ${ftopt_chains_dir}
                COMMAND_ERROR_IS_FATAL ANY)
add_custom_target(ftopt_header_check)
# tier -> the LibTorch header its chains start from (header_chains.py's PRECOMPILED); plain: none.
foreach(tier_header IN ITEMS "plain|" "module|torch/nn/module.h" "aten|ATen/ATen.h" "tensor|ATen/core/Tensor.h")
  string(REPLACE "|" ";" tier_header "${tier_header}")
  list(GET tier_header 0 tier)
  file(GLOB sources ${ftopt_chains_dir}/chain_${tier}_*.cpp)
  if(NOT sources)
    continue()
  endif()
  add_library(ftopt_header_check_${tier} OBJECT EXCLUDE_FROM_ALL ${sources})
  target_link_libraries(ftopt_header_check_${tier} PRIVATE ftopt_strict)
  ftopt_syntax_check(ftopt_header_check_${tier})
  if(NOT tier STREQUAL "plain")
    list(GET tier_header 1 header)
    target_precompile_headers(ftopt_header_check_${tier} PRIVATE <${header}>)
  endif()
  add_dependencies(ftopt_header_check ftopt_header_check_${tier})
endforeach()
if(FTOPT_BUILD_TESTS)
  add_test(NAME headers.self_contained
    COMMAND sh -c "\"$<JOIN:${ftopt_chains},\" \">\" verify '${PROJECT_SOURCE_DIR}/include' '${ftopt_chains_dir}' && \
'${CMAKE_COMMAND}' --build '${CMAKE_BINARY_DIR}' --target ftopt_header_check --parallel 2")
  set_tests_properties(headers.self_contained PROPERTIES RESOURCE_LOCK compiler LABELS compile)
  add_test(NAME headers.chains_script
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/headers/header_chains_test.py)
  set_tests_properties(headers.chains_script PROPERTIES LABELS compile)
endif()
