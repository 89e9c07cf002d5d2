// The allocation shapes of issue 35's table as one ordinary program: it knows nothing of
// numarena and uses only malloc/free and operator new/delete, so bench/override_bench.py can
// run it unmodified under each allocator (LD_PRELOAD) and under `numarena run`.
//
//   override_shapes SHAPE SCALE
//
// SCALE multiplies the work (1 = the full run, a few seconds on a quiet 2-vCPU host; the
// harness's quick mode passes a small one). Every shape does a fixed amount of work, so the
// run's wall time is its cost. The program prints one line, "SHAPE checksum=N", where N
// depends on what was written into the blocks: a run whose allocator handed out overlapping
// blocks ends with another number or a crash. Shapes:
//
//   random-small        2 threads, each replacing random slots of its own table with blocks of
//                       random, mostly small sizes (throughput)
//   producer-consumer   one thread allocates, two others free (cross-thread frees)
//   larson              2 threads replace random objects (8-1000 B) of a table and hand the
//                       table to the other thread each round; unsized operator delete
//   larson-sized        the same with sized operator delete
//   big-blocks          a loop of random 5-25 MiB blocks, each allocated, touched, freed
//   tiny-objects        one thread, many tiny objects (bignum-like digit vectors)
//   many-threads        waves of short-lived threads with short-lived mixed-size objects
//   false-sharing       2 threads, each writing hard into small scratch blocks of its own
//   pairs               one thread: malloc(64) then free, 1,000,000 x SCALE times: the
//                       shortest path of an allocator, for instruction counts under callgrind
//                       (bench/RESULTS.md); not one of the harness's shapes
//   idle-rss            a 256 MiB burst of mixed sizes, all freed, then 2 s idle (SCALE < 1:
//                       a smaller burst, a shorter idle); prints "idle-rss rss_kib=N" (VmRSS
//                       after the idle)
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

// xorshift64*: the same sequence under every allocator.
struct Random {
  std::uint64_t state;
  explicit Random(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t Next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  }
  std::size_t Below(std::size_t n) { return static_cast<std::size_t>(Next() % n); }
};

std::atomic<std::uint64_t> checksum{0};

void* MustMalloc(std::size_t size) {
  void* p = std::malloc(size);
  if (p == nullptr) {
    std::fprintf(stderr, "override_shapes: malloc(%zu) returned NULL\n", size);
    std::exit(1);
  }
  return p;
}

// Writes the block's first and last byte from `tag`, so a later read checks nobody else did.
void Stamp(void* p, std::size_t size, unsigned char tag) {
  auto* bytes = static_cast<unsigned char*>(p);
  bytes[0] = tag;
  bytes[size - 1] = tag;
}
std::uint64_t Check(const void* p, std::size_t size, unsigned char tag) {
  const auto* bytes = static_cast<const unsigned char*>(p);
  if (bytes[0] != tag || bytes[size - 1] != tag) {
    std::fprintf(stderr, "override_shapes: a block was overwritten while it was live\n");
    std::exit(1);
  }
  return tag;
}

// Mostly small: 7 in 8 requests of 8-256 B, the rest up to 4 KiB.
std::size_t MostlySmall(Random& random) {
  return random.Below(8) != 0 ? 8 + random.Below(249) : 257 + random.Below(3840);
}

