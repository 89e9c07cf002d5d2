// Synthetic load: requests that look like chat traffic, arriving at a steady rate.
//
// Real prompts start with one of a few long system prompts ("You are a helpful assistant
// ...") followed by a short user message, and that is what makes a KV prefix cache pay: the
// system prompt's K/V is computed once and shared by every request that starts with it. The
// generator reproduces that shape: each request is one of `kSystemPrompts` fixed system
// prompts, then random user tokens, then a number of tokens to generate. Token ids are
// deterministic from the seed, so two runs with the same options see the same traffic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace inference_server {

// How many distinct system prompts the traffic uses, and their length in tokens (a multiple
// of the KV pool's tokens per block, so a system prompt fills whole spans and is shared
// without copy-on-write).
inline constexpr int kSystemPrompts = 4;
inline constexpr int kSystemPromptTokens = 256;

// The tokens of system prompt `index` (0 <= index < kSystemPrompts).
std::vector<std::int32_t> SystemPrompt(int index);

struct Request {
  std::uint64_t id = 0;
  int system_prompt = 0;             // which system prompt the prompt starts with
  std::vector<std::int32_t> prompt;  // system prompt + user tokens
  int generate_tokens = 0;           // tokens to decode after the prompt
  std::chrono::steady_clock::time_point arrived;
  bool admission_deferred = false;  // set by the server: the budget said kLater once
};

// The token the model "generates" at position `position` of request `request_id`. Any
// deterministic function will do: there is no model, only K/V traffic.
std::int32_t GeneratedToken(std::uint64_t request_id, std::size_t position);

struct LoadOptions {
  double requests_per_second = 100;
  std::uint64_t max_requests = 0;  // 0: until stopped
  std::uint64_t seed = 1;
};

// Calls `submit` with one new request every 1 / requests_per_second seconds, on its own
// thread, until Stop() or until max_requests have been made.
class LoadGenerator {
 public:
  using Submit = std::function<void(Request)>;
  LoadGenerator(LoadOptions options, Submit submit);
  ~LoadGenerator() { Stop(); }
  LoadGenerator(const LoadGenerator&) = delete;
  LoadGenerator& operator=(const LoadGenerator&) = delete;

  void Start();
  void Stop();
  std::uint64_t generated() const { return generated_.load(std::memory_order_relaxed); }

 private:
  void Run();

  LoadOptions options_;
  Submit submit_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generated_{0};
  std::thread thread_;
};

}  // namespace inference_server
