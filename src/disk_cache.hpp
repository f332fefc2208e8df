#pragma once
// Content-addressed on-disk store of compiled kernels (docs/DESIGN.md, "Caches").
//
// Layout: <dir>/v<format>/<key[0:2]>/<key>.dsak, one file per entry: a text header (format,
// key, NVRTC version, arch, lowered kernel names, cubin size and sha256) followed by the cubin.
// Publish: a private temp file in the same directory, fsync, rename over the final name, fsync
// of the directory; readers therefore see either no entry or a whole one. Load verifies the
// header, the key, the NVRTC version, the size and the hash, and that the cubin is a CUDA ELF
// holding every kernel the header names; anything else is a miss (and a bad entry in the
// writable directory is deleted so that the next store replaces it). The hash catches damage,
// not forgery: an entry whose header was rewritten to match another variant's cubin is trusted,
// which is why the directory is created 0700.
//
// A directory that cannot be created or written degrades the cache to memory-only (loads from
// readable directories still work) with one warning per process and directory, however many
// cache objects point at it; later failures log at info level.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dsa_indexer::detail {

inline constexpr int kCacheFormatVersion = 1;

struct CacheEntry {
  std::string key;
  std::string nvrtc_version;
  std::string arch;
  std::string source_name;
  std::vector<std::string> kernels;  // lowered names
  std::string cubin;
};

struct EntryReport {
  std::string path;
  std::string key;
  std::string source_name;
  uint64_t cubin_bytes = 0;
  bool ok = false;
  std::string problem;  // why the entry failed verification
};

// Serialized form (header + cubin) and its parser; parse() returns the reason for rejection.
std::string serialize_entry(const CacheEntry& e);
std::optional<CacheEntry> parse_entry(const std::string& bytes, std::string* why);

// "" when `cubin` is a 64-bit CUDA ELF (EM_CUDA) whose bytes hold every name in `kernels` as a
// NUL-terminated symbol string; otherwise what is wrong with it.
std::string cubin_problem(const std::string& cubin, const std::vector<std::string>& kernels);

// Test hook: how many "disk cache disabled" warnings this process has issued (counted whatever
// DSA_INDEXER_LOG says), so tests can assert "one warning per process" exactly.
uint64_t disk_cache_warnings();

class DiskCache {
 public:
  // dir: writable cache directory ("" = none); prebuilt: optional read-only directory.
  DiskCache(std::string dir, std::string prebuilt, std::string nvrtc_version);

  // Looks in dir, then prebuilt. Verifies everything; returns nullopt on any mismatch.
  std::optional<CacheEntry> load(const std::string& key);
  // Publishes atomically; on failure warns once and becomes memory-only. Returns success.
  bool store(const CacheEntry& e);
  // Deletes the entry for key in the writable directory (a cubin the driver then refused).
  void remove(const std::string& key);

  bool writable() const;
  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& root, const std::string& key) const;

  // Tools: every entry file under dir (and prebuilt), verified.
  std::vector<EntryReport> list() const;
  // Removes every entry and stale temp file of this format under dir; returns the count.
  std::size_t clear();
  // Problems with the directory itself ("" when usable), naming the path. Besides stat and
  // access it publishes and removes a small probe file, so that a full disk, a file-size limit
  // or a read-only mount shows here as it would on the next store.
  std::string directory_problem() const;

 private:
  bool ensure_dir_locked();
  void degrade_locked(const std::string& why);
  // parse_entry plus the checks that need this cache: the key and the NVRTC version.
  std::optional<CacheEntry> verify(const std::string& bytes, const std::string& key, std::string* why) const;
  std::optional<CacheEntry> load_from(const std::string& root, const std::string& key, bool writable_root);

  std::string dir_, prebuilt_, nvrtc_;
  mutable std::mutex mu_;
  bool writable_ = true;
  bool dir_ready_ = false;
};

}  // namespace dsa_indexer::detail
