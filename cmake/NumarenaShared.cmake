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
# instances included).
#
# Why it carries its own Abseil: Debian's libabsl_*.so.20220623 exist on Debian 12 only, so a
# library that needs them loads on one distribution; Debian's libabsl_*.a are not PIC (and
# some use local-exec TLS), so they cannot go into a shared object. cmake/abseil/build.sh
# builds the components numarena uses from Debian's source package as PIC with hidden
# visibility; the objects below are compiled against its headers. libstdc++ stays shared, so
# with glibc it is the library's only dependency (tests/shared/check_self_contained.sh); the
# memory policy calls are system calls of its own (lib/os/os_linux.cpp), not libnuma's.
# -z nodelete: dlclose() never unloads it -- jemalloc's thread-exit destructors and fork
# handlers, and memory numarena handed out, must outlive any dlclose.

set(NUMARENA_NJE_DIR ${PROJECT_BINARY_DIR}/jemalloc-nje)
set(NUMARENA_NJE_ARCHIVE ${NUMARENA_NJE_DIR}/lib/libnumarena_jemalloc_pic.a)
set(NUMARENA_NJE_HEADER ${NUMARENA_NJE_DIR}/include/jemalloc/jemalloc.h)
add_custom_command(
  OUTPUT ${NUMARENA_NJE_ARCHIVE} ${NUMARENA_NJE_HEADER}
  COMMAND ${CMAKE_COMMAND} -E env CC=${CMAKE_C_COMPILER}
          ${PROJECT_SOURCE_DIR}/cmake/jemalloc/build.sh ${NUMARENA_NJE_DIR}
  DEPENDS ${PROJECT_SOURCE_DIR}/cmake/jemalloc/build.sh ${PROJECT_SOURCE_DIR}/cmake/debian_source.sh
  COMMENT "jemalloc for libnumarena.so (Debian's source, nje_ prefix, no initial-exec TLS)"
  VERBATIM)
add_custom_target(numarena_jemalloc_nje DEPENDS ${NUMARENA_NJE_ARCHIVE} ${NUMARENA_NJE_HEADER})

set(NUMARENA_ABSL_PIC_DIR ${PROJECT_BINARY_DIR}/abseil-pic)
set(NUMARENA_ABSL_PIC_ARCHIVE ${NUMARENA_ABSL_PIC_DIR}/lib/libnumarena_absl_pic.a)
add_custom_command(
  OUTPUT ${NUMARENA_ABSL_PIC_ARCHIVE}
  COMMAND ${CMAKE_COMMAND} -E env CXX=${CMAKE_CXX_COMPILER}
          ${PROJECT_SOURCE_DIR}/cmake/abseil/build.sh ${NUMARENA_ABSL_PIC_DIR}
  DEPENDS ${PROJECT_SOURCE_DIR}/cmake/abseil/build.sh ${PROJECT_SOURCE_DIR}/cmake/debian_source.sh
  COMMENT "Abseil for libnumarena.so (Debian's source, PIC, hidden visibility)"
  VERBATIM)
add_custom_target(numarena_abseil_pic DEPENDS ${NUMARENA_ABSL_PIC_ARCHIVE})

# The objects, compiled once against that jemalloc, for both shared objects built from them:
# libnumarena.so here and libnumarena_preload.so (cmake/NumarenaPreload.cmake).
# How every source compiled against the nje_ jemalloc is compiled (these objects, and the
# preload library's own source). BEFORE: this jemalloc.h and these Abseil headers, never
# Debian's in /usr/include.
function(numarena_compile_against_nje target)
  add_dependencies(${target} numarena_jemalloc_nje numarena_abseil_pic)
  target_include_directories(${target} BEFORE PRIVATE ${NUMARENA_NJE_DIR}/include
                                                      ${NUMARENA_ABSL_PIC_DIR}/include)
  target_include_directories(${target}
    PRIVATE ${PROJECT_SOURCE_DIR}/include ${NUMARENA_GENERATED_INCLUDE_DIR}
            ${PROJECT_SOURCE_DIR}/lib)
  target_compile_definitions(${target} PRIVATE JEMALLOC_MANGLE)
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-missing-field-initializers)
  # Every extern thread_local these sources use (numarena's, Abseil's cordz_next_sample) is
  # constant-initialised; without this, GCC calls each through a weak, undefined init function
  # (_ZTH...), which the dynamic linker would look for in other libraries, another Abseil too.
  target_compile_options(${target} PRIVATE -fno-extern-tls-init)
  # Each function in its own section: libnumarena_preload.so's link places the functions every
  # process runs at start-up side by side (cmake/preload_startup_order.ld).
  target_compile_options(${target} PRIVATE -ffunction-sections)
endfunction()

add_library(numarena_nje_objects OBJECT
  ${NUMARENA_CORE_SOURCES} ${NUMARENA_LAYER_SOURCES_ops} ${NUMARENA_LAYER_SOURCES_capi})
numarena_compile_against_nje(numarena_nje_objects)
set_target_properties(numarena_nje_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
# What a shared object made of these objects links.
set(NUMARENA_NJE_LINK_LIBRARIES
  ${NUMARENA_NJE_ARCHIVE} ${NUMARENA_ABSL_PIC_ARCHIVE} Threads::Threads)

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
