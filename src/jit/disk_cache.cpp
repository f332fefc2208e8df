#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "jit/cache_fs.hpp"
#include "core/sha256.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {

constexpr const char* kMagic = "dsa-indexer-kernel";
constexpr const char* kSuffix = ".dsak";
constexpr const char* kTempPrefix = ".tmp.";

std::string format_name() { return fmt::format("v{}", kCacheFormatVersion); }
std::string format_dir(const std::string& root) { return root + "/" + format_name(); }

bool is_hex_key(const std::string& k) {
  if (k.size() != 64) return false;
  for (char c : k)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool has_suffix(const std::string& n, const char* suffix) {
  const std::size_t l = std::strlen(suffix);
  return n.size() > l && n.compare(n.size() - l, std::string::npos, suffix) == 0;
}

// mkdir -p with mode 0700 for every directory we create; EEXIST of a directory is success.
bool make_dirs(const std::string& path, std::string* why) {
  // A path the kernel cannot take whole is refused before anything is created: making its
  // levels one by one would leave dozens of directories behind when the last ones fail.
  if (path.size() >= PATH_MAX) {
    *why = fmt::format("the cache directory path is {} bytes, past the system's limit of {} (PATH_MAX): nothing created",
                       path.size(), PATH_MAX - 1);
    return false;
  }
  std::vector<std::string> made;  // the levels this call created, removed again on failure
  auto fail = [&](std::string reason) {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());  // only empty ones go
    *why = std::move(reason);
    return false;
  };
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) == 0) {
      made.push_back(cur);
    } else if (errno != EEXIST) {
      return fail(fmt::format("cannot create {}: {}", cur, std::strerror(errno)));
    }
    struct stat st {};
    if (::stat(cur.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail(fmt::format("{} exists and is not a directory", cur));
  }
  return true;
}

// Entries are a few hundred KB; anything far larger is not ours and is not read into memory.
constexpr std::size_t kMaxEntryBytes = std::size_t(256) << 20;

Trust trust_of(bool writable_root) { return writable_root ? Trust::own : Trust::prebuilt; }

