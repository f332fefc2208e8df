// The background compile worker of DSA_INDEXER_LEAN_COMPILE=async, driven by a fake compiler
// (a job function that records what it ran): dedupe, the bounded queue, failures, shutdown,
// exit and fork.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "jit/background_compiler.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

using dsa_indexer::detail::BackgroundCompiler;
using dsa_indexer::detail::BackgroundJob;
using dsa_indexer::detail::KernelSpec;
using Offer = BackgroundCompiler::Offer;
using namespace std::chrono_literals;

namespace {

// A fake compiler: records the keys it ran; a key in `slow` runs until `release` is set; a key
// starting with "bad" throws.
struct FakeCompiler {
  std::mutex mu;
  std::vector<std::string> ran;
  std::atomic<int> running{0};
  std::atomic<bool> release{false};
  std::string slow;
  std::chrono::milliseconds delay{0};

  BackgroundCompiler::Job job() {
    return [this](const BackgroundJob& j) {
      running.fetch_add(1);
      if (j.key == slow)
        while (!release.load()) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(delay);
      {
        std::lock_guard<std::mutex> lk(mu);
        ran.push_back(j.key);
      }
      running.fetch_sub(1);
      if (j.key.rfind("bad", 0) == 0) throw std::runtime_error("ptxas: out of registers (fake)");
      return true;
    };
  }
  std::vector<std::string> ran_keys() {
    std::lock_guard<std::mutex> lk(mu);
    return ran;
  }
  void wait_running() {
    while (running.load() == 0) std::this_thread::sleep_for(1ms);
  }
};

Offer offer(BackgroundCompiler& c, const std::string& key) { return c.offer(key, KernelSpec{}, 0); }

}  // namespace

TEST_CASE("background: 16 threads offering one key run exactly one job", "[async]") {
  FakeCompiler fake;
  fake.delay = 50ms;
  BackgroundCompiler c(fake.job());
  std::atomic<bool> go{false};
  std::atomic<int> queued{0}, pending{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 50; ++i) {
        const Offer o = offer(c, "dev0/fast/key1");
        if (o == Offer::queued) queued.fetch_add(1);
        if (o == Offer::pending) pending.fetch_add(1);
      }
    });
  go = true;
  for (auto& th : threads) th.join();
  REQUIRE(c.wait_idle(10s));
  CHECK(fake.ran_keys() == std::vector<std::string>{"dev0/fast/key1"});
  // Every offer while the job was queued or running was `pending`; one that came after it
  // finished (the variant resident, which the caller checks first) may queue it again, but with
  // a 50 ms job and 800 offers made at once there is exactly one.
  CHECK(queued.load() == 1);
  CHECK(pending.load() == 16 * 50 - 1);
  const auto s = c.stats();
  CHECK(s.queued == 1);
  CHECK(s.completed == 1);
  CHECK(s.failed == 0);
  CHECK(s.pending == 0);
}

TEST_CASE("background: the queue is bounded; a refused key is counted and may be offered again", "[async]") {
  FakeCompiler fake;
  fake.slow = "k0";
  BackgroundCompiler c(fake.job(), 4);
  CHECK(offer(c, "k0") == Offer::queued);
  fake.wait_running();  // k0 runs: it no longer waits in the queue
  for (const char* k : {"k1", "k2", "k3", "k4"}) CHECK(offer(c, k) == Offer::queued);
  CHECK(offer(c, "k5") == Offer::full);
  CHECK(offer(c, "k6") == Offer::full);
  CHECK(offer(c, "k1") == Offer::pending);  // a queued key is pending, not refused
  auto s = c.stats();
  CHECK(s.rejected == 2);
  CHECK(s.queued == 5);
  CHECK(s.pending == 5);
  fake.release = true;
  REQUIRE(c.wait_idle(10s));
  CHECK(offer(c, "k5") == Offer::queued);  // offered again later, once there is room
  REQUIRE(c.wait_idle(10s));
  CHECK(fake.ran_keys() == std::vector<std::string>{"k0", "k1", "k2", "k3", "k4", "k5"});
  s = c.stats();
  CHECK(s.completed == 6);
  CHECK(s.rejected == 2);
}

TEST_CASE("background: a failing job is reported once and its key never runs again", "[async]") {
  FakeCompiler fake;
  dsa_test::MessageLog warnings;
  BackgroundCompiler c(fake.job(), 64, warnings.sink());
  CHECK(offer(c, "bad/key") == Offer::queued);
  CHECK(offer(c, "good/key") == Offer::queued);
  REQUIRE(c.wait_idle(10s));
  REQUIRE(warnings.count() == 1);
  CHECK_THAT(warnings.messages()[0], Catch::Contains("bad/key") && Catch::Contains("out of registers") &&
                                   Catch::Contains("fallback family for the life of the process"));
  for (int i = 0; i < 20; ++i) CHECK(offer(c, "bad/key") == Offer::failed);
  REQUIRE(c.wait_idle(10s));
  CHECK(fake.ran_keys() == std::vector<std::string>{"bad/key", "good/key"});
  CHECK(warnings.count() == 1);
  const auto s = c.stats();
  CHECK(s.failed == 1);
  CHECK(s.completed == 1);
  CHECK(s.queued == 2);
}

