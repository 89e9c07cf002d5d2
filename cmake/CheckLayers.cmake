# The layer rule: every folder of lib/ is a layer, and a file may include only headers of its
# own layer or of layers below it. Public headers under include/numarena belong to layers too
# (the table below), so "lib/alloc includes numarena/kv_pool.hpp" is caught as well as
# "lib/alloc includes kv/kv_slab.hpp".
#
# numarena_check_layers(ROOT) fails the configure step on a violation. The same check runs
# as a ctest test (`layers: include order`), and `layers: a violation is caught` runs it on a
# synthetic tree with an upward include to prove it can fail. Standalone:
#   cmake -DROOT=<tree> -P cmake/CheckLayers.cmake

# Bottom-up. Keep in step with the layer table of docs/design.md (the test
# "docs: links, bench/results and the layer table" compares the two).
set(NUMARENA_LAYERS base os topology placement alloc budget kv adapters ops capi preload torch)

# Public header -> layer. A new public header must be added here (the check says so).
set(NUMARENA_PUBLIC_LAYER_status base)
set(NUMARENA_PUBLIC_LAYER_capacity base)
set(NUMARENA_PUBLIC_LAYER_format base)
set(NUMARENA_PUBLIC_LAYER_version base)
set(NUMARENA_PUBLIC_LAYER_excerpt base)
set(NUMARENA_PUBLIC_LAYER_topology topology)
set(NUMARENA_PUBLIC_LAYER_policy placement)
set(NUMARENA_PUBLIC_LAYER_memory_target placement)
set(NUMARENA_PUBLIC_LAYER_page_nodes placement)
set(NUMARENA_PUBLIC_LAYER_first_touch placement)
set(NUMARENA_PUBLIC_LAYER_interleave placement)
set(NUMARENA_PUBLIC_LAYER_arena alloc)
set(NUMARENA_PUBLIC_LAYER_address_space alloc)
set(NUMARENA_PUBLIC_LAYER_budget budget)
set(NUMARENA_PUBLIC_LAYER_kv_types kv)
set(NUMARENA_PUBLIC_LAYER_kv_pool kv)
set(NUMARENA_PUBLIC_LAYER_allocator adapters)
set(NUMARENA_PUBLIC_LAYER_memory_resource adapters)
set(NUMARENA_PUBLIC_LAYER_tensor_buffer adapters)
set(NUMARENA_PUBLIC_LAYER_numarena capi)
set(NUMARENA_PUBLIC_LAYER_torch torch)
set(NUMARENA_PUBLIC_LAYER_torch_kv torch)

# The layer of a header named in an #include "..." line; "" for headers outside numarena
# (absl/, jemalloc/, the standard library).
function(_numarena_layer_of_include include out)
  set(layer "")
  if(include MATCHES "^numarena/ops/")
    set(layer ops)
  elseif(include MATCHES "^numarena/internal/")
    set(layer alloc)
  elseif(include MATCHES "^numarena/([a-z_]+)\\.(h|hpp)$")
    set(name ${CMAKE_MATCH_1})
    if(DEFINED NUMARENA_PUBLIC_LAYER_${name})
      set(layer ${NUMARENA_PUBLIC_LAYER_${name}})
    else()
      set(layer "unknown:${include}")
    endif()
  elseif(include MATCHES "^([a-z_]+)/")
    list(FIND NUMARENA_LAYERS ${CMAKE_MATCH_1} index)
    if(index GREATER_EQUAL 0)
      set(layer ${CMAKE_MATCH_1})
    endif()
  endif()
  set(${out} ${layer} PARENT_SCOPE)
endfunction()

# Appends to `errors_var` one line per include of `file` (in layer `layer`) that runs up.
function(_numarena_check_file root file layer errors_var)
  set(errors ${${errors_var}})
  list(FIND NUMARENA_LAYERS ${layer} own_rank)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  file(RELATIVE_PATH rel ${root} ${file})
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" include "${line}")
    _numarena_layer_of_include("${include}" inc_layer)
    if("${inc_layer}" MATCHES "^unknown:")
      list(APPEND errors "${rel}: includes ${include}, a public header with no layer: add it "
                         "to the table in cmake/CheckLayers.cmake")
    elseif(NOT "${inc_layer}" STREQUAL "")
      list(FIND NUMARENA_LAYERS "${inc_layer}" target_rank)
      if(target_rank GREATER own_rank)
        list(APPEND errors "${rel} (layer ${layer}) includes ${include} (layer ${inc_layer}), which "
                           "is above it")
      endif()
    endif()
  endforeach()
  set(${errors_var} ${errors} PARENT_SCOPE)
endfunction()

function(numarena_check_layers root)
  set(errors)
  foreach(layer ${NUMARENA_LAYERS})
    file(GLOB_RECURSE files ${root}/lib/${layer}/*.hpp ${root}/lib/${layer}/*.cpp
                            ${root}/lib/${layer}/*.h)
    foreach(file ${files})
      _numarena_check_file(${root} ${file} ${layer} errors)
    endforeach()
  endforeach()
  file(GLOB lib_entries LIST_DIRECTORIES true ${root}/lib/*)
  foreach(entry ${lib_entries})
    get_filename_component(name ${entry} NAME)
    if(IS_DIRECTORY ${entry})
      list(FIND NUMARENA_LAYERS ${name} index)
      if(index LESS 0)
        list(APPEND errors "lib/${name}/ is not a layer: add it to NUMARENA_LAYERS in "
                           "cmake/CheckLayers.cmake and to the layer table of docs/design.md")
      endif()
    elseif(NOT name STREQUAL "CMakeLists.txt")
      list(APPEND errors "lib/${name}: every source belongs in a layer folder")
    endif()
  endforeach()
  file(GLOB_RECURSE public_headers ${root}/include/numarena/*.hpp ${root}/include/numarena/*.h)
  foreach(header ${public_headers})
    file(RELATIVE_PATH rel ${root}/include ${header})
    _numarena_layer_of_include("${rel}" layer)
    if(layer MATCHES "^unknown:")
      list(APPEND errors "include/${rel} has no layer: add it to the table in "
                         "cmake/CheckLayers.cmake")
    else()
      _numarena_check_file(${root} ${header} ${layer} errors)
    endif()
  endforeach()
  if(errors)
    string(REPLACE ";" "\n  " text "${errors}")
    message(FATAL_ERROR "numarena layer rule broken (a file includes a layer above its own):\n  ${text}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  numarena_check_layers(${ROOT})
endif()
