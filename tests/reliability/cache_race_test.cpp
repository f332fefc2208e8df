// The multi-process cache race (docs/RELIABILITY.md, item 1). Each round: N writer processes
// (fork/exec of dsa_cache_race_driver, released together by a start barrier) fill one empty
// cache directory with the same four keys, then N readers load them. Checks, every round: every
// process exits 0 with four checked cubins, readers are served from disk, all processes agree on
// each key's cubin bytes, the directory holds exactly four entries that DiskCache::list
// verifies, and no ".tmp." file is left. Prints a summary line; exit 0 only if all rounds pass.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "jit/disk_cache.hpp"
#include "jit/nvrtc_compiler.hpp"

extern char** environ;

using namespace dsa_indexer::detail;

namespace {

struct Options {
  std::string driver, work;
  int procs = 16, rounds = 20;
};

int failures = 0;
void fail(int round, const std::string& what) {
  std::fprintf(stderr, "round %d: FAIL: %s\n", round, what.c_str());
  ++failures;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts `procs` drivers blocked on one pipe, releases them together, waits for all of them.
// Returns each process's exit status (-1 if it could not start or died by a signal).
std::vector<int> run_wave(const Options& o, const std::string& cache, const std::string& logs, const char* expect,
                          const char* tag) {
  int barrier[2];
  if (::pipe(barrier) != 0) return std::vector<int>(static_cast<std::size_t>(o.procs), -1);
  std::vector<pid_t> pids;
  for (int i = 0; i < o.procs; ++i) {
    const std::string out = fmt::format("{}/{}{}.out", logs, tag, i), err = fmt::format("{}/{}{}.err", logs, tag, i);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, barrier[0], 3);
    posix_spawn_file_actions_addclose(&fa, barrier[1]);
    std::vector<std::string> args = {o.driver, "--cache-dir", cache, "--expect", expect, "--wait-fd", "3"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, o.driver.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    pids.push_back(pid);
  }
  ::close(barrier[0]);
  ::close(barrier[1]);  // go
  std::vector<int> status;
  for (pid_t pid : pids) {
    int st = 0;
    if (pid < 0 || ::waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
      status.push_back(-1);
    else
      status.push_back(WEXITSTATUS(st));
  }
  return status;
}

// Every file under dir whose name starts with ".tmp." (a publish that left its temp behind).
int count_temp_files(const std::string& dir) {
  std::string cmd = fmt::format("find '{}' -name '.tmp.*' | wc -l", dir);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  int n = -1;
  if (std::fscanf(p, "%d", &n) != 1) n = -1;
  ::pclose(p);
  return n;
}

void check_wave(int round, const Options& o, const std::vector<int>& status, const std::string& logs, const char* tag,
                std::map<std::string, std::string>* sha_by_key) {
  for (int i = 0; i < o.procs; ++i) {
    if (status[static_cast<std::size_t>(i)] != 0)
      fail(round, fmt::format("{}{} exited with {}: {}", tag, i, status[static_cast<std::size_t>(i)],
                              slurp(fmt::format("{}/{}{}.err", logs, tag, i))));
    std::istringstream in(slurp(fmt::format("{}/{}{}.out", logs, tag, i)));
    std::string word, shape, key, sha;
    int from_disk = 0, lines = 0;
    while (in >> word >> shape >> key >> from_disk >> sha) {
      ++lines;
      auto [it, fresh] = sha_by_key->emplace(key, sha);
      if (!fresh && it->second != sha) fail(round, fmt::format("{}{}: cubin of {} differs between processes", tag, i, shape));
    }
    if (lines != 4) fail(round, fmt::format("{}{} reported {} entries, expected 4", tag, i, lines));
  }
}

void check_dir(int round, const std::string& cache, const char* when) {
  DiskCache d(cache, "", nvrtc_version());
  int ok = 0;
  for (const auto& r : d.list()) {
    if (r.ok)
      ++ok;
    else
      fail(round, fmt::format("{}: bad entry {}: {}", when, r.path, r.problem));
  }
  if (ok != 4) fail(round, fmt::format("{}: {} verified entries, expected exactly 4", when, ok));
  const int tmp = count_temp_files(cache);
  if (tmp != 0) fail(round, fmt::format("{}: {} temp files left behind", when, tmp));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--driver") o.driver = argv[i + 1];
    else if (a == "--work") o.work = argv[i + 1];
    else if (a == "--procs") o.procs = std::atoi(argv[i + 1]);
    else if (a == "--rounds") o.rounds = std::atoi(argv[i + 1]);
  }
  if (o.driver.empty() || o.work.empty() || o.procs < 1 || o.rounds < 1) {
    std::fprintf(stderr, "usage: dsa_cache_race_test --driver PATH --work DIR [--procs 16] [--rounds 20]\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int processes = 0;
  for (int round = 0; round < o.rounds; ++round) {
    const std::string base = fmt::format("{}/round{}", o.work, round);
    (void)std::system(fmt::format("rm -rf '{}'", base).c_str());
    const std::string cache = base + "/cache", logs = base + "/logs";
    if (std::system(fmt::format("mkdir -p '{}' '{}'", cache, logs).c_str()) != 0) {
      fail(round, "cannot create " + base);
      continue;
    }
    std::map<std::string, std::string> sha_by_key;
    const int before = failures;
    check_wave(round, o, run_wave(o, cache, logs, "any", "w"), logs, "w", &sha_by_key);
    check_dir(round, cache, "after the writers");
    check_wave(round, o, run_wave(o, cache, logs, "disk", "r"), logs, "r", &sha_by_key);
    check_dir(round, cache, "after the readers");
    if (sha_by_key.size() != 4) fail(round, fmt::format("{} distinct keys, expected 4", sha_by_key.size()));
    processes += 2 * o.procs;
    if (failures == before) (void)std::system(fmt::format("rm -rf '{}'", base).c_str());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cache race: %d rounds x (%d writers + %d readers) = %d processes, 4 keys, %d failures, %.1f s\n", o.rounds,
              o.procs, o.procs, processes, failures, s);
  return failures ? 1 : 0;
}
