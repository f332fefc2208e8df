// A SIGSEGV/SIGABRT handler that prints the native stack (backtrace(3)) and re-raises: preloaded by
// bench/deepgemm_peer.sh where gdb is missing, so that a crash inside a peer leaves its frames.
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>
static void handler(int sig) {
  void* f[64];
  int n = backtrace(f, 64);
  const ssize_t w = write(2, "== native stack at the signal:\n", 31);
  (void)w;
  backtrace_symbols_fd(f, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) { signal(SIGSEGV, handler); signal(SIGABRT, handler); }
