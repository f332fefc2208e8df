// The command-line tool (docs/RELIABILITY.md): no fixed temp paths, the helper found from the
// build tree, options never misread (issue 12, items 4, 5 and 6).
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/env.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "jit/runtime.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace {

// `program` (a tool this build made) with `args`, in an environment with `env` added.
dsa_test::ChildResult run_tool(const char* program, std::vector<std::string> args,
                               std::vector<std::pair<std::string, std::string>> env = {}) {
  args.insert(args.begin(), program);
  return dsa_test::run_program(args, [env] {
    ::alarm(120);  // survives exec: a hanging tool dies by SIGALRM
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    return true;
  });
}

dsa_test::ChildResult tool(std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {}) {
  return run_tool(DSA_TEST_TOOL, std::move(args), std::move(env));
}

// Links the CUDA toolkit's stub as `dir`/libcuda.so.1 (with `dir` on LD_LIBRARY_PATH, no GPU is
// usable on any machine); false where the toolkit has no stub.
bool link_stub_libcuda(const std::string& dir) {
  const std::string stub = DSA_TEST_CUDA_STUB;
  struct stat st {};
  if (stub.empty() || ::stat(stub.c_str(), &st) != 0) return false;
  return ::symlink(stub.c_str(), (dir + "/libcuda.so.1").c_str()) == 0;
}

int count_entries(const std::string& dir) {
  static int n;
  n = 0;
  ::nftw(dir.c_str(), [](const char*, const struct stat*, int, FTW*) { ++n; return 0; }, 16, FTW_PHYS);
  return n;
}

}  // namespace

TEST_CASE("temp paths: jitcost works in a private mkdtemp directory, never a fixed /tmp name", "[temp_paths]") {
  dsa_test::TempDir t;
  const std::string fixed = "/tmp/dsa_jitcost_cache";  // the name jitcost used to clear and fill
  struct stat st {};
  const bool planted = ::lstat(fixed.c_str(), &st) != 0;
  const std::string victim = t.path() + "/victim", victim_file = victim + "/v1/ab/" + std::string(64, 'a') + ".dsak";
  REQUIRE(std::system(fmt::format("mkdir -p '{}/v1/ab' '{}/v2/ab' '{}/tmp'", victim, victim, t.path()).c_str()) == 0);
  dsa_test::spit(victim_file, "another user's file");
  if (planted) {
    REQUIRE(::symlink(victim.c_str(), fixed.c_str()) == 0);  // what another user could pre-create
  } else {
    WARN(fixed << " exists on this machine: only the TMPDIR part of this test runs");
  }
  // A compile helper that fails at once keeps the run short: jitcost stops at its first compile.
  auto r = tool({"jitcost"}, {{"TMPDIR", t.path() + "/tmp"}, {"DSA_INDEXER_COMPILE_ISOLATION", "process"},
                              {"DSA_INDEXER_COMPILE_HELPER", "/bin/false"}});
  if (planted) ::unlink(fixed.c_str());
  INFO(r.output);
  REQUIRE(r.signal == 0);
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Catch::Contains(t.path() + "/tmp/dsa_jitcost."));  // it said where it worked
  CHECK(dsa_test::slurp(victim_file) == "another user's file");
  CHECK(count_entries(victim) == 6);           // nothing created in the link's target either
  CHECK(count_entries(t.path() + "/tmp") == 1);  // and its private directory is gone
}

TEST_CASE("temp paths: the process-wide runtime jitcost's per-call stage uses gets its private directory", "[temp_paths]") {
  // jitcost (tools/dsa_indexer_cli.cpp) calls Runtime::configure_process with its private
  // directory before any stage; before, the per-call stage ran on Runtime::get() made from env(),
  // the user's default cache. Here the same calls in a child of its own (a fresh process runtime).
  namespace dd = dsa_indexer::detail;
  if (dd::Runtime::process_runtime_made()) {
    // Earlier test cases of this process made its runtime, which a forked child would inherit:
    // this case runs alone in a fresh process of this binary instead.
    const auto fresh = dsa_test::run_program({"/proc/self/exe", "temp paths: the process-wide runtime*"});
    INFO(fresh.output);
    REQUIRE(fresh.exited);
    CHECK(fresh.code == 0);
    return;
  }
  dsa_test::TempDir t;
  const std::string priv = t.path() + "/private", other = t.path() + "/other";
  REQUIRE(::mkdir(priv.c_str(), 0700) == 0);
  const auto r = dsa_test::run_in_child([&]() -> int {
    dd::EnvConfig cfg = dd::env();
    cfg.cache_dir = priv;
    cfg.disk_cache = true;
    if (!dd::Runtime::configure_process(cfg)) return 2;
    dd::Runtime& rt = dd::Runtime::get();
    if (rt.config().cache_dir != priv) return 3;
    dd::EnvConfig late = cfg;
    late.cache_dir = other;
    if (dd::Runtime::configure_process(late)) return 4;  // too late: refused
    if (dd::Runtime::get().config().cache_dir != priv) return 5;
    bool from_disk = false;
    (void)rt.entry(dd::generic_spec(16, dsa_indexer::DType::bf16, false, dd::Layout::bshd), &from_disk);
    return 0;
  });
  INFO(r.output);
  REQUIRE(r.exited);
  CHECK(r.code == 0);
  CHECK(count_entries(priv) > 1);  // the compiled entry was stored there
  struct stat st {};
  CHECK(::lstat(other.c_str(), &st) != 0);
}

