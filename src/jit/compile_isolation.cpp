#include "jit/compile_isolation.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include "core/env.hpp"
#include "core/util.hpp"
#include "jit/cache_fs.hpp"

extern char** environ;

namespace dsa_indexer::detail {
namespace {

// The helper's stderr is kept up to this size (the tail is what explains a crash).
constexpr std::size_t kMaxStderr = 64 << 10;

void put(std::string& s, const std::string& v) {
  uint64_t n = v.size();
  s.append(reinterpret_cast<const char*>(&n), 8);
  s += v;
}
bool get(const std::string& s, std::size_t& pos, std::string* v) {
  if (pos > s.size() || s.size() - pos < 8) return false;
  uint64_t n = 0;
  std::memcpy(&n, s.data() + pos, 8);
  pos += 8;
  if (n > s.size() - pos) return false;
  *v = s.substr(pos, n);
  pos += n;
  return true;
}
// A decimal count field; every counted item takes at least 8 bytes, which bounds it.
bool get_count(const std::string& s, std::size_t& pos, std::size_t* n) {
  std::string v;
  if (!get(s, pos, &v) || v.empty() || v.size() > 19) return false;
  uint64_t c = 0;
  for (char ch : v) {
    if (ch < '0' || ch > '9') return false;
    c = c * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (c > (s.size() - pos) / 8) return false;
  *n = static_cast<std::size_t>(c);
  return true;
}

std::string read_fd(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  return s;
}

bool is_executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

const char* signal_abbrev(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
  }
  return "signal";
}

struct Exchange {
  std::string reply, err;
  int status = 0;
  bool waited = false;
  std::string limit;  // which limit ended the exchange ("" = none)
};

// The helper and its process group. The group is killed before the leader is reaped (a zombie
// leader keeps the group id from being reused), on every way out of the exchange.
class HelperProcess {
 public:
  explicit HelperProcess(pid_t pid) : pid_(pid) {}
  HelperProcess(const HelperProcess&) = delete;
  HelperProcess& operator=(const HelperProcess&) = delete;
  ~HelperProcess() {
    if (!reaped_) {
      kill_group();
      reap(nullptr);
    }
  }
  // Whether the leader has exited, without reaping it.
  bool exited() {
    siginfo_t si{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &si, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
    return si.si_pid == pid_;
  }
  void kill_group() {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);  // in case it has not reached setpgid yet
  }
  // ECHILD (a host that set SIGCHLD to SIG_IGN) leaves the status unknown; the reply decides.
  bool reap(int* status) {
    int st = 0;
    for (;;) {
      if (::waitpid(pid_, &st, 0) >= 0) {
        reaped_ = true;
        if (status) *status = st;
        return true;
      }
      if (errno != EINTR) {
        reaped_ = true;
        return false;
      }
    }
  }

