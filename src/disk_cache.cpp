#include "disk_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "sha256.hpp"
#include "util.hpp"

namespace dsa_indexer::detail {
namespace {

constexpr const char* kMagic = "dsa-indexer-kernel";
constexpr const char* kSuffix = ".dsak";

std::string format_dir(const std::string& root) { return fmt::format("{}/v{}", root, kCacheFormatVersion); }

bool is_hex_key(const std::string& k) {
  if (k.size() != 64) return false;
  for (char c : k)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// mkdir -p with mode 0700 for every directory we create; EEXIST of a directory is success.
bool make_dirs(const std::string& path, std::string* why) {
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = fmt::format("cannot create {}: {}", cur, std::strerror(errno));
      return false;
    }
    struct stat st {};
    if (::stat(cur.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      *why = fmt::format("{} exists and is not a directory", cur);
      return false;
    }
  }
  return true;
}

// Entries are a few hundred KB; anything far larger is not ours and is not read into memory.
constexpr std::size_t kMaxEntryBytes = std::size_t(256) << 20;

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
};

bool read_file(const std::string& path, std::string* out, FileId* id = nullptr) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    ::close(fd);
    errno = EFBIG;
    return false;
  }
  if (id) *id = FileId{st.st_dev, st.st_ino};
  out->resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out->size()) {
    ssize_t n = ::read(fd, out->data() + got, out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out->resize(got);
  return true;
}

// Removes a bad entry only if the path still names the file that was read: a racing process
// may have renamed a good entry over it since, and deleting that would cost it a recompile.
void unlink_if_same(const std::string& path, const FileId& id) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_dev == id.dev && st.st_ino == id.ino) ::unlink(path.c_str());
}

bool write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^ std::hash<std::thread::id>{}(std::this_thread::get_id()));
  return fmt::format("{}.{}.{:016x}", ::getpid(), counter.fetch_add(1), rng());
}

std::atomic<uint64_t> g_warnings{0};

}  // namespace

uint64_t disk_cache_warnings() { return g_warnings.load(); }

std::string cubin_problem(const std::string& cubin, const std::vector<std::string>& kernels) {
  // e_ident: magic, ELFCLASS64 (2), little-endian (1); e_machine at byte 18 is EM_CUDA (190).
  if (cubin.size() < 64 || cubin.compare(0, 4, "\x7f" "ELF") != 0) return "cubin is not an ELF file";
  if (cubin[4] != 2 || cubin[5] != 1) return "cubin is not a 64-bit little-endian ELF";
  const unsigned machine = static_cast<unsigned char>(cubin[18]) | (static_cast<unsigned char>(cubin[19]) << 8);
  if (machine != 190) return fmt::format("cubin ELF machine is {}, expected 190 (EM_CUDA)", machine);
  for (const auto& k : kernels) {
    const std::string sym = std::string(1, '\0') + k + std::string(1, '\0');
    if (cubin.find(sym) == std::string::npos) return fmt::format("cubin has no kernel {} (the header names it)", k);
  }
  return {};
}

std::string serialize_entry(const CacheEntry& e) {
  std::string h = fmt::format("{} {}\nkey {}\nnvrtc {}\narch {}\nsource {}\nkernels {}\n", kMagic, kCacheFormatVersion,
                              e.key, e.nvrtc_version, e.arch, e.source_name, e.kernels.size());
  for (const auto& k : e.kernels) h += fmt::format("kernel {}\n", k);
  h += fmt::format("cubin-size {}\ncubin-sha256 {}\nend\n", e.cubin.size(), sha256_hex(e.cubin));
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
  std::string sha;
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
  if (!field("cubin-sha256", &sha)) return reject("malformed header");
  const std::size_t body = end + 5;
  if (bytes.size() - body != size)
    return reject(fmt::format("cubin is {} bytes, header says {}", bytes.size() - body, size));
  if (size == 0) return reject("empty cubin");
  e.cubin = bytes.substr(body);
  if (sha256_hex(e.cubin) != sha) return reject("cubin sha256 mismatch (corrupt)");
  if (std::string p = cubin_problem(e.cubin, e.kernels); !p.empty()) return reject(p);
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

void DiskCache::degrade_locked(const std::string& why) {
  writable_ = false;
  // One warning per process and directory: a training job that builds several runtimes (or a
  // tool next to the library) over one bad directory must not repeat it.
  static std::mutex warned_mu;
  static std::set<std::string> warned_dirs;
  bool first;
  {
    std::lock_guard<std::mutex> lk(warned_mu);
    first = warned_dirs.insert(dir_).second;
  }
  const std::string msg = fmt::format("kernel disk cache disabled, caching in memory only: {}", why);
  if (first) {
    g_warnings.fetch_add(1);
    log_warning(msg);
  } else {
    log_info(msg);
  }
}

bool DiskCache::ensure_dir_locked() {
  if (!writable_) return false;
  if (dir_ready_) return true;
  std::string why;
  if (!make_dirs(format_dir(dir_), &why)) {
    degrade_locked(why);
    return false;
  }
  if (::access(format_dir(dir_).c_str(), W_OK | X_OK) != 0) {
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
  const std::string path = entry_path(root, key);
  std::string bytes;
  FileId id;
  if (!read_file(path, &bytes, &id)) return std::nullopt;
  std::string why;
  auto e = verify(bytes, key, &why);
  if (!e) {
    log_info(fmt::format("ignoring cache entry {}: {}", path, why));
    if (writable_root) unlink_if_same(path, id);
  }
  return e;
}

std::optional<CacheEntry> DiskCache::load(const std::string& key) {
  if (!is_hex_key(key)) return std::nullopt;
  if (!dir_.empty()) {
    bool w;
    {
      std::lock_guard<std::mutex> lk(mu_);
      w = writable_;
    }
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
  const std::string sub = fmt::format("{}/{}", format_dir(dir_), e.key.substr(0, 2));
  std::string why;
  if (!make_dirs(sub, &why)) {
    degrade_locked(why);
    return false;
  }
  const std::string final_path = entry_path(dir_, e.key);
  const std::string tmp_path = fmt::format("{}/.tmp.{}.{}", sub, e.key, unique_suffix());
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    degrade_locked(fmt::format("cannot create {}: {}", tmp_path, std::strerror(errno)));
    return false;
  }
  const std::string bytes = serialize_entry(e);
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
    ::unlink(tmp_path.c_str());
    degrade_locked(fmt::format("cannot write {}: {}", tmp_path, std::strerror(err)));
    return false;
  }
  // rename replaces atomically; a racing process publishing the same key writes the same bytes.
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp_path.c_str());
    degrade_locked(fmt::format("cannot publish {}: {}", final_path, std::strerror(err)));
    return false;
  }
  int dfd = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

