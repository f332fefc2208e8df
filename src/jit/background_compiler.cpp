#include "jit/background_compiler.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

// Every live instance, for the fork handlers and the exit handler. Never destroyed: both may
// run while static destructors do.
struct Registry {
  std::mutex mu;
  std::vector<BackgroundCompiler*> live;
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

void fork_prepare_all() {
  Registry& r = registry();
  r.mu.lock();
  for (BackgroundCompiler* c : r.live) c->fork_prepare();
}
void fork_parent_all() {
  Registry& r = registry();
  for (BackgroundCompiler* c : r.live) c->fork_parent();
  r.mu.unlock();
}
void fork_child_all() {
  Registry& r = registry();
  for (BackgroundCompiler* c : r.live) c->fork_child();
  r.mu.unlock();
}

void shutdown_all_at_exit() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  for (BackgroundCompiler* c : r.live) c->shutdown();
}

void register_instance(BackgroundCompiler* c) {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(fork_prepare_all, fork_parent_all, fork_child_all); });
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.live.push_back(c);
}

void unregister_instance(BackgroundCompiler* c) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.live.erase(std::remove(r.live.begin(), r.live.end(), c), r.live.end());
}

}  // namespace

BackgroundCompiler::BackgroundCompiler(Job job, std::size_t capacity, Warn warn, Cancel cancel)
    : job_(std::move(job)), capacity_(std::max<std::size_t>(capacity, 1)),
      warn_(warn ? std::move(warn) : Warn(log_warning)), cancel_(std::move(cancel)) {
  register_instance(this);
}

void BackgroundCompiler::order_exit_handler_last() { std::atexit(shutdown_all_at_exit); }

BackgroundCompiler::~BackgroundCompiler() {
  unregister_instance(this);
  shutdown();
}

BackgroundCompiler::Offer BackgroundCompiler::offer(const std::string& key, const KernelSpec& spec, int device) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return Offer::stopped;
    if (pending_.count(key)) return Offer::pending;
    if (failed_.count(key)) return Offer::failed;
    if (queue_.size() >= capacity_) {
      ++stats_.rejected;
      return Offer::full;
    }
    if (!thread_) {
      start_thread_locked();
      if (!thread_) {
        ++stats_.rejected;
        return Offer::full;
      }
    }
    queue_.push_back(BackgroundJob{key, spec, device});
    pending_.insert(key);
    ++stats_.queued;
  }
  work_cv_.notify_one();
  return Offer::queued;
}

void BackgroundCompiler::start_thread_locked() {
  // Registered at every start, so that it runs before the destructors of every static that
  // existed when this thread started (exit handlers and static destructors run in reverse
  // order of registration); it is idempotent, and a child after fork registers its own.
  std::atexit(shutdown_all_at_exit);
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);  // the new thread inherits the mask
  try {
    thread_ = std::make_unique<std::thread>([this] { run(); });
  } catch (const std::exception& e) {
    // No thread (EAGAIN): the caller runs the fallback; a later offer tries again.
    if (!start_warned_) warn_(fmt::format("cannot start the background compile thread: {}", e.what()));
    start_warned_ = true;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void BackgroundCompiler::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    BackgroundJob job = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    bool ok = true, produced = false;
    std::string error;
    try {
      produced = job_(job);
    } catch (const std::exception& e) {
      ok = false;
      error = e.what();
    } catch (...) {
      ok = false;
      error = "unknown exception";
    }
    lk.lock();
    // A failure once shutdown began is the shutdown's doing (its cancel killed the compile).
    const bool dropped = !ok && stopping_;
    // Reported before the key leaves `pending`, so that whoever waits for idle sees the report.
    if (!ok && !dropped) {
      lk.unlock();
      warn_(fmt::format("background compile of {} failed; calls of this key keep running the fallback family for the "
                        "life of the process: {}",
                        job.key, error));
      lk.lock();
    }
    pending_.erase(job.key);
    if (dropped) {
      ++stats_.dropped;
    } else if (!ok) {
      failed_.insert(job.key);
      ++stats_.failed;
    } else if (produced) {
      ++stats_.completed;
    }
    if (pending_.empty()) idle_cv_.notify_all();
  }
}

void BackgroundCompiler::shutdown() {
  std::unique_ptr<std::thread> t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    for (const auto& j : queue_) pending_.erase(j.key);
    stats_.dropped += queue_.size();
    queue_.clear();
    t = std::move(thread_);
  }
  work_cv_.notify_all();
  if (t && cancel_) cancel_();
  if (t) {
    if (t->get_id() == std::this_thread::get_id())
      t->detach();  // a job that ended the process: it cannot join itself
    else
      t->join();
  }
  std::lock_guard<std::mutex> lk(mu_);
  idle_cv_.notify_all();
}

BackgroundStats BackgroundCompiler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  BackgroundStats s = stats_;
  s.pending = pending_.size();
  return s;
}

bool BackgroundCompiler::has_thread() const {
  std::lock_guard<std::mutex> lk(mu_);
  return thread_ != nullptr;
}

bool BackgroundCompiler::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return pending_.empty(); });
}

void BackgroundCompiler::fork_prepare() { mu_.lock(); }

void BackgroundCompiler::fork_parent() { mu_.unlock(); }

void BackgroundCompiler::fork_child() {
  // The thread object names a thread of the parent: it is never joined or destroyed here.
  (void)thread_.release();
  stats_.dropped += pending_.size();
  queue_.clear();
  pending_.clear();
  // The parent's worker may have been waiting on these: a condition variable with a waiter
  // that does not exist in this process must not be used or destroyed, so both start afresh.
  new (&work_cv_) std::condition_variable();
  new (&idle_cv_) std::condition_variable();
  mu_.unlock();
}

}  // namespace dsa_indexer::detail
