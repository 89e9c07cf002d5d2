# libnumarena_preload.so: numarena as the malloc and operator new of an unmodified program,
# through LD_PRELOAD (`numarena run`, tools/numarena/run.cpp; how it works: lib/preload/
# preload.cpp). Included from lib/CMakeLists.txt after cmake/NumarenaShared.cmake, whose
# objects (compiled against the private nje_ jemalloc, without initial-exec TLS) it links:
# the sources are not compiled a third time.
#
# Not in sanitizer builds: a sanitizer runtime replaces malloc itself and must be the first
# library loaded, so a program under both would use neither as intended.
if(NOT NUMARENA_SANITIZE STREQUAL "")
  return()
endif()

add_library(numarena_preload SHARED
  $<TARGET_OBJECTS:numarena_nje_objects> ${CMAKE_CURRENT_SOURCE_DIR}/preload/preload.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/preload/preload_metrics.cpp)
numarena_compile_against_nje(numarena_preload)
target_link_libraries(numarena_preload PRIVATE ${NUMARENA_NJE_LINK_LIBRARIES} ${CMAKE_DL_LIBS})
set(NUMARENA_PRELOAD_MAP ${PROJECT_SOURCE_DIR}/cmake/numarena_preload.map)
target_link_options(numarena_preload PRIVATE
  -Wl,--exclude-libs,ALL -Wl,--version-script=${NUMARENA_PRELOAD_MAP} -Wl,--no-undefined)
# Beside the `numarena` binary in the build tree, where `numarena run` looks first; installed
# into the library folder, where it looks next (../<libdir> from the binary).
set_target_properties(numarena_preload PROPERTIES
  OUTPUT_NAME numarena_preload
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools
  LINK_DEPENDS ${NUMARENA_PRELOAD_MAP})
include(GNUInstallDirs)
install(TARGETS numarena_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
