#pragma once
// Shape recording (DSA_INDEXER_RECORD_MANIFEST; docs/DESIGN.md, "Compile modes"): every kernel
// variant a process meets, appended to a manifest file as the line manifest_line() writes, so
// that `dsa-indexer warmup --manifest FILE` warms exactly what the process needed.
//
// Contract:
//  - record(p, dev, spec): the first time this object sees the spec's variant key it appends
//    the spec's line, unless a line of the file already implies the variant (read back through
//    parse_manifest_line + manifest_specs on the profile). Read-check-append runs under a
//    process-wide mutex and an fcntl write lock on the whole file (POSIX record locks are not
//    inherited across fork(), so a child can never hold the file locked on its parent's
//    behalf); each line is one write() to an O_APPEND descriptor, and a short write is
//    truncated away. So several threads and processes appending at once record every variant
//    exactly once, each line whole.
//  - it never blocks the caller for long: both waits share one deadline (kLockWait, 5 ms, by
//    default); past it the line is dropped (stats().dropped, one warning per object) and the
//    variant is offered again the next time this object meets it. Anyone who can open the file
//    can hold a lock on it, so without the deadline another user could stall every new-shape
//    call of the process (and its fork()s, which take the process-wide mutex).
//  - the file it creates is owner-only (0600, whatever the umask); a symbolic link at the path
//    (dangling or not) is never followed, and a file owned by another user is refused: one
//    warning, and recording stops (docs/RELIABILITY.md, round 3).
//  - a line that would take the file past kMaxManifestBytes is not written (one warning, and
//    recording stops), so the recorder never makes a file `dsa-indexer warmup` refuses.
//  - it never throws into the caller's call: a file it cannot open, lock or write (permissions,
//    ENOSPC), a path that is not a regular file, or a file over the manifest limit is one
//    warning per object (and recording stops for the last three); a line of the file that is
//    not a manifest line is one warning per object and is skipped, and valid lines keep being
//    appended; a variant no line can express is one warning per object and is not recorded.
//  - the file is read incrementally: lines already read are not read again while the file keeps
//    its identity (device, inode) and does not shrink.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>

#include "dispatch/planner.hpp"
#include "core/problem.hpp"

namespace dsa_indexer::detail {

struct RecorderStats {
  uint64_t recorded = 0;   // lines this object appended
  uint64_t present = 0;    // variants it found already implied by the file
  uint64_t unexpressible = 0;  // variants no manifest line can say (not recorded)
  uint64_t dropped = 0;    // lines not recorded because the file stayed locked past the wait
};

class ManifestRecorder {
 public:
  using Warn = std::function<void(const std::string&)>;
  // The longest a record() waits for the file (other threads of this process, then the fcntl
  // lock of another process) before it drops the line.
  static constexpr std::chrono::microseconds kLockWait{5000};
  ManifestRecorder(std::string path, DeviceInfo profile, Warn warn = nullptr, std::chrono::microseconds lock_wait = kLockWait);

  void record(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec) noexcept;
  RecorderStats stats() const;
  const std::string& path() const { return path_; }

 private:
  enum class Outcome { appended, present, failed, busy };
  Outcome append_unless_present(const std::string& variant, const std::string& line,
                                std::chrono::steady_clock::time_point deadline);
  void drop_busy(const std::string& variant);
  void read_new_lines(int fd, uint64_t size);
  void warn_once(bool* flag, const std::string& msg);

  const std::string path_;
  const DeviceInfo profile_;
  const Warn warn_;
  const std::chrono::microseconds lock_wait_;
  mutable std::mutex mu_;  // seen_ and stats_; the rest is guarded by the process-wide file lock
  std::unordered_set<std::string> seen_;     // variants this object has handled
  RecorderStats stats_;
  std::unordered_set<std::string> in_file_;  // variants the lines read so far imply
  uint64_t file_dev_ = 0, file_ino_ = 0, consumed_ = 0;
  int lines_read_ = 0;
  bool ends_without_newline_ = false;
  std::atomic<bool> disabled_{false};
  bool warned_io_ = false, warned_content_ = false, warned_unexpressible_ = false, warned_busy_ = false;
};

}  // namespace dsa_indexer::detail
