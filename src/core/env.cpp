#include "core/env.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dsa_indexer/errors.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

std::string get_str(const EnvGetter& get, const char* name) {
  const char* v = get(name);
  return v ? std::string(v) : std::string();
}

bool parse_bool(const std::string& v, const char* name) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail_param<InvalidArgument>("environment", name, "one of 1/0/true/false/on/off/yes/no",
                              fmt::format("'{}'", v));
}

}  // namespace

EnvConfig parse_env(const EnvGetter& get) {
  EnvConfig c;
  std::string dir = get_str(get, "DSA_INDEXER_CACHE_DIR");
  if (dir.empty()) {
    std::string xdg = get_str(get, "XDG_CACHE_HOME");
    std::string home = get_str(get, "HOME");
    if (!xdg.empty())
      dir = xdg + "/dsa_indexer";
    else if (!home.empty())
      dir = home + "/.cache/dsa_indexer";
  }
  c.cache_dir = dir;  // may stay empty: then the disk cache is memory-only (warned at first use)

  std::string disk = get_str(get, "DSA_INDEXER_DISK_CACHE");
  if (!disk.empty()) c.disk_cache = parse_bool(disk, "DSA_INDEXER_DISK_CACHE");

  c.prebuilt_dir = get_str(get, "DSA_INDEXER_PREBUILT_DIR");
  c.dump_dir = get_str(get, "DSA_INDEXER_DUMP_DIR");

  std::string cap = get_str(get, "DSA_INDEXER_CACHE_CAPACITY");
  if (!cap.empty()) {
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(cap.c_str(), &end, 10);
    if (errno != 0 || end == cap.c_str() || *end != '\0' || n < 1 || n > (1ull << 20) || cap[0] == '-')
      fail_param<InvalidArgument>("environment", "DSA_INDEXER_CACHE_CAPACITY",
                                  "an integer in [1, 1048576]", fmt::format("'{}'", cap));
    c.cache_capacity = static_cast<std::size_t>(n);
  }

  c.disable_lean = !get_str(get, "DSA_INDEXER_DISABLE_LEAN").empty() ||
                   !get_str(get, "CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN").empty();

  std::string iso = get_str(get, "DSA_INDEXER_COMPILE_ISOLATION");
  if (iso.empty() || iso == "none" || iso == "in-process")
    c.isolation = CompileIsolation::in_process;
  else if (iso == "process")
    c.isolation = CompileIsolation::process;
  else
    fail_param<InvalidArgument>("environment", "DSA_INDEXER_COMPILE_ISOLATION",
                                "'none' or 'process'", fmt::format("'{}'", iso));

  c.compile_helper = get_str(get, "DSA_INDEXER_COMPILE_HELPER");

  std::string timeout = get_str(get, "DSA_INDEXER_COMPILE_TIMEOUT");
  if (!timeout.empty()) {
    char* end = nullptr;
    errno = 0;
    unsigned long long n = std::strtoull(timeout.c_str(), &end, 10);
    if (errno != 0 || end == timeout.c_str() || *end != '\0' || timeout[0] == '-' || n < 1 || n > 86400)
      fail_param<InvalidArgument>("environment", "DSA_INDEXER_COMPILE_TIMEOUT", "an integer number of seconds in [1, 86400]",
                                  fmt::format("'{}'", timeout));
    c.compile_timeout_s = static_cast<int>(n);
  }

  if (std::string t = get_str(get, "TMPDIR"); !t.empty()) c.temp_dir = t;

  std::string mode = get_str(get, "DSA_INDEXER_LEAN_COMPILE");
  if (mode.empty() || mode == "sync")
    c.lean_compile = LeanCompile::sync;
  else if (mode == "async")
    c.lean_compile = LeanCompile::async;
  else
    fail_param<InvalidArgument>("environment", "DSA_INDEXER_LEAN_COMPILE", "'sync' or 'async'", fmt::format("'{}'", mode));

  c.record_manifest = get_str(get, "DSA_INDEXER_RECORD_MANIFEST");

  std::string lvl = get_str(get, "DSA_INDEXER_LOG");
  if (lvl.empty() || lvl == "warn")
    c.log_level = LogLevel::warn;
  else if (lvl == "quiet")
    c.log_level = LogLevel::quiet;
  else if (lvl == "info")
    c.log_level = LogLevel::info;
  else
    fail_param<InvalidArgument>("environment", "DSA_INDEXER_LOG", "'quiet', 'warn' or 'info'",
                                fmt::format("'{}'", lvl));
  return c;
}

const EnvConfig& env() {
  // Never destroyed: a background compile (background_compiler.hpp) may still log while the
  // process runs its exit handlers, before the worker's joiner has run.
  static const EnvConfig* config = new EnvConfig(parse_env([](const char* n) { return std::getenv(n); }));
  return *config;
}

void log_warning(const std::string& msg) {
  if (env().log_level >= LogLevel::warn) std::fprintf(stderr, "[dsa-indexer] warning: %s\n", msg.c_str());
}

void log_info(const std::string& msg) {
  if (env().log_level >= LogLevel::info) std::fprintf(stderr, "[dsa-indexer] %s\n", msg.c_str());
}

}  // namespace dsa_indexer::detail