TEST_CASE("driver stub: a libcuda.so.1 that is the toolkit's stub gets a message saying so", "[driver_stub]") {
  dsa_test::TempDir t;
  if (!link_stub_libcuda(t.path())) {
    WARN("SKIPPED: the CUDA toolkit has no stubs/libcuda.so here");
    return;
  }
  // bench probes the driver first and stops there without a GPU.
  auto r = tool({"bench"}, {{"LD_LIBRARY_PATH", t.path()}});
  INFO(r.output);
  CHECK(r.code == 3);  // the command needs a GPU and none is usable
  CHECK_THAT(r.output, Catch::Contains("stub library (CUDA_ERROR_STUB_LIBRARY") && Catch::Contains(t.path()));
}

TEST_CASE("newcomer: cache verify exits 0 on a valid read-only prebuilt cache", "[newcomer]") {
  dsa_test::TempDir t;
  const std::string pre = t.path() + "/pre";
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\n");
  auto w = tool({"warmup", "--manifest", t.path() + "/m.txt", "--cache-dir", pre});
  REQUIRE(w.code == 0);
  REQUIRE(std::system(fmt::format("chmod -R a-w '{}'", pre).c_str()) == 0);  // as an image ships it
  // --prebuilt-dir alone: that directory is verified as a read-only cache (ownership, entries),
  // not probed for writing.
  auto v = tool({"cache", "verify", "--prebuilt-dir", pre});
  INFO(v.output);
  CHECK(v.code == 0);
  CHECK_THAT(v.output, Catch::Contains("1 entries ok, 0 bad"));
  // As the writable directory it is reported (a store there would fail).
  v = tool({"cache", "verify", "--cache-dir", pre});
  INFO(v.output);
  if (::geteuid() != 0) CHECK(v.code != 0);  // root may write a 0555 directory
  std::system(fmt::format("chmod -R u+w '{}'", pre).c_str());
}

TEST_CASE("newcomer: error messages carry one prefix", "[newcomer]") {
  dsa_test::TempDir t;
  dsa_test::spit(t.path() + "/bad.txt", "heads=48 sq=1 sk=1\n");
  dsa_test::spit(t.path() + "/file", "x");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"warmup", "--manifest", t.path() + "/missing"},
        std::vector<std::string>{"warmup", "--manifest", t.path() + "/bad.txt", "--cache-dir", t.path() + "/c"},
        std::vector<std::string>{"cache", "verify", "--cache-dir", t.path() + "/file"},
        std::vector<std::string>{"cache", "clear", "--cache-dir", t.path() + "/file"}}) {
    auto r = tool(args);
    INFO(r.output);
    CHECK(r.code != 0);
    // "warmup: warmup: ...", "manifest: manifest: ..." and the like.
    std::istringstream in(r.output);
    std::string w, prev;
    while (in >> w) {
      CHECK_FALSE((w == prev && w.back() == ':'));
      prev = w;
    }
  }
}

namespace {

// A cache directory with one valid entry, used as the default cache of the tool runs below:
// any of them that ran `cache clear` would empty it.
std::string warm_default_cache(const dsa_test::TempDir& t) {
  const std::string dir = t.path() + "/default-cache";
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\n");
  auto w = tool({"warmup", "--manifest", t.path() + "/m.txt", "--cache-dir", dir});
  REQUIRE(w.code == 0);
  return dir;
}

bool default_cache_intact(const std::string& dir) {
  auto v = tool({"cache", "verify", "--cache-dir", dir});
  return v.code == 0 && v.output.find("1 entries ok, 0 bad") != std::string::npos;
}

}  // namespace

