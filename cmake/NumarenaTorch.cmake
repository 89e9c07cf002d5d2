# numarena::torch (lib/torch, include/numarena/torch.hpp, torch_kv.hpp): the c10::Allocator
# over numarena's arenas. Optional: built only when libtorch's headers and libraries are
# found (Debian: libtorch-dev), and never linked by the core libraries. Not in sanitizer
# builds: libtorch is not instrumented (TSan reports its own thread pool) and Python cannot
# run under a sanitizer, so the ASan/TSan CI jobs skip the component.
#
# The objects use numarena's C API only and are compiled once, then linked twice:
#   numarena_torch         static, with libnumarena_c.a: for C++ programs on libtorch (one
#                          numarena, the program's own);
#   numarena_torch_shared  libnumarena_torch.so, with libnumarena.so: what Python's
#                          numarena.torch loads with ctypes beside the numarena module, so the
#                          tensors come from the same numarena the module sees.
# Libraries are found directly (c10, torch_cpu) instead of through TorchConfig.cmake, which
# drags in Caffe2's CUDA and protobuf probing for a component that needs two libraries.
set(NUMARENA_BUILD_TORCH AUTO CACHE STRING "Build numarena::torch: AUTO (when libtorch is found), ON, OFF")
set_property(CACHE NUMARENA_BUILD_TORCH PROPERTY STRINGS AUTO ON OFF)

set(NUMARENA_TORCH_FOUND FALSE)
if(NOT NUMARENA_BUILD_TORCH STREQUAL "OFF" AND NUMARENA_SANITIZE STREQUAL "")
  find_path(NUMARENA_C10_INCLUDE_DIR c10/core/CPUAllocator.h)
  find_path(NUMARENA_ATEN_INCLUDE_DIR ATen/ops/from_blob.h)
  find_library(NUMARENA_C10_LIBRARY c10)
  find_library(NUMARENA_TORCH_CPU_LIBRARY torch_cpu)
  if(NUMARENA_C10_INCLUDE_DIR AND NUMARENA_ATEN_INCLUDE_DIR AND NUMARENA_C10_LIBRARY
     AND NUMARENA_TORCH_CPU_LIBRARY)
    set(NUMARENA_TORCH_FOUND TRUE)
  endif()
endif()
if(NUMARENA_BUILD_TORCH STREQUAL "ON" AND NOT NUMARENA_TORCH_FOUND)
  message(FATAL_ERROR "NUMARENA_BUILD_TORCH=ON but libtorch was not found (or this is a "
                      "sanitizer build): apt-get install libtorch-dev, or set it to AUTO")
endif()
if(NOT NUMARENA_TORCH_FOUND)
  message(STATUS "numarena::torch: not built (libtorch not found, disabled, or a sanitizer build)")
  return()
endif()
message(STATUS "numarena::torch: built against ${NUMARENA_C10_LIBRARY}")

# libc10 only: what the allocator needs.
add_library(numarena_torch_c10 INTERFACE)
target_include_directories(numarena_torch_c10 SYSTEM INTERFACE ${NUMARENA_C10_INCLUDE_DIR})
target_link_libraries(numarena_torch_c10 INTERFACE ${NUMARENA_C10_LIBRARY})
# ATen tensors (torch_kv.hpp's views): libtorch_cpu as well.
add_library(numarena_torch_aten INTERFACE)
target_include_directories(numarena_torch_aten SYSTEM INTERFACE ${NUMARENA_ATEN_INCLUDE_DIR})
target_link_libraries(numarena_torch_aten INTERFACE numarena_torch_c10 ${NUMARENA_TORCH_CPU_LIBRARY})

add_library(numarena_torch_objects OBJECT ${NUMARENA_LAYER_SOURCES_torch})
target_include_directories(numarena_torch_objects
  PRIVATE ${PROJECT_SOURCE_DIR}/include ${NUMARENA_GENERATED_INCLUDE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(numarena_torch_objects PRIVATE numarena_torch_c10)
target_compile_features(numarena_torch_objects PRIVATE cxx_std_20)
target_compile_options(numarena_torch_objects PRIVATE -Wall -Wextra)
set_target_properties(numarena_torch_objects PROPERTIES POSITION_INDEPENDENT_CODE ON)

add_library(numarena_torch STATIC $<TARGET_OBJECTS:numarena_torch_objects>)
add_library(numarena::torch ALIAS numarena_torch)
target_link_libraries(numarena_torch PUBLIC numarena_c numarena_torch_c10)
set_target_properties(numarena_torch PROPERTIES OUTPUT_NAME numarena_torch EXPORT_NAME torch)

if(NUMARENA_BUILD_SHARED)
  add_library(numarena_torch_shared SHARED $<TARGET_OBJECTS:numarena_torch_objects>)
  target_link_libraries(numarena_torch_shared PRIVATE numarena_shared numarena_torch_c10)
  target_include_directories(numarena_torch_shared
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${NUMARENA_GENERATED_INCLUDE_DIR}>)
  target_link_options(numarena_torch_shared PRIVATE -Wl,--no-undefined)
  set_target_properties(numarena_torch_shared PROPERTIES
    OUTPUT_NAME numarena_torch VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
endif()

# Installed beside libnumarena.so, where numarena.torch looks first. The static archive is
# not installed: numarena::torch is for builds inside this tree or that add it as a
# subdirectory (its libtorch paths are this machine's).
if(NUMARENA_BUILD_SHARED)
  include(GNUInstallDirs)
  # Component "torch": installed by `cmake --install`, left out of the .deb set
  # (cmake/NumarenaPackaging.cmake), whose packages cannot depend on Debian's libtorch yet.
  install(TARGETS numarena_torch_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          COMPONENT torch)
endif()