 private:
  pid_t pid_;
  bool reaped_ = false;
};

// The helper attached to a cancel token for the exchange; detached before the helper is
// reaped (declared after the HelperProcess, so destroyed before it).
struct Attached {
  CompileCancel* token;
  bool live;
  Attached(CompileCancel* t, pid_t pid) : token(t), live(t ? t->attach(pid) : true) {}
  ~Attached() {
    if (token) token->detach();
  }
};

struct Fds {
  int v[4] = {-1, -1, -1, -1};
  ~Fds() {
    for (int fd : v)
      if (fd >= 0) ::close(fd);
  }
  void close(int i) {
    if (v[i] >= 0) ::close(v[i]);
    v[i] = -1;
  }
};

// Sends the request and collects the reply and stderr with one poll loop, so no side can block
// the other whatever the helper does first; the loop ends at end of output, at the deadline or
// at a size cap.
Exchange talk(const std::string& helper, const std::string& request, const CompileRequest& req, const CompileLimits& lim) {
  Fds fds;  // 0/1: our and the helper's socket end, 2/3: stderr read and write ends
  int sock[2], errp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock) != 0)
    throw CompileError(fmt::format("isolated compile: socketpair failed: {}", std::strerror(errno)), "", req.options);
  fds.v[0] = sock[0];
  fds.v[1] = sock[1];
  if (::pipe2(errp, O_CLOEXEC) != 0)
    throw CompileError(fmt::format("isolated compile: pipe failed: {}", std::strerror(errno)), "", req.options);
  fds.v[2] = errp[0];
  fds.v[3] = errp[1];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sock[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sock[1], 1);
  posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // a group of its own, so that its children die with it
  char* argv[] = {const_cast<char*>(helper.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, helper.c_str(), &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  fds.close(1);
  fds.close(3);
  if (rc != 0)
    throw CompileError(fmt::format("isolated compile: cannot start {}: {}", helper, std::strerror(rc)), "", req.options);
  HelperProcess child(pid);
  Attached attached(lim.cancel, pid);
  Exchange x;
  if (!attached.live) x.limit = "a cancellation (the process is exiting)";
  std::size_t sent = 0, err_total = 0;
  bool sock_open = true, err_open = true, sending = !request.empty(), leader_gone = false;
  if (!sending) ::shutdown(sock[0], SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(lim.timeout_s);
  char buf[65536];
  while (x.limit.empty() && (sock_open || err_open)) {
    if (lim.cancel && lim.cancel->cancelled()) {
      x.limit = "a cancellation (the process is exiting)";
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      x.limit = fmt::format("the compile timeout of {} s (DSA_INDEXER_COMPILE_TIMEOUT)", lim.timeout_s);
      break;
    }
    pollfd p[2] = {{sock[0], static_cast<short>(sock_open ? (POLLIN | (sending ? POLLOUT : 0)) : 0), 0},
                   {errp[0], static_cast<short>(err_open ? POLLIN : 0), 0}};
    // Wake at least every 200 ms to notice a helper that exited while something it started
    // still holds our pipes open.
    const int n = ::poll(p, 2, static_cast<int>(std::min<long long>(left, 200)));
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (!leader_gone && child.exited()) {
      leader_gone = true;
      child.kill_group();  // stragglers; what the helper wrote is already in the buffers
    }
    if (sending && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t m = ::send(sock[0], request.data() + sent, request.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (m > 0) sent += static_cast<std::size_t>(m);
      if ((m < 0 && errno != EINTR && errno != EAGAIN) || sent == request.size()) {
        ::shutdown(sock[0], SHUT_WR);  // the helper reads to end of input
        sending = false;
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t m = ::recv(sock[0], buf, sizeof buf, MSG_DONTWAIT);
      if (m > 0) {
        const std::size_t got = static_cast<std::size_t>(m);
        if (x.reply.size() + got > lim.max_reply) {
          x.limit = fmt::format("the reply cap of {} bytes ({} MiB; the reply buffer never grows past it, and a reply under it "
                                "takes at most twice that in memory while it is parsed into a log and a cubin)",
                                lim.max_reply, lim.max_reply >> 20);
          break;
        }
        // Grow by doubling but never past the cap: std::string's own growth could reserve twice
        // the cap (and hold both buffers while copying) for a reply one chunk over it.
        if (x.reply.size() + got > x.reply.capacity())
          x.reply.reserve(std::min(lim.max_reply, std::max(x.reply.capacity() * 2, x.reply.size() + got)));
        x.reply.append(buf, got);
      } else if (m == 0 || (errno != EINTR && errno != EAGAIN)) {
        sock_open = sending = false;
      }
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t m = ::read(errp[0], buf, sizeof buf);
      if (m > 0) {
        err_total += static_cast<std::size_t>(m);
        x.err.append(buf, static_cast<std::size_t>(m));
        if (x.err.size() > kMaxStderr) x.err.erase(0, x.err.size() - kMaxStderr);
        if (err_total > lim.max_stderr) {
          x.limit = fmt::format("the stderr cap of {} bytes", lim.max_stderr);
          break;
        }
      } else if (m == 0 || errno != EINTR) {
        err_open = false;
      }
    }
  }
  child.kill_group();  // nothing of the helper outlives the exchange
  x.waited = child.reap(&x.status);
  return x;
}

}  // namespace

void CompileCancel::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_ = true;
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
  }
}

bool CompileCancel::cancelled() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancelled_;
}

bool CompileCancel::attach(pid_t pid) {
  std::lock_guard<std::mutex> lk(mu_);
  if (cancelled_) {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    return false;
  }
  pid_ = pid;
  return true;
}

void CompileCancel::detach() {
  std::lock_guard<std::mutex> lk(mu_);
  pid_ = 0;
}

void CompileCancel::fork_child() {
  pid_ = 0;
  cancelled_ = false;
  mu_.unlock();
}

std::string encode_request(const CompileRequest& req) {
  const TemplateSet& ts = req.templates ? *req.templates : TemplateSet::embedded();
  std::string s = "DSAREQ1";
  put(s, req.source_name);
  put(s, req.source);
  put(s, std::to_string(req.name_expressions.size()));
  for (const auto& e : req.name_expressions) put(s, e);
  put(s, std::to_string(req.options.size()));
  for (const auto& o : req.options) put(s, o);
  auto names = ts.include_closure(req.source);
  put(s, std::to_string(names.size()));
  for (const auto& n : names) {
    put(s, n);
    put(s, *ts.find(n));
  }
  return s;
}

bool decode_request(const std::string& bytes, CompileRequest* req, TemplateSet** templates) {
  if (bytes.compare(0, 7, "DSAREQ1") != 0) return false;
  std::size_t pos = 7, c = 0;
  if (!get(bytes, pos, &req->source_name) || !get(bytes, pos, &req->source) || !get_count(bytes, pos, &c)) return false;
  for (std::size_t i = 0; i < c; ++i) {
    std::string e;
    if (!get(bytes, pos, &e)) return false;
    req->name_expressions.push_back(e);
  }
  if (!get_count(bytes, pos, &c)) return false;
  for (std::size_t i = 0; i < c; ++i) {
    std::string o;
    if (!get(bytes, pos, &o)) return false;
    req->options.push_back(o);
  }
  if (!get_count(bytes, pos, &c)) return false;
  std::map<std::string, std::string> files;
  for (std::size_t i = 0; i < c; ++i) {
    std::string name, text;
    if (!get(bytes, pos, &name) || !get(bytes, pos, &text)) return false;
    files[name] = text;
  }
  *templates = new TemplateSet(std::move(files));
  req->templates = *templates;
  return true;
}

int compile_helper_main(int in, int out) {
  // Die with the parent: a host killed mid-compile must not leave NVRTC running.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 4;  // the parent is already gone
  std::string bytes = read_fd(in);
  CompileRequest req;
  TemplateSet* ts = nullptr;
  std::string reply;
  if (!decode_request(bytes, &req, &ts)) {
    reply = "E";
    put(reply, "malformed compile request");
    put(reply, "");
    write_all(out, reply);
    return 2;
  }
  try {
    CompileOutput o = nvrtc_compile(req);
    reply = "O";
    put(reply, o.log);
    put(reply, o.cubin);
    put(reply, std::to_string(o.lowered_names.size()));
    for (const auto& l : o.lowered_names) put(reply, l);
  } catch (const CompileError& e) {
    reply = "E";
    put(reply, e.what());
    put(reply, e.log());
  } catch (const std::exception& e) {
    reply = "E";
    put(reply, e.what());
    put(reply, "");
  }
  delete ts;
  return write_all(out, reply) ? 0 : 3;
}

std::string compile_helper_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&is_executable), &info) && info.dli_fname) {
    std::string self = info.dli_fname;
    std::string dir = self.substr(0, self.rfind('/') == std::string::npos ? 0 : self.rfind('/'));
    if (dir.empty()) dir = ".";
    for (const std::string& cand : {dir + "/dsa-indexer-nvrtc-helper", dir + "/tools/dsa-indexer-nvrtc-helper",
                                   dir + "/../libexec/dsa_indexer/dsa-indexer-nvrtc-helper"})
      if (is_executable(cand)) return cand;
  }
  return {};
}