// Opens one directory level below `parent`, checking it is a directory we may trust. With
// `create`, a missing level is made (0700) and a non-directory in its place (a link, a FIFO, a
// file) is removed first: the parent is ours. On failure *why names the path; *untrusted tells
// an ownership problem from a missing or unreadable level.
DirFd open_level(const DirFd& parent, const std::string& name, const std::string& path, Trust t, bool create,
                 std::string* why, bool* untrusted) {
  DirFd d = open_subdir(parent, name);
  if (!d && create && (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)) {
    struct stat st {};
    if (errno != ENOENT && ::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
      ::unlinkat(parent.get(), name.c_str(), 0);
    if (::mkdirat(parent.get(), name.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = fmt::format("cannot create {}: {}", path, std::strerror(errno));
      return DirFd();
    }
    d = open_subdir(parent, name);
  }
  if (!d) {
    const int err = errno;
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      *why = fmt::format("{} is {}, not a directory", path, file_kind(st));
    else
      *why = fmt::format("{}: {}", path, std::strerror(err));
    errno = err;
    return DirFd();
  }
  struct stat st {};
  if (::fstat(d.get(), &st) != 0) {
    *why = fmt::format("{}: {}", path, std::strerror(errno));
    return DirFd();
  }
  if (std::string p = trust_problem(st, t, path); !p.empty()) {
    *why = p;
    *untrusted = true;
    return DirFd();
  }
  return d;
}

// root, checked; errno ENOENT (and an empty *why) when it does not exist.
DirFd open_trusted_root(const std::string& root, Trust t, std::string* why, bool* untrusted) {
  DirFd r = open_root(root);
  if (!r) {
    const int err = errno;
    *why = err == ENOENT ? std::string() : fmt::format("{}: {}", root, err == ENOTDIR ? "not a directory" : std::strerror(err));
    errno = err;
    return r;
  }
  struct stat st {};
  if (::fstat(r.get(), &st) != 0) {
    *why = fmt::format("{}: {}", root, std::strerror(errno));
    return DirFd();
  }
  if (std::string p = trust_problem(st, t, root); !p.empty()) {
    *why = p;
    *untrusted = true;
    return DirFd();
  }
  return r;
}

// root/v<format>/<fan>, every level checked.
DirFd open_fanout(const std::string& root, const std::string& fan, Trust t, bool create, std::string* why,
                  bool* untrusted) {
  DirFd r = open_trusted_root(root, t, why, untrusted);
  if (!r) return r;
  DirFd v = open_level(r, format_name(), format_dir(root), t, create, why, untrusted);
  if (!v) return v;
  return open_level(v, fan, format_dir(root) + "/" + fan, t, create, why, untrusted);
}

// Removes name below dir only if it still is the file that was examined: a racing process may
// have renamed a good entry over it since, and deleting that would cost it a recompile.
void unlink_if_same(const DirFd& dir, const std::string& name, const struct stat& seen) {
  struct stat st {};
  if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == seen.st_dev &&
      st.st_ino == seen.st_ino)
    ::unlinkat(dir.get(), name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("{}.{}.{:016x}", ::getpid(), counter.fetch_add(1), rng());
}

std::atomic<uint64_t> g_warnings{0};

// One warning per process and directory: a training job that builds several runtimes (or a
// tool next to the library) over one bad directory must not repeat it.
bool first_warning_for(const std::string& what) {
  static auto* warned_mu = new std::mutex();  // process lifetime: a background compile may warn at exit
  static auto* warned = new std::set<std::string>();
  std::lock_guard<std::mutex> lk(*warned_mu);
  return warned->insert(what).second;
}

}  // namespace

uint64_t disk_cache_warnings() { return g_warnings.load(); }

std::string entry_digest(const CacheEntry& e) {
  Sha256 h;
  h.field("dsa-indexer entry");
  h.field(std::to_string(kCacheFormatVersion));
  h.field(e.key);
  h.field(e.nvrtc_version);
  h.field(e.arch);
  h.field(e.source_name);
  h.field(std::to_string(e.kernels.size()));
  for (const auto& k : e.kernels) h.field(k);
  h.field(e.cubin);
  return h.hex_digest();
}

std::string serialize_entry(const CacheEntry& e) {
  std::string h = fmt::format("{} {}\nkey {}\nnvrtc {}\narch {}\nsource {}\nkernels {}\n", kMagic, kCacheFormatVersion,
                              e.key, e.nvrtc_version, e.arch, e.source_name, e.kernels.size());
  for (const auto& k : e.kernels) h += fmt::format("kernel {}\n", k);
  h += fmt::format("cubin-size {}\ndigest {}\nend\n", e.cubin.size(), entry_digest(e));
  return h + e.cubin;
}

std::optional<CacheEntry> parse_entry(const std::string& bytes, std::string* why) {
  auto reject = [&](const std::string& r) -> std::optional<CacheEntry> {
    if (why) *why = r;
    return std::nullopt;
  };
  const std::size_t end = bytes.find("\nend\n");
  if (end == std::string::npos || end > 65536) return reject("no header (truncated or not an entry)");
  std::istringstream in(bytes.substr(0, end));
  std::string tag, line;
  CacheEntry e;
  int format = -1;
  std::size_t nkernels = 0, size = 0;
  std::string digest;
  if (!(in >> tag >> format) || tag != kMagic) return reject("bad magic");
  if (format != kCacheFormatVersion) return reject(fmt::format("format version {} (this library writes {})", format, kCacheFormatVersion));
  std::getline(in, line);
  auto field = [&](const char* name, std::string* value) {
    if (!std::getline(in, line)) return false;
    const std::size_t n = std::strlen(name);
    if (line.compare(0, n, name) != 0 || line.size() < n + 1 || line[n] != ' ') return false;
    *value = line.substr(n + 1);
    return true;
  };
  std::string tmp;
  if (!field("key", &e.key) || !field("nvrtc", &e.nvrtc_version) || !field("arch", &e.arch) ||
      !field("source", &e.source_name) || !field("kernels", &tmp))
    return reject("malformed header");
  nkernels = std::strtoull(tmp.c_str(), nullptr, 10);
  if (nkernels < 1 || nkernels > 16) return reject("malformed kernel count");
  for (std::size_t i = 0; i < nkernels; ++i) {
    if (!field("kernel", &tmp) || tmp.empty()) return reject("malformed kernel name");
    e.kernels.push_back(tmp);
  }
  if (!field("cubin-size", &tmp)) return reject("malformed header");
  size = std::strtoull(tmp.c_str(), nullptr, 10);
  if (!field("digest", &digest)) return reject("malformed header");
  const std::size_t body = end + 5;
  if (bytes.size() - body != size)
    return reject(fmt::format("cubin is {} bytes, header says {}", bytes.size() - body, size));
  if (size == 0) return reject("empty cubin");
  e.cubin = bytes.substr(body);
  if (entry_digest(e) != digest) return reject("digest mismatch (damaged, or copied from another entry)");
  if (std::string p = cubin_problem(e.cubin, e.kernels, e.arch); !p.empty()) return reject(p);
  return e;
}

DiskCache::DiskCache(std::string dir, std::string prebuilt, std::string nvrtc_version)
    : dir_(std::move(dir)), prebuilt_(std::move(prebuilt)), nvrtc_(std::move(nvrtc_version)) {
  writable_ = !dir_.empty();
}

bool DiskCache::writable() const {
  std::lock_guard<std::mutex> lk(mu_);
  return writable_;
}

std::string DiskCache::entry_path(const std::string& root, const std::string& key) const {
  return fmt::format("{}/{}/{}{}", format_dir(root), key.substr(0, 2), key, kSuffix);
}

void DiskCache::degrade_locked(const std::string& why, bool untrusted) {
  writable_ = false;
  untrusted_ = untrusted_ || untrusted;
  // Untrusted: nothing is read from it either. Otherwise what is there is still read (load()
  // reads a non-writable cache) and only stores stop: say read-only, not "disabled".
  const std::string msg =
      untrusted_ ? fmt::format("kernel disk cache {} disabled (not read, nothing stored), caching in memory only: {}", dir_, why)
                 : fmt::format("kernel disk cache {} is read-only from now on (its entries are still read; new kernels are "
                               "cached in memory only): {}", dir_, why);
  if (first_warning_for(dir_)) {
    g_warnings.fetch_add(1);
    log_warning(msg);
  } else {
    log_info(msg);
  }
}

std::string DiskCache::prepare_for_stores() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ensure_dir_locked();
  }
  return directory_problem();
}

