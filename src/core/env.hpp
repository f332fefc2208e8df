#pragma once
// The library's environment variables, parsed in one place (env.cpp is the only reader of the
// environment). Every variable is listed in the README with its default and effect.
#include <cstddef>
#include <functional>
#include <string>

namespace dsa_indexer::detail {

enum class CompileIsolation { in_process, process };
enum class LogLevel { quiet = 0, warn = 1, info = 2 };
// DSA_INDEXER_LEAN_COMPILE: whether an automatic call whose fast-path variant is not loaded yet
// waits for it (sync) or runs the generic family while a background worker produces it (async).
enum class LeanCompile { sync, async };

struct EnvConfig {
  std::string cache_dir;        // DSA_INDEXER_CACHE_DIR, default $XDG_CACHE_HOME/dsa_indexer or ~/.cache/dsa_indexer
  bool disk_cache = true;       // DSA_INDEXER_DISK_CACHE=0 turns the disk cache off
  std::string prebuilt_dir;     // DSA_INDEXER_PREBUILT_DIR, read-only, searched after cache_dir
  std::string dump_dir;         // DSA_INDEXER_DUMP_DIR, keeps source, log and cubin of each compile
  std::size_t cache_capacity = 256;  // DSA_INDEXER_CACHE_CAPACITY, loaded modules kept in memory
  bool disable_lean = false;    // DSA_INDEXER_DISABLE_LEAN or CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN non-empty
  CompileIsolation isolation = CompileIsolation::in_process;  // DSA_INDEXER_COMPILE_ISOLATION=process
  std::string compile_helper;   // DSA_INDEXER_COMPILE_HELPER, path of dsa-indexer-nvrtc-helper
  int compile_timeout_s = 600;  // DSA_INDEXER_COMPILE_TIMEOUT, seconds an isolated compile may take
  LogLevel log_level = LogLevel::warn;  // DSA_INDEXER_LOG=quiet|warn|info
  std::string temp_dir = "/tmp";  // TMPDIR: where the tools make their private mkdtemp directories
  LeanCompile lean_compile = LeanCompile::sync;  // DSA_INDEXER_LEAN_COMPILE=sync|async
  std::string record_manifest;  // DSA_INDEXER_RECORD_MANIFEST: manifest file every new kernel key is appended to
  long long topk_candidates = 0;  // DSA_INDEXER_TOPK_CANDIDATES: the fused top-k's candidate entries per row (0: planned)
};

using EnvGetter = std::function<const char*(const char*)>;

// Pure parser over a getter, so tests can feed any environment. Throws InvalidArgument naming
// the variable for a malformed value.
EnvConfig parse_env(const EnvGetter& get);

// The process environment, parsed once on first use.
const EnvConfig& env();

}  // namespace dsa_indexer::detail
