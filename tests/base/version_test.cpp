// <numarena/version.h> is generated from CMake's project version (NUMARENA_PROJECT_VERSION,
// passed by tests/CMakeLists.txt from the same project() call): the macros, the constexpr
// functions must agree with it (tests/capi/capi_test.c checks the C API's numarena_version()).
#include <catch2/catch.hpp>

#include <string>

#include "numarena/version.h"

TEST_CASE("version: macros, functions and the library agree with CMake's project version",
          "[version]") {
  const std::string project = NUMARENA_PROJECT_VERSION;
  CHECK(std::string(NUMARENA_VERSION_STRING) == project);
  CHECK(std::string(numarena::version()) == project);
  constexpr numarena::Version v = numarena::version_numbers();
  CHECK(std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch) ==
        project);
  STATIC_REQUIRE(NUMARENA_VERSION ==
                 NUMARENA_VERSION_MAJOR * 10000 + NUMARENA_VERSION_MINOR * 100 +
                     NUMARENA_VERSION_PATCH);
}
