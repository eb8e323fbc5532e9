# Every public header compiles on its own, without the PCH: built by the test
# `headers.self_contained` (not part of the default build). cmake/header_chains.py groups the
# headers into chains in which each header includes all the ones before it, so that one source
# per chain checks each header as strictly as a source of its own would, with about half as
# many parses of LibTorch's headers as one source per header. The test first verifies that the chains written
# here still hold for the headers as they are now (else: re-run cmake).
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(ftopt_chains_dir ${CMAKE_BINARY_DIR}/header_chains)
set(ftopt_chains ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/cmake/header_chains.py)
# A header added or removed re-runs cmake, and with it the grouping.
file(GLOB_RECURSE ftopt_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/*.hpp)
execute_process(COMMAND ${ftopt_chains} write ${PROJECT_SOURCE_DIR}/include ${ftopt_chains_dir}
                COMMAND_ERROR_IS_FATAL ANY)
file(GLOB ftopt_header_sources ${ftopt_chains_dir}/chain_*.cpp)
add_library(ftopt_header_check OBJECT EXCLUDE_FROM_ALL ${ftopt_header_sources})
target_link_libraries(ftopt_header_check PRIVATE ftopt_strict)
target_compile_options(ftopt_header_check PRIVATE -O0 -fsyntax-only)
if(FTOPT_BUILD_TESTS)
  add_test(NAME headers.self_contained
    COMMAND sh -c "\"$<JOIN:${ftopt_chains},\" \">\" verify '${PROJECT_SOURCE_DIR}/include' '${ftopt_chains_dir}' && \
'${CMAKE_COMMAND}' --build '${CMAKE_BINARY_DIR}' --target ftopt_header_check --parallel 2")
  set_tests_properties(headers.self_contained PROPERTIES RESOURCE_LOCK compiler LABELS compile)
  add_test(NAME headers.chains_script
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/headers/header_chains_test.py)
  set_tests_properties(headers.chains_script PROPERTIES LABELS compile)
endif()
