# libnumarena.so (numarena::shared): the core, ops and the C API in one shared object that a
# process can dlopen() -- Python's ctypes.CDLL, a C program, an FFI binding -- with no
# LD_PRELOAD and no glibc tunables. Included from lib/CMakeLists.txt (its source lists).
#
# Why it carries its own jemalloc: Debian's libjemalloc.so.2 keeps its thread state in
# initial-exec TLS (the STATIC_TLS flag, ~2.6 KiB), which glibc can satisfy for a library
# loaded after start-up only from a few hundred spare bytes, so a shared object that links it
# fails to load ("cannot allocate memory in static TLS block"). cmake/jemalloc/build.sh builds
# the same jemalloc from Debian's source package without initial-exec TLS and with an nje_
# prefix, so it never replaces the process's malloc or meets a jemalloc already there.
#
# The sources are compiled a second time (the OBJECT library numarena_nje_objects), against that jemalloc's header with JEMALLOC_MANGLE
# (mallocx, sallocx, mallctl, malloc_conf, ... become nje_mallocx, ...; include/numarena/
# arena.hpp's inline code too). Everything but numarena_* is hidden: --exclude-libs hides the
# archives' symbols, cmake/numarena.map everything else (Abseil and libstdc++ template
# instances included). Abseil, libnuma and libstdc++ stay Debian's shared libraries (Debian's
# Abseil archives are not PIC), so they are the library's only dependencies besides libc.
# -z nodelete: dlclose() never unloads it -- jemalloc's thread-exit destructors and fork
# handlers, and memory numarena handed out, must outlive any dlclose.

set(NUMARENA_NJE_DIR ${PROJECT_BINARY_DIR}/jemalloc-nje)
set(NUMARENA_NJE_ARCHIVE ${NUMARENA_NJE_DIR}/lib/libnumarena_jemalloc_pic.a)
set(NUMARENA_NJE_HEADER ${NUMARENA_NJE_DIR}/include/jemalloc/jemalloc.h)
add_custom_command(
  OUTPUT ${NUMARENA_NJE_ARCHIVE} ${NUMARENA_NJE_HEADER}
  COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER}
          ${PROJECT_SOURCE_DIR}/cmake/jemalloc/build.sh ${NUMARENA_NJE_DIR}
  DEPENDS ${PROJECT_SOURCE_DIR}/cmake/jemalloc/build.sh
  COMMENT "jemalloc for libnumarena.so (Debian's source, nje_ prefix, no initial-exec TLS)"
  VERBATIM)
add_custom_target(numarena_jemalloc_nje DEPENDS ${NUMARENA_NJE_ARCHIVE} ${NUMARENA_NJE_HEADER})

# The objects, compiled once against that jemalloc, for both shared objects built from them:
# libnumarena.so here and libnumarena_preload.so (cmake/NumarenaPreload.cmake).
# How every source compiled against the nje_ jemalloc is compiled (these objects, and the
# preload library's own source). BEFORE: this jemalloc.h, never Debian's
# /usr/include/jemalloc/jemalloc.h.
function(numarena_compile_against_nje target)
  add_dependencies(${target} numarena_jemalloc_nje)
  target_include_directories(${target} BEFORE PRIVATE ${NUMARENA_NJE_DIR}/include)
  target_include_directories(${target}
    PRIVATE ${PROJECT_SOURCE_DIR}/include ${NUMARENA_GENERATED_INCLUDE_DIR}
            ${PROJECT_SOURCE_DIR}/lib)
  target_compile_definitions(${target} PRIVATE JEMALLOC_MANGLE)
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
endfunction()

add_library(numarena_nje_objects OBJECT
  ${NUMARENA_CORE_SOURCES} ${NUMARENA_LAYER_SOURCES_ops} ${NUMARENA_LAYER_SOURCES_capi})
numarena_compile_against_nje(numarena_nje_objects)
# Only the include directories and definitions of these (header-only here) dependencies.
target_link_libraries(numarena_nje_objects PRIVATE
  absl::status absl::statusor absl::strings absl::str_format absl::synchronization
  absl::flat_hash_map absl::hash)
set_target_properties(numarena_nje_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
# What a shared object made of these objects links.
set(NUMARENA_NJE_LINK_LIBRARIES
  ${NUMARENA_NJE_ARCHIVE}
  absl::status absl::statusor absl::strings absl::str_format absl::synchronization
  absl::flat_hash_map absl::hash
  numa Threads::Threads)

add_library(numarena_shared SHARED $<TARGET_OBJECTS:numarena_nje_objects>)
add_library(numarena::shared ALIAS numarena_shared)
add_dependencies(numarena_shared numarena_jemalloc_nje)
target_include_directories(numarena_shared
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
         $<BUILD_INTERFACE:${NUMARENA_GENERATED_INCLUDE_DIR}> $<INSTALL_INTERFACE:include>)
target_link_libraries(numarena_shared PRIVATE ${NUMARENA_NJE_LINK_LIBRARIES})
set(NUMARENA_SHARED_MAP ${PROJECT_SOURCE_DIR}/cmake/numarena.map)
target_link_options(numarena_shared PRIVATE
  -Wl,--exclude-libs,ALL -Wl,--version-script=${NUMARENA_SHARED_MAP} -Wl,-z,nodelete)
if(NUMARENA_SANITIZE STREQUAL "")
  # Every symbol resolved at link time (sanitizer runtimes come from the executable).
  target_link_options(numarena_shared PRIVATE -Wl,--no-undefined)
endif()
set_target_properties(numarena_shared PROPERTIES
  OUTPUT_NAME numarena EXPORT_NAME shared
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${NUMARENA_SHARED_MAP})
