# Every public header compiles on its own: one generated source per header, without the PCH,
# built by the test `headers.self_contained` (not part of the default build).
file(GLOB_RECURSE ftopt_headers RELATIVE ${PROJECT_SOURCE_DIR}/include
     CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/*.hpp)
set(ftopt_header_sources)
foreach(header IN LISTS ftopt_headers)
  string(MAKE_C_IDENTIFIER ${header} id)
  set(source ${CMAKE_BINARY_DIR}/header_check/${id}.cpp)
  file(CONFIGURE OUTPUT ${source} CONTENT "#include <${header}>\n")
  list(APPEND ftopt_header_sources ${source})
endforeach()
add_library(ftopt_header_check OBJECT EXCLUDE_FROM_ALL ${ftopt_header_sources})
target_link_libraries(ftopt_header_check PRIVATE ftopt_strict)
target_compile_options(ftopt_header_check PRIVATE -O0 -fsyntax-only)
if(FTOPT_BUILD_TESTS)
  add_test(NAME headers.self_contained
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ftopt_header_check --parallel 2)
  set_tests_properties(headers.self_contained PROPERTIES RESOURCE_LOCK compiler LABELS compile)
endif()
