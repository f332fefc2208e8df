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
  template <class Make>
  V get_or_create(const std::string& key, Make&& make) {
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
    return value;
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
