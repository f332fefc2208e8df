#include "jit/cache_fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/util.hpp"

namespace dsa_indexer::detail {

DirFd& DirFd::operator=(DirFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

DirFd::~DirFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string trust_problem(const struct stat& st, Trust t, const std::string& path) {
  const uid_t me = ::geteuid();
  const bool owner_ok = st.st_uid == me || (t == Trust::prebuilt && st.st_uid == 0);
  if (!owner_ok)
    return fmt::format("{} is owned by uid {}, not by {} (uid {}); another user could plant kernels there", path,
                       st.st_uid, t == Trust::prebuilt ? "root or this user" : "this user", me);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("{} is writable by {} (mode {:04o}); another user could plant kernels there (chmod go-w)", path,
                       (st.st_mode & S_IWOTH) ? "others" : "its group", st.st_mode & 07777);
  return {};
}

DirFd open_root(const std::string& path) {
  return DirFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK));
}

DirFd open_subdir(const DirFd& parent, const std::string& name) {
  return DirFd(::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
}

bool list_names(const DirFd& dir, std::vector<std::string>* names) {
  const int fd = ::dup(dir.get());
  if (fd < 0) return false;
  ::lseek(fd, 0, SEEK_SET);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return false;
  }
  errno = 0;
  while (dirent* de = ::readdir(d)) {
    const std::string n = de->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  const int err = errno;
  ::closedir(d);
  errno = err;
  return err == 0;
}

const char* file_kind(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  return "a special file";
}

namespace {

// Reads an opened descriptor checked by the callers; `st` is its fstat.
std::string read_fd(int fd, const struct stat& st, std::size_t max_bytes, std::string* out) {
  if (!S_ISREG(st.st_mode)) return fmt::format("{}, not a regular file", file_kind(st));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return fmt::format("{} bytes, more than the {} a valid file can have", st.st_size, max_bytes);
  out->resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out->size()) {
    ssize_t n = ::read(fd, out->data() + got, out->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out->resize(got);
  return {};
}

}  // namespace

std::string read_regular_at(const DirFd& dir, const std::string& name, std::size_t max_bytes, std::string* out,
                            struct stat* st) {
  // A publisher renames a whole new file over an entry at any time (DiskCache::store); one that
  // lands between the lstat and the open is read again, a few times, before it is reported.
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    // lstat first: opening a FIFO, a tty or a tape device has effects of its own, even non-blocking.
    if (::fstatat(dir.get(), name.c_str(), st, AT_SYMLINK_NOFOLLOW) != 0) return std::strerror(errno);
    if (!S_ISREG(st->st_mode)) return fmt::format("{}, not a regular file", file_kind(*st));
    const int fd = ::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return std::strerror(errno);
    struct stat fst {};
    std::string why;
    bool replaced = false;
    if (::fstat(fd, &fst) != 0) {
      why = std::strerror(errno);
    } else if (fst.st_dev != st->st_dev || fst.st_ino != st->st_ino) {
      replaced = true;
      why = "replaced while being opened";
    } else {
      why = read_fd(fd, fst, max_bytes, out);
    }
    *st = fst;
    ::close(fd);
    if (!replaced || attempt == kAttempts) return why;
  }
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes, std::string* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return fmt::format("{}, not a regular file", file_kind(st));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  std::string why;
  if (::fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else
    why = read_fd(fd, st, max_bytes, out);
  ::close(fd);
  return why;
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

}  // namespace dsa_indexer::detail