std::string compile_helper_path() { return compile_helper_path(env().compile_helper); }

CompileOutput compile_in_subprocess(const CompileRequest& req) {
  CompileLimits lim;
  lim.timeout_s = env().compile_timeout_s;
  return compile_in_subprocess(req, compile_helper_path(), lim);
}

CompileOutput compile_in_subprocess(const CompileRequest& req, const std::string& helper, const CompileLimits& limits) {
  if (limits.cancel && limits.cancel->cancelled())
    throw CompileError(fmt::format("isolated compile of {}: cancelled before it started (the process is exiting)", req.source_name),
                       "", req.options);
  if (helper.empty())
    throw CompileError("DSA_INDEXER_COMPILE_ISOLATION=process: the compile helper dsa-indexer-nvrtc-helper was not found "
                       "(set DSA_INDEXER_COMPILE_HELPER to its path)", "", req.options);
  const Exchange x = talk(helper, encode_request(req), req, limits);
  if (limits.cancel && limits.cancel->cancelled())
    throw CompileError(fmt::format("isolated compile of {}: cancelled, the helper {} was killed (the process is exiting)",
                                   req.source_name, helper),
                       x.err, req.options);
  if (!x.limit.empty())
    throw CompileError(fmt::format("isolated compile of {}: the helper {} exceeded {}; its process group was killed{}{}",
                                   req.source_name, helper, x.limit, x.err.empty() ? "" : "; the tail of its stderr:\n",
                                   x.err),
                       x.err, req.options);
  if (x.waited && WIFSIGNALED(x.status)) {
    const int sig = WTERMSIG(x.status);
    throw CompileError(fmt::format("NVRTC crashed compiling {} in the isolated compiler process {}: signal {} ({}, {}){}{}",
                                   req.source_name, helper, sig, signal_abbrev(sig), strsignal(sig),
                                   x.err.empty() ? "" : "; its stderr:\n", x.err),
                       x.err, req.options);
  }
  std::size_t pos = 1;
  std::string a, b;
  if (x.reply.empty() || (x.reply[0] != 'O' && x.reply[0] != 'E') || !get(x.reply, pos, &a) || !get(x.reply, pos, &b))
    throw CompileError(fmt::format("isolated compile of {}: the helper {} exited with status {} and no valid reply{}{}",
                                   req.source_name, helper, x.waited && WIFEXITED(x.status) ? WEXITSTATUS(x.status) : -1,
                                   x.err.empty() ? "" : "; its stderr:\n", x.err),
                       x.err, req.options);
  if (x.reply[0] == 'E') throw CompileError(a, b, req.options);
  CompileOutput o;
  o.log = std::move(a);  // moved, not copied: the reply plus one copy of its fields at most
  o.cubin = std::move(b);
  std::size_t n = 0;
  if (!get_count(x.reply, pos, &n)) throw CompileError("isolated compile: truncated reply", o.log, req.options);
  for (std::size_t i = 0; i < n; ++i) {
    std::string l;
    if (!get(x.reply, pos, &l)) throw CompileError("isolated compile: truncated reply", o.log, req.options);
    o.lowered_names.push_back(l);
  }
  return o;
}

}  // namespace dsa_indexer::detail
