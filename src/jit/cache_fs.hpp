#pragma once
// File-system primitives of the disk cache: descriptor-relative walking that never follows a
// link below the cache root and never blocks on a special file, and the ownership rules that
// decide whether a directory or an entry may be trusted (docs/RELIABILITY.md, threat model).
//
// The root is opened by path (a symlinked ~/.cache is common and is the user's choice); every
// name below it is opened with O_NOFOLLOW relative to its parent's descriptor, so a link or a
// rename planted between two steps cannot redirect the walk.
#include <sys/stat.h>

#include <cstddef>
#include <string>
#include <vector>

namespace dsa_indexer::detail {

// Who must own what the cache reads from a directory.
enum class Trust {
  own,       // the writable cache: owned by the effective user, writable by nobody else
  prebuilt,  // read-only cache: owned by root or the effective user, writable by nobody else
};

// "" when `st` (of `path`) satisfies `t`, else the reason, naming the path, owner and mode.
std::string trust_problem(const struct stat& st, Trust t, const std::string& path);

// An open directory descriptor (closed on destruction).
class DirFd {
 public:
  DirFd() = default;
  explicit DirFd(int fd) : fd_(fd) {}
  DirFd(DirFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirFd& operator=(DirFd&& o) noexcept;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  ~DirFd();
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Opens `path` as a directory (following a link at the root only). Sets errno on failure.
DirFd open_root(const std::string& path);
// Opens `name` below `parent` as a directory without following a link (ELOOP or ENOTDIR
// when it is one).
DirFd open_subdir(const DirFd& parent, const std::string& name);
// The names in `dir` except "." and ".."; false (errno set) if it cannot be read.
bool list_names(const DirFd& dir, std::vector<std::string>* names);

// Reads regular file `name` below `dir` into `out`: refuses (before opening) anything that is
// not a regular file, opens with O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, re-checks the opened
// descriptor (a file replaced in between is read again, up to 4 times: publishers rename whole
// files over entries at any time), and refuses files larger than `max_bytes`. `st` receives the
// file's status.
// Returns "" or why not (a FIFO, a device, a link, too large, an errno text).
std::string read_regular_at(const DirFd& dir, const std::string& name, std::size_t max_bytes, std::string* out,
                            struct stat* st);
// The same for a path given by a user (a manifest): the path may be a link to a regular file.
std::string read_regular_file(const std::string& path, std::size_t max_bytes, std::string* out);

// What kind of file `st` describes, for messages ("a FIFO", "a directory", ...).
const char* file_kind(const struct stat& st);

// Writes all of `s` to `fd` (retrying short writes and EINTR); false on any other failure.
bool write_all(int fd, const std::string& s);

}  // namespace dsa_indexer::detail