void DiskCache::remove(const std::string& key) {
  if (dir_.empty() || !is_hex_key(key)) return;
  ::unlink(entry_path(dir_, key).c_str());
}

std::string DiskCache::directory_problem() const {
  if (dir_.empty()) return "no cache directory configured (DSA_INDEXER_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)";
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) return fmt::format("{}: {}", dir_, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}: not a directory", dir_);
  // Probe where the next store would write: the format directory if it exists, else the root.
  std::string where = format_dir(dir_);
  if (::stat(where.c_str(), &st) != 0)
    where = dir_;
  else if (!S_ISDIR(st.st_mode))
    return fmt::format("{}: not a directory", where);
  const std::string probe = fmt::format("{}/.tmp.probe.{}", where, unique_suffix());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fmt::format("{}: not writable ({})", where, std::strerror(errno));
  // 64 KiB, a small entry's size: enough to hit a full disk or a file-size limit.
  const bool ok = write_all(fd, std::string(std::size_t(64) << 10, '\0'));
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) return fmt::format("{}: cannot write ({})", where, std::strerror(err));
  return {};
}

namespace {
// Calls f(subdir, name) for every file of every fan-out directory under root's format
// directory, and bad(path, why) for a directory that exists but cannot be read.
template <class F, class B>
void for_each_file(const std::string& root, F f, B bad) {
  const std::string top = format_dir(root);
  DIR* d = ::opendir(top.c_str());
  if (!d) {
    if (errno != ENOENT && errno != ENOTDIR) bad(top, std::strerror(errno));
    return;
  }
  std::vector<std::string> subs;
  while (dirent* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n.size() == 2 && n[0] != '.') subs.push_back(top + "/" + n);
  }
  ::closedir(d);
  for (const auto& s : subs) {
    DIR* sd = ::opendir(s.c_str());
    if (!sd) {
      bad(s, std::strerror(errno));
      continue;
    }
    std::vector<std::string> names;
    while (dirent* de = ::readdir(sd)) {
      std::string n = de->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(sd);
    for (const auto& n : names) f(s, n);
  }
}
}  // namespace

std::vector<EntryReport> DiskCache::list() const {
  std::vector<EntryReport> out;
  for (const std::string* root : {&dir_, &prebuilt_}) {
    if (root->empty()) continue;
    for_each_file(*root, [&](const std::string& sub, const std::string& name) {
      EntryReport r;
      r.path = sub + "/" + name;
      if (name.rfind(".tmp.", 0) == 0) {
        r.problem = "leftover temp file (an interrupted publish)";
        out.push_back(r);
        return;
      }
      const std::size_t sl = name.size() - std::strlen(kSuffix);
      if (name.size() <= std::strlen(kSuffix) || name.compare(sl, std::string::npos, kSuffix) != 0) {
        r.problem = "not a cache entry";
        out.push_back(r);
        return;
      }
      const std::string key = name.substr(0, sl);
      std::string bytes, why;
      if (!read_file(r.path, &bytes)) {
        r.problem = fmt::format("unreadable: {}", std::strerror(errno));
        out.push_back(r);
        return;
      }
      auto e = verify(bytes, key, &why);
      r.key = key;
      if (e) {
        r.ok = true;
        r.source_name = e->source_name;
        r.cubin_bytes = e->cubin.size();
      } else {
        r.problem = why;
      }
      out.push_back(r);
    }, [&](const std::string& path, const std::string& why) {
      EntryReport r;
      r.path = path;
      r.problem = fmt::format("unreadable directory: {}", why);
      out.push_back(r);
    });
  }
  return out;
}

std::size_t DiskCache::clear() {
  std::size_t n = 0;
  if (dir_.empty()) return 0;
  for_each_file(dir_, [&](const std::string& sub, const std::string& name) {
    const bool entry = name.size() > std::strlen(kSuffix) &&
                       name.compare(name.size() - std::strlen(kSuffix), std::string::npos, kSuffix) == 0;
    if ((entry || name.rfind(".tmp.", 0) == 0) && ::unlink((sub + "/" + name).c_str()) == 0) ++n;
  }, [](const std::string&, const std::string&) {});
  return n;
}

}  // namespace dsa_indexer::detail
