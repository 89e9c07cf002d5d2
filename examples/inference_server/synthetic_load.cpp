// Synthetic chat traffic: a shared system prompt, a random user message, a generation length.
#include "synthetic_load.hpp"

#include <random>

namespace inference_server {

std::vector<std::int32_t> SystemPrompt(int index) {
  std::vector<std::int32_t> tokens(kSystemPromptTokens);
  for (int i = 0; i < kSystemPromptTokens; ++i) tokens[i] = 1000 * (index + 1) + i;
  return tokens;
}

std::int32_t GeneratedToken(std::uint64_t request_id, std::size_t position) {
  // Above every prompt token id, and different per request, so generated spans are never
  // mistaken for another request's.
  return static_cast<std::int32_t>(500000 + (request_id * 7919 + position) % 1000000);
}

LoadGenerator::LoadGenerator(LoadOptions options, Submit submit)
    : options_(options), submit_(std::move(submit)) {}

void LoadGenerator::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LoadGenerator::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void LoadGenerator::Run() {
  std::mt19937_64 random(options_.seed);
  std::uniform_int_distribution<int> which_prompt(0, kSystemPrompts - 1);
  std::uniform_int_distribution<int> user_length(16, 96);
  std::uniform_int_distribution<int> generate_length(16, 48);
  std::uniform_int_distribution<std::int32_t> user_token(100000, 199999);
  std::vector<std::vector<std::int32_t>> system_prompts;
  for (int p = 0; p < kSystemPrompts; ++p) system_prompts.push_back(SystemPrompt(p));

  // A fixed schedule (not "sleep 1/rate after each request"), so a slow submit does not
  // lower the offered load: the server has to keep up or queue.
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / options_.requests_per_second));
  auto next = std::chrono::steady_clock::now();
  for (std::uint64_t id = 1; !stop_.load(std::memory_order_relaxed); ++id) {
    if (options_.max_requests != 0 && id > options_.max_requests) break;
    Request request;
    request.id = id;
    request.system_prompt = which_prompt(random);
    request.prompt = system_prompts[request.system_prompt];
    for (int i = user_length(random); i > 0; --i) request.prompt.push_back(user_token(random));
    request.generate_tokens = generate_length(random);
    request.arrived = std::chrono::steady_clock::now();
    submit_(std::move(request));
    generated_.fetch_add(1, std::memory_order_relaxed);

    next += interval;
    // Sleep in short slices so Stop() is prompt even at a low rate.
    while (!stop_.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_until(
          std::min(next, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
    }
  }
}

}  // namespace inference_server
