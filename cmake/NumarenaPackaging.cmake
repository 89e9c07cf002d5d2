# Debian packages of an install (CPack's DEB generator), one per install component:
#   libnumarena0       libnumarena.so.0 (the C API, loadable from anything) and the license
#   libnumarena-dev    headers, the static libraries, libnumarena.so, CMake and pkg-config files
#   numarena           the `numarena` tool, libnumarena_preload.so (`numarena run`), the
#                      Prometheus rules and the Grafana dashboard
#   python3-numarena   the Python module with its dist-info
# Made from a built tree with `cpack -G DEB` in the build directory (or
# `cpack --config CPackConfig.cmake -B DIR`). The packages install under /usr, whatever
# prefix the build was configured with for `cmake --install` (/usr/local by default): every
# installed path is relative to the prefix (the pkg-config and CMake files find it from where
# they lie, the Python module finds libnumarena.so by a relative path, `numarena run` its
# preload library from the binary), and the Python module goes to /usr's
# lib/python3/dist-packages (CMakeLists.txt chooses that folder at install time). Run-time dependencies on system libraries come from
# dpkg-shlibdeps; tests/install_consumer/deb_test.sh unpacks the set into a throwaway root and
# runs it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME numarena)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "the numarena authors")
set(CPACK_PACKAGE_CONTACT "the numarena authors <numarena@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_COMPONENTS_ALL lib dev tools)
if(NUMARENA_BUILD_SHARED)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libnumarena${PROJECT_VERSION_MAJOR})
set(CPACK_COMPONENT_LIB_DESCRIPTION
    "numarena's C API as a shared library: NUMA-placed memory for inference servers")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libnumarena-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
# What numarenaConfig.cmake and the .pc files ask a consumer's build for.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libabsl-dev, libjemalloc-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION "numarena's headers, static libraries, CMake and pkg-config files")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME numarena)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
    "the numarena tool (topo, doctor, advise, stat, budget, exporter, run) with its malloc "
    "override, Prometheus alert rules and a Grafana dashboard")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-numarena)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_COMPONENT_PYTHON_DEPENDS lib)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "numarena from Python (ctypes over libnumarena.so)")
include(CPack)
