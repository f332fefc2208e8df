#include "compile_isolation.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "env.hpp"
#include "util.hpp"

extern char** environ;

namespace dsa_indexer::detail {
namespace {

void put(std::string& s, const std::string& v) {
  uint64_t n = v.size();
  s.append(reinterpret_cast<const char*>(&n), 8);
  s += v;
}
bool get(const std::string& s, std::size_t& pos, std::string* v) {
  if (pos + 8 > s.size()) return false;
  uint64_t n = 0;
  std::memcpy(&n, s.data() + pos, 8);
  pos += 8;
  if (n > s.size() - pos) return false;
  *v = s.substr(pos, n);
  pos += n;
  return true;
}

bool write_fd(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
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

}  // namespace

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
  std::size_t pos = 7;
  std::string n;
  if (!get(bytes, pos, &req->source_name) || !get(bytes, pos, &req->source) || !get(bytes, pos, &n)) return false;
  for (unsigned long i = 0, c = std::stoul(n); i < c; ++i) {
    std::string e;
    if (!get(bytes, pos, &e)) return false;
    req->name_expressions.push_back(e);
  }
  if (!get(bytes, pos, &n)) return false;
  for (unsigned long i = 0, c = std::stoul(n); i < c; ++i) {
    std::string o;
    if (!get(bytes, pos, &o)) return false;
    req->options.push_back(o);
  }
  if (!get(bytes, pos, &n)) return false;
  std::map<std::string, std::string> files;
  for (unsigned long i = 0, c = std::stoul(n); i < c; ++i) {
    std::string name, text;
    if (!get(bytes, pos, &name) || !get(bytes, pos, &text)) return false;
    files[name] = text;
  }
  *templates = new TemplateSet(std::move(files));
  req->templates = *templates;
  return true;
}

int compile_helper_main(int in, int out) {
  std::string bytes = read_fd(in);
  CompileRequest req;
  TemplateSet* ts = nullptr;
  std::string reply;
  if (!decode_request(bytes, &req, &ts)) {
    reply = "E";
    put(reply, "malformed compile request");
    put(reply, "");
    write_fd(out, reply);
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
  return write_fd(out, reply) ? 0 : 3;
}

std::string compile_helper_path() {
  std::string env_path = env().compile_helper;
  if (!env_path.empty()) return env_path;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&compile_helper_path), &info) && info.dli_fname) {
    std::string self = info.dli_fname;
    std::string dir = self.substr(0, self.rfind('/') == std::string::npos ? 0 : self.rfind('/'));
    if (dir.empty()) dir = ".";
    for (const std::string cand : {dir + "/dsa-indexer-nvrtc-helper", dir + "/tools/dsa-indexer-nvrtc-helper",
                                   dir + "/../libexec/dsa_indexer/dsa-indexer-nvrtc-helper"})
      if (is_executable(cand)) return cand;
  }
  return {};
}

CompileOutput compile_in_subprocess(const CompileRequest& req) {
  const std::string helper = compile_helper_path();
  if (helper.empty())
    throw CompileError("DSA_INDEXER_COMPILE_ISOLATION=process: the compile helper dsa-indexer-nvrtc-helper was not found "
                       "(set DSA_INDEXER_COMPILE_HELPER to its path)", "", req.options);
  const std::string request = encode_request(req);
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0)
    throw CompileError(fmt::format("isolated compile: pipe failed: {}", std::strerror(errno)), "", req.options);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  char* argv[] = {const_cast<char*>(helper.c_str()), nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, helper.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (rc != 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    throw CompileError(fmt::format("isolated compile: cannot start {}: {}", helper, std::strerror(rc)), "", req.options);
  }
  // The helper reads the whole request before writing, so writing it all first cannot deadlock.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  write_fd(to_child[1], request);
  ::sigaction(SIGPIPE, &old, nullptr);
  ::close(to_child[1]);
  std::string reply = read_fd(from_child[0]);
  ::close(from_child[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    throw CompileError(fmt::format("NVRTC crashed compiling {} in the isolated compiler process: signal {} ({})",
                                   req.source_name, sig, strsignal(sig)),
                       "", req.options);
  }
  std::size_t pos = 1;
  std::string a, b;
  if (reply.empty() || !get(reply, pos, &a) || !get(reply, pos, &b))
    throw CompileError(fmt::format("isolated compile of {}: the helper exited with status {} and no reply", req.source_name,
                                   WIFEXITED(status) ? WEXITSTATUS(status) : -1),
                       "", req.options);
  if (reply[0] == 'E') throw CompileError(a, b, req.options);
  CompileOutput o;
  o.log = a;
  o.cubin = b;
  std::string n;
  if (!get(reply, pos, &n)) throw CompileError("isolated compile: truncated reply", o.log, req.options);
  for (unsigned long i = 0, c = std::stoul(n); i < c; ++i) {
    std::string l;
    if (!get(reply, pos, &l)) throw CompileError("isolated compile: truncated reply", o.log, req.options);
    o.lowered_names.push_back(l);
  }
  return o;
}

}  // namespace dsa_indexer::detail