TEST_CASE("command line: --help on every command prints its help and runs nothing", "[cli]") {
  dsa_test::TempDir t;
  const std::string dir = warm_default_cache(t);
  const std::vector<std::pair<std::string, std::string>> env = {{"DSA_INDEXER_CACHE_DIR", dir}, {"TMPDIR", t.path()}};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"warmup", "--help"}, {"warmup", "--manifest", "default", "--help"},
        {"cache", "--help"}, {"cache", "ls", "--help"}, {"cache", "verify", "--help"}, {"cache", "clear", "--help"},
        {"cache", "clear", "-h"}, {"demo", "--help"}, {"bench", "--help"}, {"jitcost", "--help"}, {"version", "--help"}}) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    INFO(line);
    auto r = tool(args, env);
    INFO(r.output);
    REQUIRE(r.signal == 0);
    CHECK(r.code == 0);
    CHECK_THAT(r.output, Catch::Contains("Usage: dsa-indexer"));
    // None of the actions ran: no warmup (demo's fallback), no compile, no clear.
    CHECK_THAT(r.output, !Catch::Contains("warmup:") && !Catch::Contains("jitcost:") && !Catch::Contains("cache clear:"));
    CHECK(default_cache_intact(dir));
  }
  auto bench = tool({"bench", "--help"}, env);
  CHECK_THAT(bench.output, Catch::Contains("--in") && Catch::Contains("e4m3") && Catch::Contains("FP8 GEMM"));
  auto top = tool({"--help"});
  CHECK_THAT(top.output, Catch::Contains("--version") && Catch::Contains("Exit codes"));
  auto v = tool({"--version"});
  CHECK(v.code == 0);
  CHECK_THAT(v.output, Catch::Contains("dsa-indexer ") && Catch::Contains("NVRTC"));
}

TEST_CASE("command line: unknown options, missing values and bad values exit 2 and run nothing", "[cli]") {
  dsa_test::TempDir t;
  const std::string dir = warm_default_cache(t);
  const std::vector<std::pair<std::string, std::string>> env = {{"DSA_INDEXER_CACHE_DIR", dir}, {"TMPDIR", t.path()}};
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{}, {"frob"}, {"--frob"}, {"cache"}, {"cache", "frob"}, {"cache", "clear", "--cache_dir", "X"},
        {"cache", "clear", "--cache-dir"}, {"cache", "clear", "extra"}, {"cache", "clear", "--prebuilt-dir", "X"},
        {"cache", "ls", "--bogus"}, {"cache", "verify", "--cache-dir"}, {"warmup"}, {"warmup", "--manifest"},
        {"warmup", "--manifest", "default", "--arch", "sm_80"}, {"warmup", "--manifest", "default", "--cache_dir", dir},
        {"demo", "--bogus"}, {"demo", "extra"}, {"bench", "--family", "frob"}, {"bench", "--reps", "0"},
        {"bench", "--reps", "x"}, {"bench", "--json"}, {"bench", "--in", "e5m2"}, {"bench", "--in"},
        {"bench", "--in", "e4m3", "--op", "both"}, {"jitcost", "--bogus"}, {"jitcost", "--cache-dir"},
        {"version", "--bogus"}}) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    INFO(line);
    auto r = tool(args, env);
    INFO(r.output);
    REQUIRE(r.signal == 0);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, !Catch::Contains("warmup:") && !Catch::Contains("jitcost:") && !Catch::Contains("cache clear:"));
    CHECK(default_cache_intact(dir));
  }
  // `=` works as well as a separate value, and a good command line still runs.
  auto r = tool({"cache", "verify", "--cache-dir=" + dir});
  CHECK(r.code == 0);
  r = tool({"cache", "clear", "--cache-dir", dir}, env);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("removed 1 files"));
}

TEST_CASE("hostcost: its command line, and exit 3 without a usable GPU", "[cli]") {
  auto hostcost = [](std::vector<std::string> args, std::vector<std::pair<std::string, std::string>> env = {}) {
    return run_tool(DSA_TEST_HOSTCOST, std::move(args), std::move(env));
  };
  struct stat built {};
  if (::stat(DSA_TEST_HOSTCOST, &built) != 0) {
    WARN("SKIPPED: " DSA_TEST_HOSTCOST " is not built (a build of the unit tests alone, as the TSan run's)");
    return;
  }
  auto help = hostcost({"--help"});
  CHECK(help.code == 0);
  CHECK_THAT(help.output, Catch::Contains("--keys"));
  CHECK(hostcost({"--keys", "0"}).code == 2);
  CHECK(hostcost({"--frobnicate"}).code == 2);
  dsa_test::TempDir t;
  if (!link_stub_libcuda(t.path())) {
    WARN("SKIPPED the no-GPU case: the CUDA toolkit has no stubs/libcuda.so here");
    return;
  }
  auto r = hostcost({"--keys", "2"}, {{"LD_LIBRARY_PATH", t.path()}});
  INFO(r.output);
  CHECK(r.code == 3);
  CHECK_THAT(r.output, Catch::Contains("needs a Hopper GPU"));
}

