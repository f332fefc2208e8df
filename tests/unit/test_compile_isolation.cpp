#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "jit/codegen.hpp"
#include "jit/compile_isolation.hpp"
#include "dsa_indexer/errors.hpp"
#include "core/env.hpp"
#include "dispatch/planner.hpp"
#include "process_support.hpp"
#include "jit/runtime.hpp"
#include "test_support.hpp"

using namespace dsa_indexer::detail;

TEST_CASE("isolation: request framing round-trips", "[isolation]") {
  KernelSpec s = reference_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd);
  GeneratedSource g = render(s);
  CompileRequest req{g.name, g.text, g.kernels, compile_options("sm_90a"), nullptr};
  std::string bytes = encode_request(req);
  CompileRequest back;
  TemplateSet* ts = nullptr;
  REQUIRE(decode_request(bytes, &back, &ts));
  CHECK(back.source == req.source);
  CHECK(back.name_expressions == req.name_expressions);
  CHECK(back.options == req.options);
  CHECK(ts->include_closure(back.source) == TemplateSet::embedded().include_closure(req.source));
  delete ts;
  CHECK_FALSE(decode_request(bytes.substr(0, bytes.size() / 2), &back, &ts));
}

namespace {

CompileRequest reference_request(int heads = 16) {
  KernelSpec s = reference_spec(heads, dsa_indexer::DType::bf16, false, Layout::bshd);
  static std::vector<GeneratedSource> keep;  // the request holds no strings of its own
  keep.push_back(render(s));
  const GeneratedSource& g = keep.back();
  return CompileRequest{g.name, g.text, g.kernels, compile_options("sm_90a"), nullptr};
}

// A wgmma whose shared-memory descriptors are compile-time constants crashes NVRTC 13.0 inside
// nvrtcCompileProgram. Of the constants tried (0x4000004000010040 and other plausible swizzled
// descriptors compile fine) a zero descriptor, for A or B, dies with SIGSEGV every time, on
// NVRTC 13.0.88. Self-contained so that it does not depend on the templates.
const char* kCrashingSource = R"(
extern "C" __global__ void k(float* out) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(0x0ull), "l"(0x0ull), "r"(0));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = d[i];
}
)";

std::string compile_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dsa_indexer::CompileError& e) {
    return std::string(e.what()) + "\n--- log ---\n" + e.log();
  }
  return {};
}

}  // namespace

TEST_CASE("isolation: an isolated compile gives the in-process cubin", "[isolation]") {
  const CompileRequest req = reference_request();
  const CompileOutput in = nvrtc_compile(req);
  const CompileOutput iso = compile_in_subprocess(req, DSA_TEST_HELPER);
  CHECK(iso.cubin == in.cubin);  // bitwise: -frandom-seed makes NVRTC output a function of its input
  CHECK(iso.lowered_names == in.lowered_names);
  CHECK_THAT(iso.log, Catch::Contains("ptxas info"));
}

TEST_CASE("isolation: a crashing helper is a CompileError naming the signal and carrying stderr", "[isolation]") {
  const std::string msg = compile_error_of([] { compile_in_subprocess(reference_request(), DSA_TEST_CRASHER); });
  CHECK_THAT(msg, Catch::Contains("signal 11 (SIGSEGV"));
  CHECK_THAT(msg, Catch::Contains("crash_helper: request read, crashing now"));
  CHECK_THAT(msg, Catch::Contains("sm90_indexer_reference"));
}