bool DiskCache::ensure_dir_locked() {
  if (!writable_) return false;
  if (dir_ready_) return true;
  std::string why;
  bool untrusted = false;
  if (!make_dirs(dir_, &why)) {
    degrade_locked(why);
    return false;
  }
  DirFd root = open_trusted_root(dir_, Trust::own, &why, &untrusted);
  DirFd v = root ? open_level(root, format_name(), format_dir(dir_), Trust::own, true, &why, &untrusted) : DirFd();
  if (!v) {
    degrade_locked(why.empty() ? fmt::format("{}: {}", dir_, std::strerror(errno)) : why, untrusted);
    return false;
  }
  if (::faccessat(v.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
    degrade_locked(fmt::format("{} is not writable: {}", format_dir(dir_), std::strerror(errno)));
    return false;
  }
  dir_ready_ = true;
  return true;
}

std::optional<CacheEntry> DiskCache::verify(const std::string& bytes, const std::string& key, std::string* why) const {
  auto e = parse_entry(bytes, why);
  if (e && e->key != key) {
    *why = fmt::format("entry holds key {}, its file name says {}", e->key, key);
    e.reset();
  } else if (e && e->nvrtc_version != nvrtc_) {
    *why = fmt::format("written by NVRTC {}, this process uses {} (stale)", e->nvrtc_version, nvrtc_);
    e.reset();
  }
  return e;
}

std::optional<CacheEntry> DiskCache::load_from(const std::string& root, const std::string& key, bool writable_root) {
  const Trust t = trust_of(writable_root);
  std::string why;
  bool untrusted = false;
  DirFd fan = open_fanout(root, key.substr(0, 2), t, false, &why, &untrusted);
  if (!fan) {
    if (untrusted && writable_root) {
      std::lock_guard<std::mutex> lk(mu_);
      degrade_locked(why, true);
    } else if (untrusted) {
      const std::string msg = fmt::format("ignoring the prebuilt kernel directory: {}", why);
      if (first_warning_for("prebuilt:" + root)) log_warning(msg); else log_info(msg);
    } else if (!writable_root) {
      // A missing or misspelt DSA_INDEXER_PREBUILT_DIR would otherwise look like an empty one.
      struct stat rs {};
      const int rc = ::stat(root.c_str(), &rs), err = rc != 0 ? errno : 0;
      if ((rc != 0 || !S_ISDIR(rs.st_mode)) && first_warning_for("prebuilt:" + root))
        log_warning(fmt::format("the prebuilt kernel directory {} (DSA_INDEXER_PREBUILT_DIR) {}: ignored", root,
                                rc != 0 ? (err == ENOENT ? std::string("does not exist") : std::strerror(err))
                                        : std::string("is not a directory")));
    }
    return std::nullopt;
  }
  const std::string name = key + kSuffix, path = entry_path(root, key);
  std::string bytes;
  struct stat st {};
  why = read_regular_at(fan, name, kMaxEntryBytes, &bytes, &st);
  if (why.empty()) why = trust_problem(st, t, path);
  std::optional<CacheEntry> e;
  if (why.empty()) e = verify(bytes, key, &why);
  if (!e) {
    if (st.st_ino == 0) return std::nullopt;  // nothing there (or nothing we could reach)
    log_info(fmt::format("ignoring cache entry {}: {}", path, why));
    if (writable_root && st.st_ino != 0) unlink_if_same(fan, name, st);
  }
  return e;
}

std::optional<CacheEntry> DiskCache::load(const std::string& key) {
  if (!is_hex_key(key)) return std::nullopt;
  if (!dir_.empty()) {
    bool w, u;
    {
      std::lock_guard<std::mutex> lk(mu_);
      w = writable_;
      u = untrusted_;
    }
    if (!u)
      if (auto e = load_from(dir_, key, w)) return e;
  }
  if (!prebuilt_.empty())
    if (auto e = load_from(prebuilt_, key, false)) return e;
  return std::nullopt;
}

bool DiskCache::store(const CacheEntry& e) {
  if (!is_hex_key(e.key) || e.cubin.empty()) return false;
  std::lock_guard<std::mutex> lk(mu_);
  if (!ensure_dir_locked()) return false;
  const std::string bytes = serialize_entry(e);
  const std::string sub = fmt::format("{}/{}", format_dir(dir_), e.key.substr(0, 2));
  const std::string final_name = e.key + kSuffix;
  // Two attempts: a concurrent `cache clear` may remove our temp file (or a concurrent rm its
  // directory) between create and rename; that is maintenance, not a broken directory.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string why;
    bool untrusted = false;
    DirFd fan = open_fanout(dir_, e.key.substr(0, 2), Trust::own, true, &why, &untrusted);
    if (!fan) {
      degrade_locked(why.empty() ? fmt::format("{}: {}", dir_, std::strerror(errno)) : why, untrusted);
      return false;
    }
    const std::string tmp = fmt::format("{}{}.{}", kTempPrefix, e.key, unique_suffix());
    int fd = ::openat(fan.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == ENOENT && attempt == 0) continue;
      degrade_locked(fmt::format("cannot create {}/{}: {}", sub, tmp, std::strerror(errno)));
      return false;
    }
    bool ok = write_all(fd, bytes);
    int err = errno;
    if (ok && ::fsync(fd) != 0) {
      ok = false;
      err = errno;
    }
    if (::close(fd) != 0 && ok) {
      ok = false;
      err = errno;
    }
    if (!ok) {
      ::unlinkat(fan.get(), tmp.c_str(), 0);
      degrade_locked(fmt::format("cannot write {}/{}: {}", sub, tmp, std::strerror(err)));
      return false;
    }
    // rename replaces atomically; a racing process publishing the same key writes the same bytes.
    if (::renameat(fan.get(), tmp.c_str(), fan.get(), final_name.c_str()) != 0) {
      err = errno;
      ::unlinkat(fan.get(), tmp.c_str(), 0);
      if (err == ENOENT) {
        log_info(fmt::format("publishing {}/{}: the temp file was removed (a concurrent cache clear){}", sub, final_name,
                             attempt == 0 ? ", retrying" : "; not stored this time"));
        continue;
      }
      degrade_locked(fmt::format("cannot publish {}/{}: {}", sub, final_name, std::strerror(err)));
      return false;
    }
    ::fsync(fan.get());
    return true;
  }
  return false;
}

