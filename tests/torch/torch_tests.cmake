# numarena::torch's tests (included from tests/CMakeLists.txt when the component is built).
# Few and fast: each is one process that loads libtorch once.
#   torch_allocator_test   the C++ allocator and scopes (Catch2), label "torch"
foreach(name torch_allocator_test)
  numarena_check_test_names(${CMAKE_CURRENT_SOURCE_DIR}/torch/${name}.cpp)
  add_executable(${name} ${CMAKE_CURRENT_SOURCE_DIR}/torch/${name}.cpp)
  target_link_libraries(${name} PRIVATE numarena::torch numarena_torch_aten numarena::numarena
                                        numarena_catch_main)
  target_compile_options(${name} PRIVATE -Wall -Wextra)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;torch" TIMEOUT 120)
endforeach()
