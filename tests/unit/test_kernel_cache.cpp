#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/lru_cache.hpp"
#include "process_support.hpp"

using dsa_indexer::detail::LruCache;

TEST_CASE("lru counts hits, misses and evictions exactly", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(2);
  int made = 0;
  auto make = [&](int v) { return [&, v] { ++made; return std::make_shared<int>(v); }; };
  CHECK(*c.get_or_create("a", make(1)) == 1);
  CHECK(*c.get_or_create("b", make(2)) == 2);
  CHECK(*c.get_or_create("a", make(99)) == 1);  // hit, promotes a
  auto s = c.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  CHECK(s.evictions == 0);
  CHECK(s.entries == 2);
  CHECK(s.capacity == 2);
  CHECK(*c.get_or_create("c", make(3)) == 3);   // evicts b, the least recently used
  s = c.stats();
  CHECK(s.evictions == 1);
  CHECK(c.keys() == std::vector<std::string>{"c", "a"});
  CHECK(*c.get_or_create("b", make(4)) == 4);   // b was evicted: produced again, evicts a
  CHECK(c.keys() == std::vector<std::string>{"b", "c"});
  CHECK(made == 4);
  s = c.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 4);
  CHECK(s.evictions == 2);
}

TEST_CASE("lru eviction never frees a value a caller still holds", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(1);
  std::shared_ptr<int> held = c.get_or_create("a", [] { return std::make_shared<int>(7); });
  std::weak_ptr<int> watch = held;
  c.get_or_create("b", [] { return std::make_shared<int>(8); });
  CHECK(c.stats().evictions == 1);
  REQUIRE_FALSE(watch.expired());
  CHECK(*held == 7);
  held.reset();
  CHECK(watch.expired());
}

TEST_CASE("lru failed productions are not cached and reach every waiter", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(4);
  int calls = 0;
  auto bad = [&]() -> std::shared_ptr<int> { ++calls; throw std::runtime_error("compile failed"); };
  CHECK_THROWS_WITH(c.get_or_create("k", bad), "compile failed");
  CHECK_THROWS_WITH(c.get_or_create("k", bad), "compile failed");
  CHECK(calls == 2);
  CHECK(c.stats().entries == 0);
  CHECK(*c.get_or_create("k", [] { return std::make_shared<int>(1); }) == 1);
}

TEST_CASE("lru: 16 threads hammering 4 keys compile exactly 4 times", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(256);
  std::atomic<int> compiles{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 200; ++i) {
        const int k = (t + i) % 4;
        auto v = c.get_or_create("key" + std::to_string(k), [&, k] {
          compiles.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow compile, no lock held
          return std::make_shared<int>(k);
        });
        if (*v != k) wrong.fetch_add(1);
      }
    });
  go = true;
  for (auto& th : threads) th.join();
  CHECK(compiles.load() == 4);
  CHECK(wrong.load() == 0);
  auto s = c.stats();
  CHECK(s.misses == 4);
  CHECK(s.hits == 16 * 200 - 4);
  CHECK(s.entries == 4);
}

TEST_CASE("lru: a slow key does not block other keys", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(8);
  std::atomic<bool> release{false};
  std::thread slow([&] {
    c.get_or_create("slow", [&] {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return std::make_shared<int>(1);
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto t0 = std::chrono::steady_clock::now();
  CHECK(*c.get_or_create("fast", [] { return std::make_shared<int>(2); }) == 2);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  release = true;
  slow.join();
}

namespace {
// A production of `key` on a thread of its own that runs until finish(); constructed, it has
// started (the key is in flight).
class SlowProduction {
 public:
  SlowProduction(LruCache<std::shared_ptr<int>>& c, std::string key, int value)
      : thread_([this, &c, key, value] {
          c.get_or_create(key, [&] {
            started_ = true;
            while (!release_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return std::make_shared<int>(value);
          });
        }) {
    while (!started_.load()) std::this_thread::yield();
  }
  ~SlowProduction() { finish(); }
  void finish() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> release_{false}, started_{false};
  std::thread thread_;  // declared last: it starts once the flags exist
};
}  // namespace

TEST_CASE("lru find: a ready entry is a hit and promotes; absent or in flight counts nothing and never waits", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(2);
  CHECK(c.find("a") == nullptr);
  bool produced = true;
  c.get_or_create("a", [] { return std::make_shared<int>(1); }, &produced);
  CHECK(produced);
  c.get_or_create("b", [] { return std::make_shared<int>(2); });
  c.get_or_create("a", [] { return std::make_shared<int>(9); }, &produced);
  CHECK_FALSE(produced);  // a hit
  auto s = c.stats();
  CHECK(s.hits == 1);
  CHECK(s.misses == 2);
  REQUIRE(c.find("b") != nullptr);  // promotes b over a
  CHECK(*c.find("b") == 2);
  CHECK(c.keys() == std::vector<std::string>{"b", "a"});
  CHECK(c.find("zz") == nullptr);
  s = c.stats();
  CHECK(s.hits == 3);
  CHECK(s.misses == 2);

  // In flight: find returns at once with nothing, and counts nothing.
  SlowProduction slow(c, "slow", 3);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(c.find("slow") == nullptr);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  CHECK(c.stats().hits == 3);
  CHECK(c.stats().misses == 3);
  slow.finish();
  REQUIRE(c.find("slow") != nullptr);
}

TEST_CASE("lru: after fork the child produces a key that was in flight in the parent", "[kernel_cache]") {
  LruCache<std::shared_ptr<int>> c(4);
  c.get_or_create("ready", [] { return std::make_shared<int>(1); });
  SlowProduction producer(c, "orphan", 2);
  // What the process runtime's pthread_atfork handlers do around a fork.
  c.fork_prepare();
  const auto r = dsa_test::run_in_child([&] {
    c.fork_child();
    ::alarm(20);  // a wait on the orphaned production would hang: die by SIGALRM instead
    bool produced = false;
    const int v = *c.get_or_create("orphan", [] { return std::make_shared<int>(7); }, &produced);
    const bool ready_kept = c.find("ready") && *c.find("ready") == 1;
    return v == 7 && produced && ready_kept ? 0 : 1;
  });
  c.fork_parent();
  CHECK(r.exited);
  CHECK(r.code == 0);
  producer.finish();
  REQUIRE(c.find("orphan") != nullptr);
  CHECK(*c.find("orphan") == 2);  // the parent's own production
}