TEST_CASE("isolation: NVRTC's own crash on constant wgmma descriptors is contained", "[isolation]") {
  const CompileRequest req{"crash_wgmma_const_desc.cu", kCrashingSource, {"k"}, compile_options("sm_90a"), nullptr};
  // First show that in process it really kills the caller (in a child, so not this runner).
  auto r = dsa_test::run_in_child([&] {
    try {
      nvrtc_compile(req);
      std::printf("compiled\n");
    } catch (const std::exception& e) {
      std::printf("threw: %s\n", e.what());
    }
    return 0;
  });
  if (r.signal == 0) {
    WARN("NOT REPRODUCED: NVRTC " << nvrtc_version() << " did not crash on the constant-descriptor wgmma ("
                                  << r.output << "); only the stand-in crash helper covers isolation here");
    return;
  }
  CHECK(r.signal == SIGSEGV);
  const std::string msg = compile_error_of([&] { compile_in_subprocess(req, DSA_TEST_HELPER); });
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains(fmt::format("signal {} (", r.signal)));
  CHECK_THAT(msg, Catch::Contains("crash_wgmma_const_desc.cu"));
}

TEST_CASE("isolation: the runtime uses its config's helper; failures are CompileErrors", "[isolation]") {
  dsa_test::TempDir t;
  KernelSpec spec = reference_spec(32, dsa_indexer::DType::bf16, false, Layout::bshd);
  EnvConfig cfg;
  cfg.cache_dir = t.path();
  cfg.isolation = CompileIsolation::process;
  cfg.compile_helper = DSA_TEST_CRASHER;
  {
    Runtime rt(cfg);
    bool from_disk = true;
    CHECK_THAT(compile_error_of([&] { rt.entry(spec, &from_disk); }), Catch::Contains("SIGSEGV"));
    CHECK(rt.stats().compiles == 0);
    CHECK(rt.disk().list().empty());  // nothing published for a failed compile
  }
  cfg.compile_helper = DSA_TEST_HELPER;
  Runtime rt(cfg);
  bool from_disk = true;
  const CacheEntry e = rt.entry(spec, &from_disk);
  CHECK_FALSE(from_disk);
  CHECK(rt.stats().compiles == 1);
  CHECK(e.cubin == nvrtc_compile(reference_request(32)).cubin);
  cfg.compile_helper = t.path() + "/no-such-helper";
  CHECK_THAT(compile_error_of([&] { compile_in_subprocess(reference_request(), cfg.compile_helper); }),
             Catch::Contains("cannot start"));
}

TEST_CASE("isolation: a helper that exits without reading never raises SIGPIPE in the host", "[isolation]") {
  // /bin/true exits at once, so the request (the source plus every template) meets a closed
  // socket. Several threads at once: the fix replaced a process-wide SIGPIPE toggle that one
  // thread could restore while another was still writing.
  if (::access("/bin/true", X_OK) != 0) {
    WARN("SKIPPED: no /bin/true");
    return;
  }
  KernelSpec g = generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd);
  const GeneratedSource src = render(g);
  const CompileRequest req{src.name, src.text, src.kernels, compile_options("sm_90a"), nullptr};
  std::vector<std::future<std::string>> fs;
  for (int i = 0; i < 4; ++i)
    fs.push_back(std::async(std::launch::async, [&] {
      std::string all;
      for (int j = 0; j < 10; ++j) all += compile_error_of([&] { compile_in_subprocess(req, "/bin/true"); }) + "\n";
      return all;
    }));
  for (auto& f : fs) {
    const std::string all = f.get();
    CHECK(dsa_test::count_of(all, "no valid reply") == 10);
  }
}

