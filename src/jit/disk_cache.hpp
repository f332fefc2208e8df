#pragma once
// Content-addressed on-disk store of compiled kernels (docs/DESIGN.md, "Caches").
//
// Layout: <dir>/v<format>/<key[0:2]>/<key>.dsak, one file per entry: a text header (format,
// key, NVRTC version, arch, lowered kernel names, cubin size, and a digest of all of them with
// the cubin) followed by the cubin. Publish: a private temp file in the same directory, fsync,
// rename over the final name, fsync of the directory; readers therefore see either no entry or
// a whole one. A writer whose temp file a concurrent `cache clear` removed retries once.
//
// Load walks the directories by descriptor (cache_fs.hpp: no link below the root is followed,
// no special file is opened, sizes are bounded) and verifies: ownership and mode (the writable
// directory, its subdirectories and entries belong to the effective user and nobody else may
// write them; a prebuilt one belongs to root or the effective user), the header, the key of the
// file name, the NVRTC version, the size, the digest recomputed from that key and the cubin
// (so an entry or a cubin copied from another key does not verify), and that the cubin is an
// ELF for the arch defining every kernel the header names (cubin_elf.hpp). Anything else is a
// miss, and a bad entry in the writable directory is deleted so that the next store replaces
// it. The digest catches damage and copies, not forgery: whoever can write the directory can
// write any kernel into it, which is why nobody but its owner may (docs/RELIABILITY.md).
//
// A directory that cannot be created or written, or that fails the ownership rules, degrades
// the cache to memory-only with one warning per process and directory, however many cache
// objects point at it; an untrusted directory is not read either. Later failures log at info
// level. An untrusted prebuilt directory is ignored with one warning.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "jit/cubin_elf.hpp"

namespace dsa_indexer::detail {

inline constexpr int kCacheFormatVersion = 2;

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

// The digest an entry's header carries: sha256 over the format, the key, the NVRTC version,
// the arch, the source name, the kernels and the cubin, so that it binds the cubin to its key.
std::string entry_digest(const CacheEntry& e);

// What `cache clear` did: files removed, and what it found but could not remove or read.
struct ClearReport {
  std::size_t removed = 0;
  std::vector<std::string> problems;
};

// Temp files younger than this are another process's publish in flight, not leftovers.
inline constexpr int kInFlightSeconds = 600;

// Test hook: how many "disk cache read-only" / "disabled" warnings this process has issued (counted whatever
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

  // Tools: every entry file under dir (and prebuilt), verified, plus a row for each directory
  // that fails the ownership rules or cannot be read. Temp files in flight are not listed.
  std::vector<EntryReport> list() const;
  // Removes every entry and temp file of this format under dir. Never leaves the directory: a
  // link in place of a subdirectory or an entry is removed itself, never followed.
  ClearReport clear();
  // Problems with the directory itself ("" when usable), naming the path: missing, not a
  // directory, failing the ownership rules. Besides that it publishes and removes a small probe
  // file, so that a full disk, a file-size limit or a read-only mount shows here as it would on
  // the next store.
  std::string directory_problem() const;
  // Creates the directory as the first store would (mode 0700, missing parents too), then
  // directory_problem(): what `warmup` checks before it compiles anything.
  std::string prepare_for_stores();
  // Problems with the prebuilt directory ("" when unset or usable): missing, unreadable,
  // failing the ownership rules.
  std::string prebuilt_problem() const;

 private:
  bool ensure_dir_locked();
  void degrade_locked(const std::string& why, bool untrusted = false);
  // parse_entry plus the checks that need this cache: the key and the NVRTC version.
  std::optional<CacheEntry> verify(const std::string& bytes, const std::string& key, std::string* why) const;
  std::optional<CacheEntry> load_from(const std::string& root, const std::string& key, bool writable_root);
  void walk(const std::string& root, bool writable_root, std::vector<EntryReport>* out) const;

  std::string dir_, prebuilt_, nvrtc_;
  mutable std::mutex mu_;
  bool writable_ = true;
  bool untrusted_ = false;  // dir_ failed the ownership rules: neither read nor written
  bool dir_ready_ = false;
};

}  // namespace dsa_indexer::detail
