// A recorded machine from tests/fixtures (NUMARENA_FIXTURES): its sys/proc trees behind a
// rooted SystemReader and the Topology discovered from them, for tests of the operations
// components (doctor, stat, metrics) that read both.
//
//   numarena::testing::FixtureMachine m = numarena::testing::LoadFixtureMachine("ops-good");
//   auto report = numarena::RunDoctor(*m.reader, m.topology, {});
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "numarena/topology.hpp"

namespace numarena::testing {

struct FixtureMachine {
  std::unique_ptr<SystemReader> reader;
  Topology topology;
};

inline FixtureMachine LoadFixtureMachine(const std::string& name) {
  std::string root = std::string(NUMARENA_FIXTURES) + "/" + name;
  auto reader = MakeRootedReader(root + "/sys", root + "/proc");
  auto topology = Topology::discover(*reader);
  INFO(name << ": " << topology.status());
  REQUIRE(topology.ok());
  return FixtureMachine{std::move(reader), *std::move(topology)};
}

}  // namespace numarena::testing
