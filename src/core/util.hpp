#pragma once
// Small helpers shared by the host sources: formatted typed errors and logging.
#include <fmt/format.h>

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

// Warnings go to stderr with a fixed prefix; callers decide how often (see warn_once users).
void log_warning(const std::string& msg);
void log_info(const std::string& msg);

}  // namespace dsa_indexer::detail
