#pragma once
// One background thread that produces kernel variants off the calling threads
// (DSA_INDEXER_LEAN_COMPILE=async; docs/DESIGN.md, "Compile modes"). It knows nothing of CUDA
// or NVRTC: it runs the job function it was built with, so tests drive it with a fake compiler.
//
// Contract:
//  - offer(key): at most one job per key at a time (a key queued or running is `pending`); a
//    key whose job threw is `failed` for the life of the object and never runs again; at most
//    `capacity` keys wait behind the running one (one more is `full`: counted, not queued, and
//    the caller may offer it again later); after shutdown every offer is `stopped`.
//  - the thread starts on the first offer that queues; jobs run one at a time, in offer order,
//    with every signal blocked (they go to the application's threads).
//  - a job that throws is reported once: one call of the warn sink, naming the key, and a
//    counter. A job returns whether it produced its variant (false: it found it done).
//  - shutdown(): drops the queued jobs, calls the cancel function (given at construction: it
//    makes the running job end soon, e.g. by killing its compile helper), waits for the running
//    job and joins the thread. A job that fails once shutdown has begun is counted as dropped,
//    neither reported nor remembered as failed (shutdown caused it). The destructor shuts down;
//    so does an exit handler registered at every thread start, which therefore runs before the
//    destructors of the statics constructed before that start (the process instance makes sure
//    that everything its jobs touch exists by then, or is never destroyed), and again at every
//    order_exit_handler_last() (see there).
//  - fork: pthread_atfork handlers hold every instance's lock across fork(). The child has no
//    worker thread: its queued and running keys are forgotten (later calls offer them again),
//    failures and counters are inherited, and its first offer that queues starts its own
//    thread. Jobs must not fork() themselves (the compile helper is started with posix_spawn,
//    which runs no fork handlers).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>

#include "core/kernel_spec.hpp"

namespace dsa_indexer::detail {

struct BackgroundJob {
  std::string key;  // what deduplicates jobs: the in-memory key of the variant
  KernelSpec spec;
  int device = 0;
};

struct BackgroundStats {
  uint64_t queued = 0;     // offers that queued a job
  uint64_t completed = 0;  // jobs that produced their variant
  uint64_t failed = 0;     // jobs that threw (each key once: it never runs again)
  uint64_t rejected = 0;   // offers refused because `capacity` jobs were waiting
  uint64_t dropped = 0;    // queued or running jobs abandoned by shutdown or by a fork
  uint64_t pending = 0;    // queued + running now
};

class BackgroundCompiler {
 public:
  enum class Offer { queued, pending, failed, full, stopped };
  using Job = std::function<bool(const BackgroundJob&)>;
  using Warn = std::function<void(const std::string&)>;
  using Cancel = std::function<void()>;
  static constexpr std::size_t kDefaultCapacity = 64;

  explicit BackgroundCompiler(Job job, std::size_t capacity = kDefaultCapacity, Warn warn = nullptr,
                              Cancel cancel = nullptr);

  // Registers the exit handler again, so that it runs before every exit handler registered
  // until now. A library that registers exit-time destructors lazily, while a job uses it
  // (NVRTC does, during compiles), must not have them run before the job is joined: a job
  // calls this after such a use.
  static void order_exit_handler_last();
  ~BackgroundCompiler();
  BackgroundCompiler(const BackgroundCompiler&) = delete;
  BackgroundCompiler& operator=(const BackgroundCompiler&) = delete;

  Offer offer(const std::string& key, const KernelSpec& spec, int device);
  void shutdown();
  BackgroundStats stats() const;
  bool has_thread() const;
  // Waits until nothing is queued or running; false if `timeout` passed first (tests, tools).
  bool wait_idle(std::chrono::milliseconds timeout) const;

  // The fork handlers' steps for one instance (called by the registry in the .cpp).
  void fork_prepare();
  void fork_parent();
  void fork_child();

 private:
  void run();
  void start_thread_locked();

  const Job job_;
  const std::size_t capacity_;
  const Warn warn_;
  const Cancel cancel_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  mutable std::condition_variable idle_cv_;
  std::deque<BackgroundJob> queue_;
  std::unordered_set<std::string> pending_;  // queued or running
  std::set<std::string> failed_;
  std::unique_ptr<std::thread> thread_;
  bool stopping_ = false;
  bool start_warned_ = false;
  BackgroundStats stats_;
};

}  // namespace dsa_indexer::detail