// Issue 24, class 4: an empty option value or an empty environment value is an error, never
// "the default". The default cache here is the real one of a temporary HOME.
namespace {
dsa_test::ChildResult tool_in_home(const std::string& home, std::vector<std::string> args,
                                   std::vector<std::pair<std::string, std::string>> env = {}) {
  args.insert(args.begin(), DSA_TEST_TOOL);
  return dsa_test::run_program(args, [home, env] {
    ::alarm(120);
    for (const char* v : {"DSA_INDEXER_CACHE_DIR", "XDG_CACHE_HOME", "DSA_INDEXER_PREBUILT_DIR"}) ::unsetenv(v);
    ::setenv("HOME", home.c_str(), 1);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    return true;
  });
}
}  // namespace

TEST_CASE("empty values: an empty option value is refused and the default cache is untouched", "[empty_values]") {
  dsa_test::TempDir t;
  const std::string home = t.path() + "/home";
  ::mkdir(home.c_str(), 0700);
  ::mkdir((home + "/.cache").c_str(), 0700);
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\n");
  // The user's real cache, as a default `warmup` fills it.
  REQUIRE(tool_in_home(home, {"warmup", "--manifest", t.path() + "/m.txt"}).code == 0);
  const std::string real = home + "/.cache/dsa_indexer";
  REQUIRE(default_cache_intact(real));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"cache", "clear", "--cache-dir", ""}, {"cache", "clear", "--cache-dir="},
        {"cache", "ls", "--cache-dir", ""}, {"cache", "verify", "--prebuilt-dir", ""}, {"cache", "ls", "--prebuilt-dir="},
        {"warmup", "--manifest", ""}, {"warmup", "--manifest", t.path() + "/m.txt", "--cache-dir", ""},
        {"warmup", "--manifest", t.path() + "/m.txt", "--arch", ""}, {"demo", "--cache-dir", ""}, {"bench", "--json", ""},
        {"bench", "--match", ""}, {"bench", "--family", ""}, {"bench", "--reps", ""}, {"bench", "--in", ""}, {"jitcost", "--cache-dir", ""},
        {"jitcost", "--json", ""}}) {
    std::string line;
    for (const auto& a : args) line += "'" + a + "' ";
    INFO(line);
    auto r = tool_in_home(home, args);
    INFO(r.output);
    REQUIRE(r.signal == 0);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, !Catch::Contains("removed") && !Catch::Contains("warmup:") && !Catch::Contains("jitcost:"));
    CHECK(default_cache_intact(real));
  }
  auto r = tool_in_home(home, {"cache", "clear", "--cache-dir", ""});
  CHECK_THAT(r.output, Catch::Contains("empty value"));
}

TEST_CASE("empty values: an empty or malformed environment value is refused, never the default", "[empty_values]") {
  dsa_test::TempDir t;
  const std::string home = t.path() + "/home";
  ::mkdir(home.c_str(), 0700);
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\n");
  REQUIRE(tool_in_home(home, {"warmup", "--manifest", t.path() + "/m.txt"}).code == 0);
  const std::string real = home + "/.cache/dsa_indexer";
  REQUIRE(default_cache_intact(real));
  for (const std::pair<std::string, std::string>& kv :
       std::vector<std::pair<std::string, std::string>>{{"DSA_INDEXER_CACHE_DIR", ""},
                                                        {"DSA_INDEXER_LOG", ""},
                                                        {"DSA_INDEXER_CACHE_CAPACITY", " 5"},
                                                        {"DSA_INDEXER_CACHE_CAPACITY", "+5"},
                                                        {"DSA_INDEXER_COMPILE_TIMEOUT", "+5"},
                                                        {"DSA_INDEXER_DISABLE_LEAN", ""},
                                                        {"HOME", "relative/home"}}) {
    INFO(kv.first << "='" << kv.second << "'");
    auto r = tool_in_home(home, {"cache", "clear"}, {kv});
    INFO(r.output);
    REQUIRE(r.signal == 0);
    CHECK(r.code == 1);
    CHECK_THAT(r.output, Catch::Contains(kv.first) && !Catch::Contains("removed"));
    CHECK(default_cache_intact(real));
  }
  // Without them, `cache clear` clears the default cache (the test's control).
  auto r = tool_in_home(home, {"cache", "clear"});
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("removed 1 files"));
}

TEST_CASE("messages: warmup into an unusable directory says so before compiling anything", "[messages]") {
  dsa_test::TempDir t;
  dsa_test::spit(t.path() + "/file", "x");
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\nsq=64 sk=64 heads=32 family=reference\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tool({"warmup", "--manifest", t.path() + "/m.txt", "--cache-dir", t.path() + "/file/cache"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK_THAT(r.output, Catch::Contains("cannot store kernels in " + t.path() + "/file/cache"));
  CHECK_THAT(r.output, !Catch::Contains("[1/2]") && !Catch::Contains("compiled in"));
  CHECK(s < 5.0);  // two compiles took about 2 s each before
}
