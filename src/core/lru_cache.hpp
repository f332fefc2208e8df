#pragma once
// Bounded, thread-safe LRU of loaded kernels with single-flight production.
//
// Contract:
//  - capacity: at most `capacity` ready entries; inserting one more evicts the least recently
//    used. In-flight productions do not count until they complete.
//  - promotion: a hit (get_or_create finding a ready entry) makes the entry most recent.
//  - single flight: concurrent callers of one key wait for one production; callers of other
//    keys proceed. The mutex is never held while producing.
//  - failure: a production that throws is not cached; every waiter gets the exception and the
//    next caller produces again.
//  - eviction: the cache drops its reference; values are shared_ptr, so a module a launch
//    still holds stays loaded until that launch's reference goes. Evicted values are destroyed
//    outside the lock.
//  - counters: hits (ready entry, or a wait on an in-flight production), misses (productions
//    started), evictions; exact, read under the lock.
//  - find: a non-blocking look for a ready entry. Found, it is a hit and promotes, as in
//    get_or_create; not found (absent, or still in flight) it counts neither a hit nor a miss,
//    since it starts no production and waits for none (its caller counts what it does instead).
//  - fork: fork_prepare/fork_parent/fork_child hold the lock across fork(); the child drops the
//    in-flight productions, whose producing threads did not survive the fork (a waiter there
//    would wait forever), so the next caller of such a key produces it again.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dsa_indexer::detail {

struct LruStats {
  uint64_t hits = 0, misses = 0, evictions = 0, entries = 0, capacity = 0;
};

template <class V>
class LruCache {
 public:
  explicit LruCache(std::size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // `make` is any callable returning V (a template, so that a hit costs no std::function).
  // `produced`, when given, is set to whether this call ran `make` (a miss) and it returned.
  template <class Make>
  V get_or_create(const std::string& key, Make&& make, bool* produced = nullptr) {
    if (produced) *produced = false;
    std::unique_lock<std::mutex> lk(mu_);
    if (auto it = ready_.find(key); it != ready_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second.pos);
      return it->second.value;
    }
    if (auto it = inflight_.find(key); it != inflight_.end()) {
      ++stats_.hits;
      std::shared_future<V> f = it->second;
      lk.unlock();
      return f.get();
    }
    ++stats_.misses;
    std::promise<V> promise;
    inflight_.emplace(key, promise.get_future().share());
    lk.unlock();

    V value;
    try {
      value = make();
    } catch (...) {
      lk.lock();
      inflight_.erase(key);
      lk.unlock();
      promise.set_exception(std::current_exception());
      throw;
    }
    std::vector<V> evicted;
    lk.lock();
    inflight_.erase(key);
    order_.push_front(key);
    ready_[key] = Entry{value, order_.begin()};
    while (ready_.size() > capacity_) {
      const std::string victim = order_.back();
      order_.pop_back();
      auto vit = ready_.find(victim);
      evicted.push_back(std::move(vit->second.value));
      ready_.erase(vit);
      ++stats_.evictions;
    }
    lk.unlock();
    promise.set_value(value);
    evicted.clear();  // destroyed here, outside the lock
    if (produced) *produced = true;
    return value;
  }

  // The ready value of `key`, or V{} when there is none yet; never waits (see the contract).
  V find(const std::string& key) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = ready_.find(key);
    if (it == ready_.end()) return V{};
    ++stats_.hits;
    order_.splice(order_.begin(), order_, it->second.pos);
    return it->second.value;
  }

  void fork_prepare() { mu_.lock(); }
  void fork_parent() { mu_.unlock(); }
  void fork_child() {
    // Each shared state is also held by the promise on the stack of a producing thread that
    // does not exist here, so dropping our reference only decrements its count (and leaks it).
    inflight_.clear();
    mu_.unlock();
  }

  LruStats stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    LruStats s = stats_;
    s.entries = ready_.size();
    s.capacity = capacity_;
    return s;
  }

  // Keys from most to least recently used.
  std::vector<std::string> keys() const {
    std::lock_guard<std::mutex> lk(mu_);
    return {order_.begin(), order_.end()};
  }

  void clear() {
    std::unordered_map<std::string, Entry> old;
    {
      std::lock_guard<std::mutex> lk(mu_);
      old.swap(ready_);
      order_.clear();
    }
  }

 private:
  struct Entry {
    V value;
    std::list<std::string>::iterator pos;
  };
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // front = most recently used
  std::unordered_map<std::string, Entry> ready_;
  std::unordered_map<std::string, std::shared_future<V>> inflight_;
  LruStats stats_;
};

}  // namespace dsa_indexer::detail
