# The layer rule: every folder of lib/ is a layer, and a file may include only headers of its
# own layer or of layers below it. Public headers under include/numarena belong to layers too
# (the table below), so "lib/alloc includes numarena/kv_pool.hpp" is caught as well as
# "lib/alloc includes kv/kv_slab.hpp".
#
# Inside lib/kv and lib/alloc, files depend one way too: the folder's main header (the table
# NUMARENA_INNER_ORDER_* below) lists the folder's files bottom-up, and a file includes only
# its own header and files listed before it. numarena_check_inner_order checks that.
#
# numarena_check_layers(ROOT) fails the configure step on a violation of either rule. The same check runs
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

# Folder -> its main header, whose top comment holds the folder's inner order: a line
# "Inner order of lib/<folder>" and then lines "//   level: file file ..." (a file by its
# name without .hpp/.cpp, a public header as numarena/<name>.hpp; a line that starts with
# more spaces and no "level:" continues the one above) up to the first line with only "//".
set(NUMARENA_INNER_ORDER_kv lib/kv/kv_pool_state.hpp)
set(NUMARENA_INNER_ORDER_alloc lib/alloc/heap_table.hpp)

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

# The inner order of `folder` as a list of names, bottom-up; errors appended to errors_var.
function(_numarena_read_inner_order root folder out errors_var)
  set(errors ${${errors_var}})
  set(header ${root}/${NUMARENA_INNER_ORDER_${folder}})
  set(order)
  if(NOT EXISTS ${header})
    list(APPEND errors "${NUMARENA_INNER_ORDER_${folder}} is missing (it holds the inner order of "
                       "lib/${folder})")
  else()
    file(STRINGS ${header} lines)
    set(inside FALSE)
    foreach(line ${lines})
      if(NOT inside)
        if(line MATCHES "Inner order of lib/${folder}")
          set(inside TRUE)
        endif()
      elseif(line MATCHES "^//[ \t]*$" OR NOT line MATCHES "^//")
        break()
      elseif(line MATCHES "^//   ([a-z_]+:)?[ ]+(.*)$")
        string(REGEX REPLACE "[ ]+" ";" names "${CMAKE_MATCH_2}")
        list(APPEND order ${names})
      endif()
    endforeach()
    if(NOT order)
      list(APPEND errors "${NUMARENA_INNER_ORDER_${folder}}: no inner order of lib/${folder} "
                         "in its top comment (a line \"Inner order of lib/${folder}\" and the "
                         "levels under it)")
    endif()
  endif()
  set(${out} ${order} PARENT_SCOPE)
  set(${errors_var} ${errors} PARENT_SCOPE)
endfunction()

# The name of `include` (an #include path) in `folder`'s inner order, or "" when it is not a
# file of that folder or a public header of its layer.
function(_numarena_inner_name folder include out)
  set(name "")
  if(include MATCHES "^${folder}/([a-z0-9_]+)\\.(h|hpp)$")
    set(name ${CMAKE_MATCH_1})
  elseif(include MATCHES "^numarena/")
    _numarena_layer_of_include("${include}" layer)
    if(layer STREQUAL folder)
      set(name ${include})
    endif()
  endif()
  set(${out} "${name}" PARENT_SCOPE)
endfunction()

# Every file of lib/<folder> (and every public header of its layer) is in the inner order and
# includes only its own header and files listed before it.
function(numarena_check_inner_order root folder errors_var)
  set(errors ${${errors_var}})
  _numarena_read_inner_order(${root} ${folder} order errors)
  file(GLOB files ${root}/lib/${folder}/*.hpp ${root}/lib/${folder}/*.cpp ${root}/lib/${folder}/*.h)
  file(GLOB_RECURSE public_headers ${root}/include/numarena/*.hpp ${root}/include/numarena/*.h)
  foreach(header ${public_headers})
    file(RELATIVE_PATH rel ${root}/include ${header})
    _numarena_inner_name(${folder} "${rel}" name)
    if(NOT name STREQUAL "")
      list(APPEND files ${header})
    endif()
  endforeach()
  foreach(file ${files})
    file(RELATIVE_PATH rel ${root} ${file})
    if(rel MATCHES "^include/(.*)$")
      set(own ${CMAKE_MATCH_1})
    else()
      get_filename_component(own ${file} NAME_WE)
    endif()
    list(FIND order ${own} own_rank)
    if(own_rank LESS 0)
      list(APPEND errors "${rel} is not in the inner order of lib/${folder}: add it to the list "
                         "at the top of ${NUMARENA_INNER_ORDER_${folder}}")
      continue()
    endif()
    file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" include "${line}")
      _numarena_inner_name(${folder} "${include}" name)
      if(name STREQUAL "" OR name STREQUAL own)
        continue()
      endif()
      list(FIND order ${name} rank)
      if(rank LESS 0)
        list(APPEND errors "${rel} includes ${include}, which is not in the inner order of "
                           "lib/${folder} (${NUMARENA_INNER_ORDER_${folder}})")
      elseif(rank GREATER own_rank)
        list(APPEND errors "${rel} includes ${include}, which comes after it in the inner order "
                           "of lib/${folder} (${NUMARENA_INNER_ORDER_${folder}}): calls must go "
                           "down only")
      endif()
    endforeach()
  endforeach()
  set(${errors_var} ${errors} PARENT_SCOPE)
endfunction()

function(numarena_check_layers root)
  set(errors)
  foreach(folder ${NUMARENA_LAYERS})
    if(DEFINED NUMARENA_INNER_ORDER_${folder} AND IS_DIRECTORY ${root}/lib/${folder})
      numarena_check_inner_order(${root} ${folder} errors)
    endif()
  endforeach()
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
    message(FATAL_ERROR "numarena layer rule broken (a file includes a layer above its own, "
                        "or a file later in its folder's inner order):\n  ${text}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  numarena_check_layers(${ROOT})
endif()