namespace {

// A stand-in helper written as a shell script in `dir` (executable, private to the test).
std::string script(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string p = dir + "/" + name;
  dsa_test::spit(p, "#!/bin/sh\n" + body);
  ::chmod(p.c_str(), 0700);
  return p;
}

// Whether `pid` is gone (or only a zombie waiting for a reaper that is not us).
bool process_gone(pid_t pid) {
  for (int i = 0; i < 50; ++i) {
    const std::string stat = dsa_test::slurp(fmt::format("/proc/{}/stat", pid));
    const std::size_t close = stat.rfind(')');
    if (stat.empty() || (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z')) return true;
    ::usleep(20000);
  }
  return false;
}

}  // namespace

TEST_CASE("isolation limits: a hanging helper is killed with its process group at the timeout", "[isolation_limits]") {
  dsa_test::TempDir t;
  // The helper starts a grandchild that holds the pipes open, then hangs itself.
  const std::string h = script(t.path(), "hang.sh", fmt::format("sleep 1000 &\necho $! > {}/grandchild\nsleep 1000\n", t.path()));
  CompileLimits lim;
  lim.timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = compile_error_of([&] { compile_in_subprocess(reference_request(), h, lim); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_THAT(msg, Catch::Contains("compile timeout of 1 s (DSA_INDEXER_COMPILE_TIMEOUT)") &&
                      Catch::Contains("process group was killed"));
  CHECK(s < 10);
  const pid_t grandchild = static_cast<pid_t>(std::atol(dsa_test::slurp(t.path() + "/grandchild").c_str()));
  REQUIRE(grandchild > 0);
  CHECK(process_gone(grandchild));
}

TEST_CASE("isolation limits: a helper that exits but leaves a child holding the pipes does not hang", "[isolation_limits]") {
  dsa_test::TempDir t;
  const std::string h = script(t.path(), "leave.sh", fmt::format("sleep 1000 &\necho $! > {}/grandchild\nexit 3\n", t.path()));
  CompileLimits lim;
  lim.timeout_s = 60;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = compile_error_of([&] { compile_in_subprocess(reference_request(), h, lim); });
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10);
  CHECK_THAT(msg, Catch::Contains("exited with status 3"));
  CHECK(process_gone(static_cast<pid_t>(std::atol(dsa_test::slurp(t.path() + "/grandchild").c_str()))));
}

TEST_CASE("isolation limits: a helper flooding its reply or its stderr hits a cap", "[isolation_limits]") {
  dsa_test::TempDir t;
  CompileLimits lim;
  lim.timeout_s = 60;
  lim.max_reply = std::size_t(4) << 20;
  lim.max_stderr = std::size_t(4) << 20;
  const std::string out = script(t.path(), "flood_out.sh", "exec cat /dev/zero\n");
  const std::string err = script(t.path(), "flood_err.sh", "exec cat /dev/zero >&2\n");
  CHECK_THAT(compile_error_of([&] { compile_in_subprocess(reference_request(), out, lim); }),
             Catch::Contains("reply cap of 4194304 bytes"));
  const std::string e = compile_error_of([&] { compile_in_subprocess(reference_request(), err, lim); });
  CHECK_THAT(e, Catch::Contains("stderr cap of 4194304 bytes"));
  CHECK(e.size() < (std::size_t(1) << 20));  // the log is the bounded tail, not the flood
}

namespace {
// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"), -1 where unreadable.
long proc_status_kib(const std::string& field) {
  std::istringstream in(dsa_test::slurp("/proc/self/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  return -1;
}
}  // namespace

TEST_CASE("isolation limits: the reply cap is the memory bound the message states", "[isolation_limits]") {
  // Before, the reply string grew by std::string's doubling: a flood one chunk past a 64 MiB
  // cap reserved 128 MiB and held both buffers, a peak of twice the cap the message named.
  dsa_test::TempDir t;
  const std::string out = script(t.path(), "flood_out.sh", "exec cat /dev/zero\n");
  const std::size_t cap = std::size_t(64) << 20;
  const auto r = dsa_test::run_in_child([&]() -> int {
    CompileLimits lim;
    lim.timeout_s = 60;
    lim.max_reply = cap;
    const long before = proc_status_kib("VmRSS");
    const std::string msg = compile_error_of([&] { compile_in_subprocess(reference_request(), out, lim); });
    const long peak = proc_status_kib("VmHWM");
    std::printf("MSG %s\nRSS %ld HWM %ld\n", msg.c_str(), before, peak);
    return before < 0 || peak < 0 ? 3 : 0;
  });
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("reply cap of 67108864 bytes (64 MiB; the reply buffer never grows past it"));
  long before = -1, peak = -1;
  std::sscanf(r.output.c_str() + r.output.find("RSS "), "RSS %ld HWM %ld", &before, &peak);
  const double grown_mib = (peak - before) / 1024.0;
  INFO("peak growth " << grown_mib << " MiB for a 64 MiB cap");
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // A sanitizer's shadow memory multiplies resident memory (321 MiB for this case under TSan):
  // the bound is measured by the plain build only; the message is checked above in both.
  WARN("resident memory bound not measured under a sanitizer");
#else
  CHECK(grown_mib < 64 * 1.25);
#endif
}

TEST_CASE("isolation limits: the runtime applies DSA_INDEXER_COMPILE_TIMEOUT from its config", "[isolation_limits]") {
  dsa_test::TempDir t;
  EnvConfig cfg;
  cfg.cache_dir = t.path() + "/cache";
  cfg.isolation = CompileIsolation::process;
  cfg.compile_helper = script(t.path(), "hang.sh", "exec sleep 1000\n");
  cfg.compile_timeout_s = 1;
  Runtime rt(cfg);
  bool from_disk = false;
  const KernelSpec s = reference_spec(16, dsa_indexer::DType::bf16, false, Layout::bshd);
  CHECK_THAT(compile_error_of([&] { rt.entry(s, &from_disk); }), Catch::Contains("compile timeout of 1 s"));
  auto env_of = [](const char* v) {
    return parse_env([v](const char* n) { return std::string(n) == "DSA_INDEXER_COMPILE_TIMEOUT" ? v : nullptr; });
  };
  CHECK(env_of("30").compile_timeout_s == 30);
  CHECK(env_of(nullptr).compile_timeout_s == 600);
  for (const char* bad : {"0", "-1", "abc", "86401", "1.5"}) CHECK_THROWS_AS(env_of(bad), dsa_indexer::InvalidArgument);
}

TEST_CASE("isolation limits: the build-tree tool finds the helper as the installed one does", "[isolation_limits]") {
  dsa_test::TempDir t;
  dsa_test::spit(t.path() + "/m.txt", "sq=64 sk=64 heads=16 family=reference\n");
  auto r = dsa_test::run_program({DSA_TEST_TOOL, "warmup", "--manifest", t.path() + "/m.txt", "--cache-dir", t.path() + "/c"},
                                 [] {
                                   ::alarm(120);
                                   ::unsetenv("DSA_INDEXER_COMPILE_HELPER");
                                   ::setenv("DSA_INDEXER_COMPILE_ISOLATION", "process", 1);
                                   return true;
                                 });
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("1 compiled, 0 already cached, 0 failed"));
}

TEST_CASE("isolation limits: a cancel token kills the helper in flight at once, and refuses later compiles", "[isolation_limits]") {
  dsa_test::TempDir t;
  const std::string h = script(t.path(), "hang.sh", fmt::format("sleep 1000 &\necho $! > {}/grandchild\nsleep 1000\n", t.path()));
  CompileLimits lim;
  lim.timeout_s = 600;
  dsa_indexer::detail::CompileCancel cancel;
  lim.cancel = &cancel;
  std::string msg;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread compiling([&] { msg = compile_error_of([&] { compile_in_subprocess(reference_request(), h, lim); }); });
  // Cancel once the helper runs (it has written its grandchild's pid).
  while (dsa_test::slurp(t.path() + "/grandchild").empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    ::usleep(10000);
  cancel.cancel();
  compiling.join();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10);
  CHECK_THAT(msg, Catch::Contains("cancelled") && Catch::Contains("was killed"));
  CHECK(process_gone(static_cast<pid_t>(std::atol(dsa_test::slurp(t.path() + "/grandchild").c_str()))));
  // A compile after the cancel never starts a helper.
  ::unlink((t.path() + "/grandchild").c_str());
  CHECK_THAT(compile_error_of([&] { compile_in_subprocess(reference_request(), h, lim); }),
             Catch::Contains("cancelled before it started"));
  CHECK(dsa_test::slurp(t.path() + "/grandchild").empty());
}
