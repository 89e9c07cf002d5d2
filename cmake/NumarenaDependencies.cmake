# Dependencies, all from Debian 12 packages (tools/dev.sh deps installs them):
# libabsl-dev, libjemalloc-dev, libnuma-dev; tests: catch2; bench: libbenchmark-dev.
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_library(NUMARENA_NUMA_LIBRARY numa)
find_path(NUMARENA_NUMA_INCLUDE numaif.h)
if(NOT NUMARENA_NUMA_LIBRARY OR NOT NUMARENA_NUMA_INCLUDE)
  message(FATAL_ERROR "libnuma not found: install libnuma-dev (tools/dev.sh deps does)")
endif()
find_library(NUMARENA_JEMALLOC_LIBRARY jemalloc)
find_path(NUMARENA_JEMALLOC_INCLUDE jemalloc/jemalloc.h)
if(NOT NUMARENA_JEMALLOC_LIBRARY OR NOT NUMARENA_JEMALLOC_INCLUDE)
  message(FATAL_ERROR "jemalloc not found: install libjemalloc-dev (tools/dev.sh deps does)")
endif()
