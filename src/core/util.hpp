#pragma once
// Small helpers shared by the host sources: formatted typed errors and logging.
#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <string>

#include "dsa_indexer/errors.hpp"

namespace dsa_indexer::detail {

// The one place errors are thrown with context: "<where>: <parameter>: expected <e>, got <a>".
template <class E, class Expected, class Actual>
[[noreturn]] void fail_param(const char* where, const std::string& param, const Expected& expected,
                             const Actual& actual) {
  throw E(fmt::format("{}: {}: expected {}, got {}", where, param, expected, actual));
}

template <class E, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

// A process-wide override of a compiled-in on/off default, for tests and measurements (unset:
// the default).
class FlagOverride {
 public:
  bool get(bool fallback) const {
    const int v = v_.load(std::memory_order_relaxed);
    return v < 0 ? fallback : v != 0;
  }
  // The override itself (nullopt: none set), for callers whose default is not a constant.
  std::optional<bool> forced() const {
    const int v = v_.load(std::memory_order_relaxed);
    return v < 0 ? std::nullopt : std::optional<bool>(v != 0);
  }
  void set(std::optional<bool> on) { v_.store(on ? (*on ? 1 : 0) : -1, std::memory_order_relaxed); }

 private:
  std::atomic<int> v_{-1};
};

// Warnings go to stderr with a fixed prefix; callers decide how often (see warn_once users).
void log_warning(const std::string& msg);
void log_info(const std::string& msg);

}  // namespace dsa_indexer::detail
