#pragma once
// DSA_INDEXER_COMPILE_ISOLATION=process: NVRTC runs in a helper process (dsa-indexer-nvrtc-helper)
// so that a compiler crash becomes a CompileError carrying the signal and the helper's stderr
// instead of taking the host process down. The helper is found through DSA_INDEXER_COMPILE_HELPER,
// else next to the library (or executable) that contains this code, else in ../libexec/dsa_indexer/.
//
// One helper per compile: request on its stdin, reply on its stdout (one Unix socket, so that a
// helper that dies mid-request gives EPIPE, never SIGPIPE, and no process-wide signal setting is
// touched), stderr on a pipe that becomes the error's log. The cost is a process start plus
// NVRTC's own initialisation per compile (docs/BENCHMARKS.md, "JIT: compile isolation cost").
//
// Nothing the helper does can hang or exhaust the caller: the helper runs in a process group
// of its own, which is killed when the compile timeout passes, when the reply or stderr grows
// past its cap, when the helper itself has exited (stragglers holding our pipes), and whenever
// the exchange ends early (an exception in the caller); the helper dies with its parent
// (PR_SET_PDEATHSIG). Each limit hit is a CompileError naming it.
#include <sys/types.h>

#include <cstddef>
#include <mutex>
#include <string>

#include "jit/nvrtc_compiler.hpp"

namespace dsa_indexer::detail {

// Lets another thread end isolated compiles at once (the background worker's exit path,
// docs/DESIGN.md "Compile modes"): cancel() kills the helper in flight, if any, and every later
// compile given this token raises CompileError without starting one. The helper's pid is
// attached while it is alive and detached before it is reaped, under one lock, so a cancel never
// signals a pid the system has handed to another process. One compile at a time per token.
class CompileCancel {
 public:
  void cancel();
  bool cancelled() const;
  // The fork handlers' steps (the owner registers them): the lock is held across fork(); the
  // child has no helper of its own and is not cancelled.
  void fork_prepare() { mu_.lock(); }
  void fork_parent() { mu_.unlock(); }
  void fork_child();

  // Used by the compile: false (and the helper killed) if cancelled already.
  bool attach(pid_t pid);
  void detach();

 private:
  mutable std::mutex mu_;
  pid_t pid_ = 0;
  bool cancelled_ = false;
};

struct CompileLimits {
  int timeout_s = 600;                           // DSA_INDEXER_COMPILE_TIMEOUT
  std::size_t max_reply = std::size_t(512) << 20;  // a cubin is a few hundred KB; memory: at most twice this
  std::size_t max_stderr = std::size_t(16) << 20;  // the last 64 KiB are kept as the log
  CompileCancel* cancel = nullptr;               // when given, another thread may end the compile
};

// Compiles with the helper at `helper` (an executable path). Throws CompileError for a compile
// failure, a crash (the message names the signal), a helper that cannot be started, a
// malformed reply, or a limit hit (the message names the limit).
CompileOutput compile_in_subprocess(const CompileRequest& req, const std::string& helper,
                                    const CompileLimits& limits = CompileLimits());
// The same with compile_helper_path(env().compile_helper).
CompileOutput compile_in_subprocess(const CompileRequest& req);

// The helper's side: reads one request from fd `in`, compiles, writes one reply to fd `out`.
// Returns the process exit code.
int compile_helper_main(int in, int out);

// Request/reply framing, exposed for tests.
std::string encode_request(const CompileRequest& req);
bool decode_request(const std::string& bytes, CompileRequest* req, TemplateSet** templates);

// `configured` when non-empty, else the first executable helper next to this code; "" if none.
std::string compile_helper_path(const std::string& configured);
std::string compile_helper_path();

}  // namespace dsa_indexer::detail