void RandomSmall(double scale) {
  const long iterations = static_cast<long>(4'000'000 * scale);
  auto work = [iterations](int id) {
    Random random(id + 1);
    constexpr std::size_t kSlots = 2000;
    std::vector<void*> slot(kSlots, nullptr);
    std::vector<std::size_t> size(kSlots, 0);
    std::uint64_t sum = 0;
    for (long i = 0; i < iterations; ++i) {
      const std::size_t k = random.Below(kSlots);
      if (slot[k] != nullptr) {
        sum += Check(slot[k], size[k], static_cast<unsigned char>(k));
        std::free(slot[k]);
      }
      size[k] = MostlySmall(random);
      slot[k] = MustMalloc(size[k]);
      Stamp(slot[k], size[k], static_cast<unsigned char>(k));
    }
    for (void* p : slot) std::free(p);
    checksum += sum;
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
}

void ProducerConsumer(double scale) {
  const long objects = static_cast<long>(3'000'000 * scale);
  constexpr std::size_t kBatch = 256;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::vector<void*>> batches;
  bool done = false;
  auto consume = [&] {
    std::uint64_t sum = 0;
    for (;;) {
      std::vector<void*> batch;
      {
        std::unique_lock<std::mutex> lock(mutex);
        ready.wait(lock, [&] { return !batches.empty() || done; });
        if (batches.empty()) break;
        batch = std::move(batches.front());
        batches.pop_front();
      }
      ready.notify_all();  // the producer may be waiting for room
      for (void* p : batch) {
        sum += *static_cast<unsigned char*>(p);
        std::free(p);
      }
    }
    checksum += sum;
  };
  std::thread c1(consume), c2(consume);
  Random random(7);
  std::vector<void*> batch;
  for (long i = 0; i < objects; ++i) {
    void* p = MustMalloc(16 + random.Below(496));
    *static_cast<unsigned char*>(p) = static_cast<unsigned char>(i);
    batch.push_back(p);
    if (batch.size() == kBatch) {
      std::unique_lock<std::mutex> lock(mutex);
      // A bounded queue: the producer waits rather than let the backlog grow without end.
      ready.wait(lock, [&] { return batches.size() < 64; });
      batches.push_back(std::move(batch));
      batch.clear();
      ready.notify_all();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!batch.empty()) batches.push_back(std::move(batch));
    done = true;
  }
  ready.notify_all();
  c1.join();
  c2.join();
}

// Larson: each thread owns a table for one round, replacing random objects, then the tables
// are swapped, so most frees are of objects the other thread allocated.
void Larson(double scale, bool sized) {
  constexpr std::size_t kObjects = 4000;
  const int rounds = static_cast<int>(200 * scale) + 1;
  constexpr int kReplacementsPerRound = 10'000;
  struct Table {
    std::vector<char*> object = std::vector<char*>(kObjects, nullptr);
    std::vector<std::size_t> size = std::vector<std::size_t>(kObjects, 0);
  };
  Table tables[2];
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  auto barrier = [&] {
    const int g = generation.load();
    if (arrived.fetch_add(1) == 1) {
      arrived = 0;
      generation.fetch_add(1);
    } else {
      while (generation.load() == g) std::this_thread::yield();
    }
  };
  auto release = [sized](char* p, std::size_t size) {
    if (sized) {
      ::operator delete(p, size);
    } else {
      ::operator delete(p);
    }
  };
  auto work = [&](int id) {
    Random random(id + 11);
    std::uint64_t sum = 0;
    for (int round = 0; round < rounds; ++round) {
      Table& table = tables[(id + round) % 2];
      for (int r = 0; r < kReplacementsPerRound; ++r) {
        const std::size_t k = random.Below(kObjects);
        if (table.object[k] != nullptr) {
          sum += static_cast<unsigned char>(table.object[k][0]);
          release(table.object[k], table.size[k]);
        }
        table.size[k] = 8 + random.Below(993);
        table.object[k] = static_cast<char*>(::operator new(table.size[k]));
        table.object[k][0] = static_cast<char>(k);
      }
      barrier();  // then each thread takes the table the other one filled
    }
    checksum += sum;
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  for (Table& table : tables) {
    for (std::size_t k = 0; k < kObjects; ++k) {
      if (table.object[k] != nullptr) release(table.object[k], table.size[k]);
    }
  }
}

void BigBlocks(double scale) {
  const int iterations = static_cast<int>(100 * scale) + 1;
  const long page = sysconf(_SC_PAGESIZE);
  Random random(3);
  std::uint64_t sum = 0;
  for (int i = 0; i < iterations; ++i) {
    const std::size_t size = (5u << 20) + random.Below(20u << 20);
    auto* p = static_cast<unsigned char*>(MustMalloc(size));
    for (std::size_t at = 0; at < size; at += page) p[at] = static_cast<unsigned char>(at >> 12);
    for (std::size_t at = 0; at < size; at += 64 * page) sum += p[at];
    std::free(p);
  }
  checksum += sum;
}

// Bignum-like: numbers are heap vectors of digits, grown by realloc, most of them
// temporaries freed soon after.
void TinyObjects(double scale) {
  const long steps = static_cast<long>(6'000'000 * scale) + 1;
  struct Number {
    std::uint32_t* digit;
    std::size_t count;
  };
  Random random(5);
  std::vector<Number> live(5000, Number{nullptr, 0});
  std::uint64_t sum = 0;
  for (long i = 0; i < steps; ++i) {
    Number& a = live[random.Below(live.size())];
    Number& b = live[random.Below(live.size())];
    const std::size_t count = 1 + (a.count > b.count ? a.count : b.count) % 6;
    auto* digit = static_cast<std::uint32_t*>(MustMalloc(count * sizeof(std::uint32_t)));
    for (std::size_t d = 0; d < count; ++d) {
      digit[d] = static_cast<std::uint32_t>((d < a.count ? a.digit[d] : 1) +
                                            (d < b.count ? b.digit[d] : 2));
    }
    if (random.Below(4) == 0) {  // grows by one digit, as a carry does
      auto* grown = static_cast<std::uint32_t*>(std::realloc(digit, (count + 1) * 4));
      if (grown == nullptr) std::exit(1);
      digit = grown;
      digit[count] = 1;
    }
    sum += digit[0];
    Number& replaced = live[random.Below(live.size())];
    std::free(replaced.digit);
    replaced = Number{digit, count};
  }
  for (Number& n : live) std::free(n.digit);
  checksum += sum;
}

void ManyThreads(double scale) {
  const int waves = static_cast<int>(60 * scale) + 1;
  constexpr int kThreadsPerWave = 16;
  for (int wave = 0; wave < waves; ++wave) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreadsPerWave; ++t) {
      threads.emplace_back([wave, t] {
        Random random(wave * 100 + t + 1);
        std::vector<std::string> words;
        std::uint64_t sum = 0;
        for (int i = 0; i < 4000; ++i) {
          const std::size_t size =
              random.Below(16) == 0 ? 4096 + random.Below(60000) : 16 + random.Below(240);
          auto* p = static_cast<unsigned char*>(MustMalloc(size));
          p[0] = static_cast<unsigned char>(i);
          sum += p[0];
          std::free(p);
          words.emplace_back(24 + random.Below(40), 'x');
          if (words.size() > 64) words.erase(words.begin(), words.begin() + 32);
        }
        checksum += sum + words.size();
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
}

void FalseSharing(double scale) {
  const long rounds = static_cast<long>(200'000 * scale) + 1;
  auto work = [rounds](int id) {
    Random random(id + 21);
    std::uint64_t sum = 0;
    for (long round = 0; round < rounds; ++round) {
      const std::size_t size = 8 + random.Below(56);
      auto* scratch = static_cast<volatile unsigned char*>(MustMalloc(size));
      for (int w = 0; w < 500; ++w) scratch[w % size] = static_cast<unsigned char>(w + id);
      sum += scratch[0];
      std::free(const_cast<unsigned char*>(scratch));
    }
    checksum += sum;
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
}

void Pairs(double scale) {
  const long pairs = static_cast<long>(1'000'000 * scale) + 1;
  std::uint64_t sum = 0;
  for (long i = 0; i < pairs; ++i) {
    auto* p = static_cast<volatile unsigned char*>(MustMalloc(64));
    p[0] = static_cast<unsigned char>(i);
    sum += p[0];
    std::free(const_cast<unsigned char*>(p));
  }
  checksum += sum;
}

long VmRssKib() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::strtol(line + 6, nullptr, 10);
  }
  std::fclose(status);
  return kib;
}

void IdleRss(double scale) {
  Random random(9);
  std::vector<void*> blocks;
  std::size_t total = 0;
  // SCALE < 1 (the harness's quick mode) shrinks the burst, down to 16 MiB.
  const std::size_t burst = std::max<std::size_t>(16u << 20, (256u << 20) * std::min(scale, 1.0));
  while (total < burst) {
    // Half of the bytes in small objects, half in blocks of 64 KiB-2 MiB.
    const std::size_t size =
        random.Below(2) == 0 ? 16 + random.Below(1000) : (64u << 10) + random.Below(2u << 20);
    auto* p = static_cast<unsigned char*>(MustMalloc(size));
    std::memset(p, 1, size);
    blocks.push_back(p);
    total += size;
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {  // freed in random order
    std::swap(blocks[i], blocks[i + random.Below(blocks.size() - i)]);
  }
  for (void* p : blocks) std::free(p);
  blocks = std::vector<void*>();
  const double seconds = scale < 1 ? 2 * scale : 2;
  usleep(static_cast<useconds_t>(seconds * 1e6));
  std::printf("idle-rss rss_kib=%ld\n", VmRssKib());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: override_shapes SHAPE SCALE (see bench/override/shapes.cpp)\n");
    return 2;
  }
  const std::string shape = argv[1];
  char* end = nullptr;
  const double scale = std::strtod(argv[2], &end);
  if (end == argv[2] || *end != '\0' || !(scale > 0) || scale > 1000) {
    std::fprintf(stderr, "override_shapes: SCALE must be a number in (0, 1000], got '%s'\n",
                 argv[2]);
    return 2;
  }
  if (shape == "random-small")
    RandomSmall(scale);
  else if (shape == "producer-consumer")
    ProducerConsumer(scale);
  else if (shape == "larson")
    Larson(scale, false);
  else if (shape == "larson-sized")
    Larson(scale, true);
  else if (shape == "big-blocks")
    BigBlocks(scale);
  else if (shape == "tiny-objects")
    TinyObjects(scale);
  else if (shape == "many-threads")
    ManyThreads(scale);
  else if (shape == "false-sharing")
    FalseSharing(scale);
  else if (shape == "pairs")
    Pairs(scale);
  else if (shape == "idle-rss") {
    IdleRss(scale);
    return 0;
  } else {
    std::fprintf(stderr, "override_shapes: unknown shape '%s' (see bench/override/shapes.cpp)\n",
                 shape.c_str());
    return 2;
  }
  std::printf("%s checksum=%llu\n", shape.c_str(),
              static_cast<unsigned long long>(checksum.load()));
  return 0;
}