void DiskCache::remove(const std::string& key) {
  if (dir_.empty() || !is_hex_key(key)) return;
  std::string why;
  bool untrusted = false;
  DirFd fan = open_fanout(dir_, key.substr(0, 2), Trust::own, false, &why, &untrusted);
  if (fan) ::unlinkat(fan.get(), (key + kSuffix).c_str(), 0);
}

std::string DiskCache::directory_problem() const {
  if (dir_.empty()) return "no cache directory configured (DSA_INDEXER_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)";
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) return fmt::format("{}: {}", dir_, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}: not a directory", dir_);
  std::string why;
  bool untrusted = false;
  DirFd root = open_trusted_root(dir_, Trust::own, &why, &untrusted);
  if (!root) return why.empty() ? fmt::format("{}: {}", dir_, std::strerror(errno)) : why;
  // Probe where the next store would write: the format directory if it exists, else the root.
  std::string where = dir_;
  DirFd v = open_level(root, format_name(), format_dir(dir_), Trust::own, false, &why, &untrusted);
  if (!v && (untrusted || errno != ENOENT)) return why;
  if (v) where = format_dir(dir_);
  const DirFd& at = v ? v : root;
  const std::string probe = fmt::format("{}probe.{}", kTempPrefix, unique_suffix());
  int fd = ::openat(at.get(), probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("{}: not writable ({})", where, std::strerror(errno));
  // 64 KiB, a small entry's size: enough to hit a full disk or a file-size limit.
  const bool ok = write_all(fd, std::string(std::size_t(64) << 10, '\0'));
  const int err = errno;
  ::close(fd);
  ::unlinkat(at.get(), probe.c_str(), 0);
  if (!ok) return fmt::format("{}: cannot write ({})", where, std::strerror(err));
  return {};
}

