#pragma once
// Helpers for tests that need a process of their own: "one warning per process" is a property
// of a process, a file-size limit or a dropped privilege must not leak into the test runner,
// and a compiler crash must not take it down.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace dsa_test {

struct ChildResult {
  bool exited = false;  // false: killed by a signal (see `signal`)
  int code = -1;
  int signal = 0;
  std::string output;   // what the child wrote to stdout and stderr
};

inline std::string read_all(int fd) {
  std::string s;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  return s;
}

// Runs `body` in a forked child with stdout and stderr captured; its return value is the exit
// code. The child leaves with _exit, so nothing of the test framework runs twice.
inline ChildResult run_in_child(const std::function<int()>& body) {
  ChildResult r;
  int out[2];
  if (::pipe(out) != 0) return r;
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return r;
  if (pid == 0) {
    ::close(out[0]);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[1]);
    int code = 100;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: uncaught exception: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(out[1]);
  r.output = read_all(out[0]);
  ::close(out[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(st);
  r.code = r.exited ? WEXITSTATUS(st) : -1;
  r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  return r;
}

// exec()s argv in a child after `setup` (a limit, a dropped privilege) ran there.
inline ChildResult run_program(const std::vector<std::string>& argv, const std::function<bool()>& setup = {}) {
  return run_in_child([&] {
    if (setup && !setup()) return 101;
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::perror("execv");
    return 102;
  });
}

// Root ignores permission bits, so permission cases run as this user after dropping root.
constexpr uid_t kNobody = 65534;
inline bool drop_root_if_needed() {
  if (::geteuid() != 0) return true;
  return ::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0 && ::geteuid() == kNobody;
}

// Whether dropping root works here (it needs CAP_SETUID); probed in a throwaway child.
inline bool can_drop_root() {
  return run_in_child([] { return drop_root_if_needed() ? 0 : 1; }).code == 0;
}

// A file-size limit below any cache entry, with SIGXFSZ ignored so that writes fail with EFBIG
// (what a full disk looks like to the writer: a failed write) instead of killing the process.
inline bool limit_file_size(rlim_t bytes) {
  ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl {bytes, bytes};
  return ::setrlimit(RLIMIT_FSIZE, &rl) == 0;
}

// Runs `body(i)` in `n` forked children at once, released together (a pipe they all read until
// the parent closes it), so that they contend for whatever they share; waits for all.
inline std::vector<ChildResult> run_children_together(int n, const std::function<int(int)>& body) {
  int gate[2];
  std::vector<ChildResult> results(static_cast<std::size_t>(n));
  if (::pipe(gate) != 0) return results;
  std::vector<std::pair<pid_t, int>> kids;  // pid, output pipe
  std::fflush(nullptr);
  for (int i = 0; i < n; ++i) {
    int out[2];
    if (::pipe(out) != 0) break;
    pid_t pid = ::fork();
    if (pid < 0) break;
    if (pid == 0) {
      ::close(out[0]);
      ::close(gate[1]);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::close(out[1]);
      char c;
      while (::read(gate[0], &c, 1) < 0 && errno == EINTR) {
      }
      int code = 100;
      try {
        code = body(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: uncaught exception: %s\n", i, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(out[1]);
    kids.emplace_back(pid, out[0]);
  }
  ::close(gate[0]);
  ::close(gate[1]);  // every child's read returns 0: go
  for (std::size_t i = 0; i < kids.size(); ++i) {
    ChildResult& r = results[i];
    r.output = read_all(kids[i].second);
    ::close(kids[i].second);
    int st = 0;
    while (::waitpid(kids[i].first, &st, 0) < 0 && errno == EINTR) {
    }
    r.exited = WIFEXITED(st);
    r.code = r.exited ? WEXITSTATUS(st) : -1;
    r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  }
  return results;
}

// Threads of this process now (/proc/self/task), or -1 where there is no procfs.
inline int thread_count() {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

inline int count_of(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

}  // namespace dsa_test
