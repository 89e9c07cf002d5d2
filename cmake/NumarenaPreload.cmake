# libnumarena_preload.so: numarena as the malloc and operator new of an unmodified program,
# through LD_PRELOAD (`numarena run`, tools/numarena/run.cpp; how it works: lib/preload/
# preload.cpp). Included from lib/CMakeLists.txt after cmake/NumarenaShared.cmake, whose
# objects (compiled against the private nje_ jemalloc, without initial-exec TLS) it links:
# only the two files of its hot path are compiled a third time (below).
#
# Not in sanitizer builds: a sanitizer runtime replaces malloc itself and must be the first
# library loaded, so a program under both would use neither as intended.
if(NOT NUMARENA_SANITIZE STREQUAL "")
  return()
endif()

# Initial-exec TLS for the override's own hot path. libnumarena.so's objects use the general
# dynamic model (a dlopen'd library cannot count on static TLS space), so each thread-local
# read there is a call to __tls_get_addr: 12 of the 129 instructions of a --local malloc and
# of the 83 of a free (bench/override/count_instructions.py). A preloaded library is loaded
# at start-up, with static TLS for all of it (this one is flagged STATIC_TLS already, for
# preload.cpp's depth counter), so the files whose code runs on every call are compiled again
# for it with -ftls-model=initial-exec (a target's option: as a source file property it would
# reach libnumarena.so's copy in the same folder): preload.cpp (free and the bound malloc,
# inlined from arena.hpp) and arena.cpp (--local's malloc), whose numarena_nje_objects copy
# is left out of this library.
add_library(numarena_preload_hot_path OBJECT
  ${CMAKE_CURRENT_SOURCE_DIR}/alloc/arena.cpp ${CMAKE_CURRENT_SOURCE_DIR}/preload/preload.cpp)
numarena_compile_against_nje(numarena_preload_hot_path)
set_target_properties(numarena_preload_hot_path PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(numarena_preload_hot_path PRIVATE -ftls-model=initial-exec)
add_library(numarena_preload SHARED
  $<FILTER:$<TARGET_OBJECTS:numarena_nje_objects>,EXCLUDE,/alloc/arena\.cpp\.o$>
  $<TARGET_OBJECTS:numarena_preload_hot_path>
  ${CMAKE_CURRENT_SOURCE_DIR}/preload/preload_metrics.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/preload/no_standard_streams.cpp)
numarena_compile_against_nje(numarena_preload)
# The libraries, named here because the compiler driver's own are turned off (-nodefaultlibs,
# below): libstdc++ statically, the unwinder and libc; no libm.
target_link_libraries(numarena_preload PRIVATE ${NUMARENA_NJE_LINK_LIBRARIES} ${CMAKE_DL_LIBS}
  -Wl,-Bstatic,-lstdc++,-Bdynamic,-lgcc_s,-lc)
set(NUMARENA_PRELOAD_MAP ${PROJECT_SOURCE_DIR}/cmake/numarena_preload.map)
# The functions every process runs at start-up and on its first allocations go side by side at
# the front of the text (the objects are built with -ffunction-sections), so the kernel's 64 KiB
# fault-around windows map 6 of its 20 windows into a short program, not 16-27, and those an
# allocation-heavy program runs after start-up right behind them (tools/
# preload_startup_order.py writes the list; an INSERT script adds to the default one).
set(NUMARENA_PRELOAD_ORDER ${PROJECT_SOURCE_DIR}/cmake/preload_startup_order.ld)
# libstdc++ linked statically (and hidden by --exclude-libs, so the program's own libstdc++,
# if it loads one, is untouched): the override is loaded into every process, C ones included,
# and loading libstdc++.so for it cost each of them 1.45 MiB of RSS, most of it the dynamic
# linker reading libstdc++'s symbol and relocation tables (/bin/true under the override: 5.0
# -> 3.7 MiB with the start-up order rewritten). What the copy keeps to itself is its
# std::get_new_handler(), so operator new asks the program's libstdc++ for the handler
# (lib/preload/preload.cpp, ProgramNewHandler); exceptions it throws are caught by the
# program's (type_info compares by name), as tests/preload/new_delete.cpp checks.
#
# Only what the exports (the allocation functions and the C API) and the static constructors
# reach is kept (--gc-sections): not libnumarena's operator tools (decode experiment,
# bandwidth, doctor, JSON, ...). And no libm: the compiler driver would add it (and the linker
# decides what is needed before it collects garbage, so the decode experiment's expf or
# libstdc++'s floating-point to_chars would keep it), and loading it cost every process
# 0.3 MiB of RSS and ~40 page faults (its IRELATIVE resolvers run at load). With
# -nodefaultlibs the libraries are the ones named above; a libm call within the exports' reach
# is an undefined symbol (--no-undefined fails the link), and the preload test "start-up
# functions share a few fault-around windows" checks that a process under the library maps
# neither libm nor libstdc++. The private jemalloc is built without its heap profiler, whose
# code called exp, log and round (cmake/jemalloc/build.sh).
target_link_options(numarena_preload PRIVATE
  -nodefaultlibs -Wl,--gc-sections -Wl,-z,pack-relative-relocs -Wl,--exclude-libs,ALL
  -Wl,--version-script=${NUMARENA_PRELOAD_MAP} -Wl,--no-undefined
  -Wl,-T,${NUMARENA_PRELOAD_ORDER}
  # The copy's standard streams are never initialised (preload/no_standard_streams.cpp).
  -Wl,--wrap=_ZNSt8ios_base4InitC1Ev -Wl,--wrap=_ZNSt8ios_base4InitD1Ev)
# Beside the `numarena` binary in the build tree, where `numarena run` looks first; installed
# into the library folder, where it looks next (../<libdir> from the binary).
set_target_properties(numarena_preload PROPERTIES
  OUTPUT_NAME numarena_preload
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tools
  LINK_DEPENDS "${NUMARENA_PRELOAD_MAP};${NUMARENA_PRELOAD_ORDER}")
include(GNUInstallDirs)
install(TARGETS numarena_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