std::string DiskCache::prebuilt_problem() const {
  if (prebuilt_.empty()) return {};
  std::string why;
  bool untrusted = false;
  DirFd root = open_trusted_root(prebuilt_, Trust::prebuilt, &why, &untrusted);
  if (!root) return why.empty() ? fmt::format("{}: {}", prebuilt_, std::strerror(errno)) : why;
  DirFd v = open_level(root, format_name(), format_dir(prebuilt_), Trust::prebuilt, false, &why, &untrusted);
  if (!v && (untrusted || errno != ENOENT)) return why;
  return {};
}

void DiskCache::walk(const std::string& root, bool writable_root, std::vector<EntryReport>* out) const {
  const Trust t = trust_of(writable_root);
  auto bad = [&](const std::string& path, const std::string& why) {
    EntryReport r;
    r.path = path;
    r.problem = why;
    out->push_back(r);
  };
  // An untrusted level is reported and still walked, so that `cache verify` shows what is there.
  auto level = [&](const DirFd* parent, const std::string& name, const std::string& path) {
    DirFd d = parent ? open_subdir(*parent, name) : open_root(path);
    if (!d) {
      const int err = errno;
      struct stat st {};
      if (err == ENOENT || (!parent && err == ENOTDIR)) return d;  // directory_problem's to report
      if (parent && (err == ELOOP || err == ENOTDIR) &&
          ::fstatat(parent->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        bad(path, fmt::format("{}, not a directory (not followed)", file_kind(st)));
      else
        bad(path, fmt::format("unreadable directory: {}", std::strerror(err)));
      return d;
    }
    struct stat st {};
    if (::fstat(d.get(), &st) == 0)
      if (std::string p = trust_problem(st, t, path); !p.empty()) bad(path, "untrusted directory: " + p);
    return d;
  };
  DirFd r = level(nullptr, "", root);
  if (!r) return;
  DirFd v = level(&r, format_name(), format_dir(root));
  if (!v) return;
  std::vector<std::string> fans;
  if (!list_names(v, &fans)) return bad(format_dir(root), fmt::format("unreadable directory: {}", std::strerror(errno)));
  for (const auto& fan : fans) {
    if (fan.size() != 2 || fan[0] == '.') continue;
    const std::string sub = format_dir(root) + "/" + fan;
    DirFd f = level(&v, fan, sub);
    if (!f) continue;
    std::vector<std::string> names;
    if (!list_names(f, &names)) {
      bad(sub, fmt::format("unreadable directory: {}", std::strerror(errno)));
      continue;
    }
    for (const auto& name : names) {
      EntryReport rep;
      rep.path = sub + "/" + name;
      struct stat st {};
      if (name.rfind(kTempPrefix, 0) == 0) {
        const bool fresh = ::fstatat(f.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                           std::time(nullptr) - st.st_mtime < kInFlightSeconds;
        if (fresh) continue;  // another process's publish in flight
        rep.problem = "leftover temp file (an interrupted publish)";
        out->push_back(rep);
        continue;
      }
      if (!has_suffix(name, kSuffix)) {
        rep.problem = "not a cache entry";
        out->push_back(rep);
        continue;
      }
      const std::string key = name.substr(0, name.size() - std::strlen(kSuffix));
      rep.key = key;
      std::string bytes, why = read_regular_at(f, name, kMaxEntryBytes, &bytes, &st);
      if (!why.empty()) {
        rep.problem = fmt::format("unreadable: {}", why);
        out->push_back(rep);
        continue;
      }
      if (std::string p = trust_problem(st, t, rep.path); !p.empty()) {
        rep.problem = "untrusted entry: " + p;
        out->push_back(rep);
        continue;
      }
      auto e = verify(bytes, key, &why);
      if (e && key.compare(0, 2, fan) != 0) {
        why = fmt::format("in fan-out directory {}, its key starts with {}", fan, key.substr(0, 2));
        e.reset();
      }
      if (e) {
        rep.ok = true;
        rep.source_name = e->source_name;
        rep.cubin_bytes = e->cubin.size();
      } else {
        rep.problem = why;
      }
      out->push_back(rep);
    }
  }
}

std::vector<EntryReport> DiskCache::list() const {
  std::vector<EntryReport> out;
  if (!dir_.empty()) walk(dir_, true, &out);
  if (!prebuilt_.empty()) walk(prebuilt_, false, &out);
  return out;
}

ClearReport DiskCache::clear() {
  ClearReport rep;
  if (dir_.empty()) return rep;
  auto problem = [&](const std::string& path, const std::string& what, int err) {
    rep.problems.push_back(fmt::format("{}: {}: {}", path, what, std::strerror(err)));
  };
  // A link (or any non-directory) where a directory of ours belongs is removed as itself.
  auto remove_node = [&](const DirFd& parent, const std::string& name, const std::string& path) {
    if (::unlinkat(parent.get(), name.c_str(), 0) == 0)
      ++rep.removed;
    else
      problem(path, "cannot remove", errno);
  };
  DirFd r = open_root(dir_);
  if (!r) {
    if (errno != ENOENT) problem(dir_, "cannot open the cache directory", errno);
    return rep;
  }
  struct stat st {};
  DirFd v = open_subdir(r, format_name());
  if (!v) {
    const int err = errno;
    if ((err == ELOOP || err == ENOTDIR) && ::fstatat(r.get(), format_name().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      remove_node(r, format_name(), format_dir(dir_));
    else if (err != ENOENT)
      problem(format_dir(dir_), "cannot open", err);
    return rep;
  }
  std::vector<std::string> fans;
  if (!list_names(v, &fans)) {
    problem(format_dir(dir_), "cannot read", errno);
    return rep;
  }
  for (const auto& fan : fans) {
    if (fan.size() != 2 || fan[0] == '.') continue;
    const std::string sub = format_dir(dir_) + "/" + fan;
    DirFd f = open_subdir(v, fan);
    if (!f) {
      const int err = errno;
      if ((err == ELOOP || err == ENOTDIR) && ::fstatat(v.get(), fan.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
        remove_node(v, fan, sub);
      else
        problem(sub, "cannot open", err);
      continue;
    }
    std::vector<std::string> names;
    if (!list_names(f, &names)) {
      problem(sub, "cannot read", errno);
      continue;
    }
    for (const auto& name : names) {
      if (!has_suffix(name, kSuffix) && name.rfind(kTempPrefix, 0) != 0) continue;  // not ours: left alone
      const std::string path = sub + "/" + name;
      if (::unlinkat(f.get(), name.c_str(), 0) == 0) {
        ++rep.removed;
      } else if (errno == EISDIR && ::unlinkat(f.get(), name.c_str(), AT_REMOVEDIR) == 0) {
        ++rep.removed;
      } else if (errno != ENOENT) {  // ENOENT: a concurrent clear or publish got there first
        problem(path, "cannot remove", errno);
      }
    }
  }
  return rep;
}

}  // namespace dsa_indexer::detail
