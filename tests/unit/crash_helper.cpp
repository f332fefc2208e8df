// Reads its request like dsa-indexer-nvrtc-helper, says so on stderr, then dies the way a
// compiler crash does (the parent must turn both the signal and the stderr into a CompileError).
#include <csignal>
#include <cstring>
#include <unistd.h>

int main() {
  char buf[4096];
  while (read(0, buf, sizeof buf) > 0) {
  }
  const char msg[] = "crash_helper: request read, crashing now\n";
  (void)!write(2, msg, std::strlen(msg));
  std::raise(SIGSEGV);
  return 0;
}
