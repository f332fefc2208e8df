#include "ops/manifest_recorder.hpp"

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/util.hpp"
#include "ops/warmup.hpp"

namespace dsa_indexer::detail {
namespace {

// fcntl locks belong to the process, so the threads of one process take turns here first.
// Held across fork() (so that the child's copy is never locked by a thread it does not have).
// A plain mutex taken by polling against the deadline (lock_until below): std::timed_mutex's
// timed wait is pthread_mutex_clocklock, which ThreadSanitizer's interceptors (GCC 12) do not
// know, so every unlock after it was reported as the unlock of an unlocked mutex.
std::mutex& file_mutex() {
  static auto* mu = new std::mutex();  // process lifetime: recording may happen during exit
  static std::once_flag once;
  std::call_once(once, [] {
    ::pthread_atfork([] { file_mutex().lock(); }, [] { file_mutex().unlock(); }, [] { file_mutex().unlock(); });
  });
  return *mu;
}

// Takes `mu` before `deadline`, or returns an unlocked lock: try_lock every 50 us.
std::unique_lock<std::mutex> lock_until(std::mutex& mu, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu, std::try_to_lock);
  while (!lk.owns_lock() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lk.try_lock();
  }
  return lk;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);  // also releases the fcntl lock
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text(const char* what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

}  // namespace

ManifestRecorder::ManifestRecorder(std::string path, DeviceInfo profile, Warn warn, std::chrono::microseconds lock_wait)
    : path_(std::move(path)),
      profile_(std::move(profile)),
      warn_(warn ? std::move(warn) : Warn(log_warning)),
      lock_wait_(lock_wait) {}

RecorderStats ManifestRecorder::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void ManifestRecorder::warn_once(bool* flag, const std::string& msg) {
  if (*flag) return;
  *flag = true;
  warn_(fmt::format("DSA_INDEXER_RECORD_MANIFEST {}: {}", path_, msg));
}

void ManifestRecorder::record(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec) noexcept {
  try {
    const std::string variant = spec.variant_key();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (disabled_ || !seen_.insert(variant).second) return;
    }
    // An internal problem (a fused top-k block's sweep) has no line of its own: the line of its
    // call, the one that implies it, is recorded under its variant.
    std::string line;
    if (p.op == Operation::topk_sweep) {
      if (!p.call) return;
      const Problem& call = *p.call;
      const KernelSpec call_spec =
          make_plan(call, dev, choose_family(call, dev, p.call_family, false), PlanPurpose::spec_only).spec;
      line = manifest_line(call, dev, call_spec, profile_);
    } else {
      line = manifest_line(p, dev, spec, profile_);
    }
    // One deadline for both waits (this process's other recording threads, then the file lock),
    // so a forward call is never held up longer than lock_wait_ by anyone.
    const auto deadline = std::chrono::steady_clock::now() + lock_wait_;
    std::unique_lock<std::mutex> file_lk = lock_until(file_mutex(), deadline);
    if (!file_lk.owns_lock()) {
      drop_busy(variant);
      return;
    }
    if (line.empty()) {
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.unexpressible;
      warn_once(&warned_unexpressible_, fmt::format("no manifest line implies exactly {} (not recorded)", variant));
      return;
    }
    const Outcome o = append_unless_present(variant, line, deadline);
    if (o == Outcome::busy) {
      drop_busy(variant);
      return;
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (o == Outcome::appended) ++stats_.recorded;
    if (o == Outcome::present) ++stats_.present;
  } catch (...) {
    // bad_alloc, or a planning error of a problem the profile cannot plan: never the caller's
    // concern (its call has already been planned on its own device).
  }
}

void ManifestRecorder::drop_busy(const std::string& variant) {
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.dropped;
  seen_.erase(variant);  // offered again if the process meets the variant again
  warn_once(&warned_busy_, fmt::format("locked by another process (or thread) for more than {} us; this kernel key "
                                       "and any other that finds it locked are not recorded",
                                       lock_wait_.count()));
}

ManifestRecorder::Outcome ManifestRecorder::append_unless_present(const std::string& variant, const std::string& line,
                                                                  std::chrono::steady_clock::time_point deadline) {
  // Owner-only (whatever the umask), and never through a link: a planted link (dangling or not)
  // would make a privileged job create or extend a file elsewhere. ELOOP is that link.
  Fd fd(::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW, 0600));
  if (fd.get() < 0) {
    if (errno == ELOOP) {
      warn_once(&warned_io_, "is a symbolic link, which the recorder does not follow: recording stops");
      disabled_ = true;
    } else {
      warn_once(&warned_io_, errno_text("cannot open it to record kernel keys"));
    }
    return Outcome::failed;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    warn_once(&warned_io_, "not a regular file: recording stops");
    disabled_ = true;
    return Outcome::failed;
  }
  if (st.st_uid != ::geteuid()) {
    // As the cache directory's trust rule (src/jit/cache_fs.cpp): another user's file is theirs
    // to fill, read or lock.
    warn_once(&warned_io_, fmt::format("is owned by uid {}, not by this user (uid {}); another user could control what "
                                       "it holds: recording stops",
                                       st.st_uid, ::geteuid()));
    disabled_ = true;
    return Outcome::failed;
  }
  // Whoever can read the file can hold a lock on it: F_SETLK polled up to the deadline, never
  // F_SETLKW.
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file, however long it grows
  for (auto pause = std::chrono::microseconds(50);;) {
    if (::fcntl(fd.get(), F_SETLK, &fl) == 0) break;
    if (errno == EINTR) continue;
    if (errno != EACCES && errno != EAGAIN) {
      warn_once(&warned_io_, errno_text("cannot lock it (fcntl F_SETLK) to record kernel keys"));
      return Outcome::failed;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Outcome::busy;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  if (::fstat(fd.get(), &st) != 0) {  // again, under the lock: what other writers appended
    warn_once(&warned_io_, errno_text("fstat"));
    return Outcome::failed;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxManifestBytes) {
    warn_once(&warned_io_, fmt::format("larger than the manifest limit of {} bytes: recording stops", kMaxManifestBytes));
    disabled_ = true;
    return Outcome::failed;
  }
  if (static_cast<uint64_t>(st.st_dev) != file_dev_ || static_cast<uint64_t>(st.st_ino) != file_ino_ || size < consumed_) {
    // Another file now (replaced, or truncated): read it from the start.
    file_dev_ = static_cast<uint64_t>(st.st_dev);
    file_ino_ = static_cast<uint64_t>(st.st_ino);
    consumed_ = 0;
    lines_read_ = 0;
    in_file_.clear();
  }
  read_new_lines(fd.get(), size);
  if (in_file_.count(variant)) return Outcome::present;

  const std::string text = (ends_without_newline_ ? "\n" : "") + line + "\n";
  if (size + text.size() > kMaxManifestBytes) {
    // Checked before the write: one line more would make `dsa-indexer warmup` reject the file.
    warn_once(&warned_io_, fmt::format("one more line would pass the manifest limit of {} bytes: recording stops",
                                       kMaxManifestBytes));
    disabled_ = true;
    return Outcome::failed;
  }
  const ssize_t n = ::write(fd.get(), text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size())) {
    const std::string why = n < 0 ? errno_text("write") : fmt::format("short write ({} of {} bytes)", n, text.size());
    if (n > 0 && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
      // the partial line stays; the next reader skips it with a warning
    }
    warn_once(&warned_io_, fmt::format("cannot append to it: {}", why));
    return Outcome::failed;
  }
  in_file_.insert(variant);  // our line is read back (and found to imply it) on the next read
  return Outcome::appended;
}

void ManifestRecorder::read_new_lines(int fd, uint64_t size) {
  std::string text(static_cast<std::size_t>(size - consumed_), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, &text[got], text.size() - got, static_cast<off_t>(consumed_ + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  // Whole lines only: a tail without its newline is read again once it has one.
  const std::size_t end = text.rfind('\n');
  ends_without_newline_ = end == std::string::npos ? !text.empty() : end + 1 < text.size();
  if (end == std::string::npos) return;
  std::size_t pos = 0;
  while (pos <= end) {
    const std::size_t nl = text.find('\n', pos);
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++lines_read_;
    try {
      ManifestProblem m;
      if (!parse_manifest_line(line, lines_read_, path_, &m)) continue;
      for (const KernelSpec& s : manifest_specs({m}, profile_)) in_file_.insert(s.variant_key());
    } catch (const std::exception& e) {
      warn_once(&warned_content_, fmt::format("skipping a line that is not a manifest line ({}); valid lines are still "
                                              "appended, but `dsa-indexer warmup` rejects the file until it is removed",
                                              e.what()));
    }
  }
  consumed_ += end + 1;
}

}  // namespace dsa_indexer::detail