TEST_CASE("background: shutdown with jobs queued and one running joins without running the queue", "[async]") {
  const int threads_before = dsa_test::thread_count();
  FakeCompiler fake;
  fake.delay = 200ms;
  {
    BackgroundCompiler c(fake.job());
    CHECK_FALSE(c.has_thread());  // started by the first offer, not before
    for (const char* k : {"run", "q1", "q2", "q3"}) CHECK(offer(c, k) == Offer::queued);
    CHECK(c.has_thread());
    fake.wait_running();
    const auto t0 = std::chrono::steady_clock::now();
    c.shutdown();
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK_FALSE(c.has_thread());
    CHECK(fake.ran_keys() == std::vector<std::string>{"run"});  // the running one finished
    const auto s = c.stats();
    CHECK(s.dropped == 3);
    CHECK(s.completed == 1);
    CHECK(s.pending == 0);
    CHECK(offer(c, "late") == Offer::stopped);
    c.shutdown();  // idempotent
  }
  CHECK(dsa_test::thread_count() == threads_before);
  // The destructor alone does the same.
  {
    BackgroundCompiler c(fake.job());
    offer(c, "d1");
    offer(c, "d2");
  }
  CHECK(dsa_test::thread_count() == threads_before);
}

TEST_CASE("background: process exit joins the worker, with a job running and more queued", "[async_process]") {
  const auto r = dsa_test::run_in_child([]() -> int {
    ::alarm(30);
    // Registered before the worker starts, so it runs after the worker's exit handler.
    std::atexit([] { std::printf("threads at exit: %d\n", dsa_test::thread_count()); });
    auto* fake = new FakeCompiler();  // process lifetime, as the library's worker is
    fake->delay = 300ms;
    auto* c = new BackgroundCompiler([fake](const BackgroundJob& j) {
      const bool produced = fake->job()(j);
      std::printf("done %s\n", j.key.c_str());
      return produced;
    });
    for (const char* k : {"first", "second", "third"}) offer(*c, k);
    fake->wait_running();
    std::exit(0);  // not _exit: the exit handlers run
  });
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  CHECK(dsa_test::count_of(r.output, "done first") == 1);
  CHECK(dsa_test::count_of(r.output, "done second") == 0);
  CHECK(dsa_test::count_of(r.output, "threads at exit: 1") == 1);
}

TEST_CASE("background: a fork while a job runs; the child starts its own worker, the parent goes on", "[async_process]") {
  FakeCompiler fake;
  fake.slow = "slow";
  dsa_test::MessageLog warnings;
  BackgroundCompiler c(fake.job(), 64, warnings.sink());
  CHECK(offer(c, "slow") == Offer::queued);
  CHECK(offer(c, "queued") == Offer::queued);
  CHECK(offer(c, "bad/before") == Offer::queued);
  fake.wait_running();
  const auto r = dsa_test::run_in_child([&]() -> int {
    ::alarm(30);  // a deadlock dies by SIGALRM instead of hanging the test
    int fails = 0;
    auto expect = [&](bool ok, const char* what) {
      if (ok) return;
      std::printf("child: FAILED %s\n", what);
      ++fails;
    };
    expect(!c.has_thread(), "no worker thread in the child");
    expect(c.stats().pending == 0, "the parent's queued and running keys are forgotten");
    fake.release = true;  // this process's copy: "slow" does not block here
    expect(offer(c, "child") == Offer::queued, "a child offer queues");
    expect(c.has_thread(), "the child started its own worker");
    expect(offer(c, "slow") == Offer::queued, "the parent's running key is offered again");
    expect(c.wait_idle(std::chrono::seconds(10)), "the child's worker drains its queue");
    const auto ran = fake.ran_keys();
    expect(ran == std::vector<std::string>{"child", "slow"}, "the child ran its own jobs");
    expect(c.stats().completed == 2, "counted");
    c.shutdown();
    expect(dsa_test::thread_count() == 1, "no thread left after shutdown");
    std::fflush(stdout);
    std::exit(fails);  // the exit handlers (inherited ones included) run and find nothing to join
  });
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  // The parent's worker was not disturbed: its running job finishes, its queue runs.
  fake.release = true;
  REQUIRE(c.wait_idle(10s));
  CHECK(fake.ran_keys() == std::vector<std::string>{"slow", "queued", "bad/before"});
  CHECK(offer(c, "after") == Offer::queued);
  REQUIRE(c.wait_idle(10s));
  const auto s = c.stats();
  CHECK(s.completed == 3);
  CHECK(s.failed == 1);
  CHECK(warnings.count() == 1);
}

TEST_CASE("background: shutdown calls the cancel function for a running job; its failure is dropped, not reported", "[async]") {
  std::atomic<bool> cancelled{false}, running{false};
  dsa_test::MessageLog warnings;
  BackgroundCompiler c(
      [&](const BackgroundJob&) -> bool {
        running = true;
        while (!cancelled.load()) std::this_thread::sleep_for(1ms);
        throw std::runtime_error("helper killed (fake)");
      },
      64, warnings.sink(), [&] { cancelled = true; });
  CHECK(offer(c, "running") == Offer::queued);
  CHECK(offer(c, "queued") == Offer::queued);
  while (!running.load()) std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  c.shutdown();
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(cancelled.load());
  const auto s = c.stats();
  CHECK(s.dropped == 2);  // the queued one and the cancelled one
  CHECK(s.failed == 0);
  CHECK(warnings.count() == 0);
  // Without a running job there is nothing to cancel.
  std::atomic<int> calls{0};
  {
    BackgroundCompiler idle([](const BackgroundJob&) { return true; }, 64, nullptr, [&] { calls.fetch_add(1); });
  }
  CHECK(calls.load() == 0);
}
