#include "core/env.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dsa_indexer/errors.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

// Another program's variable (HOME, XDG_CACHE_HOME, TMPDIR): empty reads as unset, as their
// own conventions say.
std::string get_str(const EnvGetter& get, const char* name) {
  const char* v = get(name);
  return v ? std::string(v) : std::string();
}

// One of ours: unset gives "" (the default), but a variable set to the empty string is an
// error, never the default: `DSA_INDEXER_CACHE_DIR=$SCRATCH` with SCRATCH unset must not
// become the user's real cache (issue 24, class 4).
std::string get_ours(const EnvGetter& get, const char* name) {
  const char* v = get(name);
  if (v && !*v)
    fail_param<InvalidArgument>("environment", name, "a non-empty value (unset the variable for the default)", "''");
  return v ? std::string(v) : std::string();
}

bool parse_bool(const std::string& v, const char* name) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail_param<InvalidArgument>("environment", name, "one of 1/0/true/false/on/off/yes/no",
                              fmt::format("'{}'", v));
}

// Digits only: strtoull alone also takes " 5", "+5" and "-5" (as a huge value).
unsigned long long parse_count(const std::string& v, const char* name, unsigned long long lo, unsigned long long hi,
                               const char* unit) {
  errno = 0;
  const unsigned long long n = v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos
                                   ? std::strtoull(v.c_str(), nullptr, 10)
                                   : 0;
  if (errno != 0 || n < lo || n > hi)
    fail_param<InvalidArgument>("environment", name, fmt::format("{} in [{}, {}] (digits only)", unit, lo, hi),
                                fmt::format("'{}'", v));
  return n;
}

}  // namespace

EnvConfig parse_env(const EnvGetter& get) {
  EnvConfig c;
  std::string dir = get_ours(get, "DSA_INDEXER_CACHE_DIR");
  if (dir.empty()) {
    std::string xdg = get_str(get, "XDG_CACHE_HOME");
    std::string home = get_str(get, "HOME");
    // Relative values would put the cache wherever the process happens to run: the XDG spec
    // says to ignore a relative XDG_CACHE_HOME, and a relative HOME is refused.
    if (!xdg.empty() && xdg[0] == '/')
      dir = xdg + "/dsa_indexer";
    else if (!home.empty() && home[0] != '/')
      fail_param<InvalidArgument>("environment", "HOME", "an absolute path (or set DSA_INDEXER_CACHE_DIR)",
                                  fmt::format("'{}'", home));
    else if (!home.empty())
      dir = home + "/.cache/dsa_indexer";
  }
  c.cache_dir = dir;  // may stay empty: then the disk cache is memory-only (warned at first use)

  std::string disk = get_ours(get, "DSA_INDEXER_DISK_CACHE");
  if (!disk.empty()) c.disk_cache = parse_bool(disk, "DSA_INDEXER_DISK_CACHE");

  c.prebuilt_dir = get_ours(get, "DSA_INDEXER_PREBUILT_DIR");
  c.dump_dir = get_ours(get, "DSA_INDEXER_DUMP_DIR");

  std::string cap = get_ours(get, "DSA_INDEXER_CACHE_CAPACITY");
  if (!cap.empty())
    c.cache_capacity = static_cast<std::size_t>(parse_count(cap, "DSA_INDEXER_CACHE_CAPACITY", 1, 1ull << 20, "an integer"));

  // Booleans like DSA_INDEXER_DISK_CACHE: "0" keeps lean on (it used to mean "any non-empty value").
  for (const char* name : {"DSA_INDEXER_DISABLE_LEAN", "CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN"})
    if (const std::string v = get_ours(get, name); !v.empty()) c.disable_lean = c.disable_lean || parse_bool(v, name);

  std::string iso = get_ours(get, "DSA_INDEXER_COMPILE_ISOLATION");
  if (iso.empty() || iso == "none" || iso == "in-process")
    c.isolation = CompileIsolation::in_process;
  else if (iso == "process")
    c.isolation = CompileIsolation::process;
  else
    fail_param<InvalidArgument>("environment", "DSA_INDEXER_COMPILE_ISOLATION",
                                "'none' or 'process'", fmt::format("'{}'", iso));

  c.compile_helper = get_ours(get, "DSA_INDEXER_COMPILE_HELPER");

  std::string timeout = get_ours(get, "DSA_INDEXER_COMPILE_TIMEOUT");
  if (!timeout.empty())
    c.compile_timeout_s = static_cast<int>(parse_count(timeout, "DSA_INDEXER_COMPILE_TIMEOUT", 1, 86400, "an integer number of seconds"));

  if (std::string t = get_str(get, "TMPDIR"); !t.empty()) c.temp_dir = t;

  std::string mode = get_ours(get, "DSA_INDEXER_LEAN_COMPILE");
  if (mode.empty() || mode == "sync")
    c.lean_compile = LeanCompile::sync;
  else if (mode == "async")
    c.lean_compile = LeanCompile::async;
  else
    fail_param<InvalidArgument>("environment", "DSA_INDEXER_LEAN_COMPILE", "'sync' or 'async'", fmt::format("'{}'", mode));

  c.record_manifest = get_ours(get, "DSA_INDEXER_RECORD_MANIFEST");

  std::string cands = get_ours(get, "DSA_INDEXER_TOPK_CANDIDATES");
  if (!cands.empty())
    c.topk_candidates = static_cast<long long>(parse_count(cands, "DSA_INDEXER_TOPK_CANDIDATES", 1, 8192, "an integer"));

  std::string lvl = get_ours(get, "DSA_INDEXER_LOG");
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
