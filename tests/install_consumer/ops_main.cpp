// A program outside the tree that serves metrics: proves numarena::ops installs and links
// (find_package target numarena::ops, pkg-config numarena-ops).
#include <numarena/ops/metrics.hpp>

#include <cstdio>
#include <string>

int main() {
  numarena::ExpositionWriter writer;
  writer.Family("consumer_up", numarena::MetricType::kGauge, "The consumer ran.").Sample(1);
  auto text = writer.Finish();
  if (!text.ok() || text->find("consumer_up 1") == std::string::npos) return 1;
  std::printf("ops consumer: %zu bytes of exposition text\n", text->size());
  return 0;
}
