// The compile modes and the shape recording on the device (README, "Compile modes and shape
// recording"). The environment is read once per process, so each scenario runs in a child: this
// binary again (exec'd, so that its CUDA is its own), with the variables set and a hidden test
// case selected; the visible test case checks that the child passed.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <thread>

#include "jit/disk_cache.hpp"
#include "core/env.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "gpu_cases.hpp"
#include "process_support.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "test_support.hpp"
#include "ops/warmup.hpp"

using namespace dsa_gpu_test;
namespace dd = dsa_indexer::detail;

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// This binary with `filter` (a hidden test case's tag), the variables of `env` set and every
// other DSA_INDEXER_* variable of the compile modes removed; --warn NoTests makes a filter that
// matches nothing a failure (exit 2) rather than a pass.
dsa_test::ChildResult run_child(const std::string& filter, const std::vector<std::pair<std::string, std::string>>& env) {
  return dsa_test::run_program({self_exe(), filter, "--warn", "NoTests"}, [&] {
    for (const char* v : {"DSA_INDEXER_LEAN_COMPILE", "DSA_INDEXER_RECORD_MANIFEST", "DSA_INDEXER_DISABLE_LEAN",
                          "CUDNNFE_DSA_INDEXER_FWD_DISABLE_LEAN", "DSA_INDEXER_PREBUILT_DIR", "DSA_INDEXER_DISK_CACHE"})
      ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    return true;
  });
}

void check_child(const dsa_test::ChildResult& r, const char* marker) {
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  CHECK(dsa_test::count_of(r.output, marker) == 1);
}

// A shape that passes every lean gate on a 132-SM device: 256 q-tiles, B 1.
HostProblem async_shape() {
  HostProblem p = bshd(1, 2048, 1024, 64, 2);
  p.sm_scale = 0.125f;
  return p;
}

template <class Pred>
bool wait_for(Pred&& done, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::steady_clock::now() - t0 > limit) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

TEST_CASE("async child: generic while the lean variant compiles once in the background, then lean, same bits", "[.async_child]") {
  REQUIRE(dd::env().lean_compile == dd::LeanCompile::async);
  HostProblem p = async_shape();
  dsa_support::fill_random(p, 901);
  auto ref = dsa_support::upload(p);
  const auto gen = dsa_support::run(p, ref, KernelFamily::generic);  // named: sync, compiles generic here
  const auto s0 = dsa_indexer::kernel_cache_stats();
  CHECK(s0.background_compiles == 0);
  CHECK(s0.async_fallbacks == 0);

  // 16 threads meet the new lean key at once.
  constexpr int kThreads = 16;
  std::vector<dsa_support::DeviceProblem> dps;
  for (int i = 0; i < kThreads; ++i) dps.push_back(dsa_support::upload(p));
  std::vector<dsa_support::GpuResult> first(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      first[static_cast<size_t>(i)] = dsa_support::run(p, dps[static_cast<size_t>(i)], KernelFamily::automatic);
    });
  for (auto& t : threads) t.join();
  const auto s1 = dsa_indexer::kernel_cache_stats();
  // The first call cannot have found the variant; later ones may, if the compile was that fast.
  CHECK(s1.async_fallbacks - s0.async_fallbacks >= 1);
  CHECK(s1.async_fallbacks - s0.async_fallbacks <= kThreads);
  CHECK(s1.misses <= s0.misses + 1);  // the worker's production at most: none on a calling thread
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i);
    CHECK(bitwise_equal(first[static_cast<size_t>(i)].scores, gen.scores));
  }

  REQUIRE(wait_for([] {
    const auto s = dsa_indexer::kernel_cache_stats();
    return s.background_compiles + s.background_failures >= 1;
  }, std::chrono::seconds(300)));
  const auto s2 = dsa_indexer::kernel_cache_stats();
  CHECK(s2.background_compiles == 1);
  CHECK(s2.background_failures == 0);
  CHECK(s2.queue_rejections == 0);
  CHECK(s2.misses == s0.misses + 1);      // one production, the worker's
  CHECK(s2.compiles == s0.compiles + 1);  // the private cache directory could not serve it

  // After the switch: lean serves the call (no fallback, nothing produced), with the same bits.
  for (int i = 0; i < 3; ++i) {
    const auto after = dsa_support::run(p, dps[static_cast<size_t>(i)], KernelFamily::automatic);
    CHECK(bitwise_equal(after.scores, gen.scores));
  }
  const auto s3 = dsa_indexer::kernel_cache_stats();
  CHECK(s3.async_fallbacks == s2.async_fallbacks);
  CHECK(s3.misses == s2.misses);
  CHECK(s3.hits >= s2.hits + 3);
  CHECK(s3.background_compiles == 1);
  CHECK(bitwise_equal(dsa_support::run(p, dps[3], KernelFamily::lean).scores, gen.scores));

  // Recorded meanwhile: the generic variant the named call produced (which is also what the
  // fallbacks ran) and the lean variant the fallbacks waited for.
  const std::string rec = dd::env().record_manifest;
  REQUIRE_FALSE(rec.empty());
  const auto specs = dd::manifest_specs(dd::parse_manifest(dd::read_manifest_file(rec), rec), dd::DeviceInfo::h200());
  CHECK(specs == std::vector<dd::KernelSpec>{dd::generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd),
                                             dd::lean_spec(2048, 1024, dsa_indexer::DType::bf16, false)});
  CHECK(s3.recorded_keys == 2);
  std::printf("async child: done\n");
}

TEST_CASE("async: results bitwise equal before and after the switch; one background compile under 16 threads", "[async]") {
  dsa_test::TempDir t;
  const auto r = run_child("[async_child]", {{"DSA_INDEXER_LEAN_COMPILE", "async"},
                                             {"DSA_INDEXER_CACHE_DIR", t.path() + "/cache"},
                                             {"DSA_INDEXER_RECORD_MANIFEST", t.path() + "/recorded.txt"}});
  check_child(r, "async child: done");
}

TEST_CASE("async exit child: leaves while the background compile runs", "[.async_exit_child]") {
  REQUIRE(dd::env().lean_compile == dd::LeanCompile::async);
  HostProblem p = async_shape();
  dsa_support::fill_random(p, 902);
  auto dp = dsa_support::upload(p);
  dsa_support::run(p, dp, KernelFamily::generic);  // the fallback's variant, compiled here first
  const auto gen = dsa_support::run(p, dp, KernelFamily::automatic);  // generic; the lean compile starts
  const auto s = dsa_indexer::kernel_cache_stats();
  CHECK(s.async_fallbacks == 1);
  CHECK(s.background_compiles == 0);  // a cold NVRTC compile takes about a second; this took µs
  CHECK(gen.scores.size() == static_cast<size_t>(p.rows() * p.cols()));
  std::printf("async exit child: leaving\n");
  std::fflush(stdout);
  // main returns, exit runs the worker's handler: it waits for the compile and joins.
}

TEST_CASE("async: a process that exits during a background compile exits cleanly", "[async]") {
  dsa_test::TempDir t;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_child("[async_exit_child]", {{"DSA_INDEXER_LEAN_COMPILE", "async"}, {"DSA_INDEXER_CACHE_DIR", t.path()}});
  check_child(r, "async exit child: leaving");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120));
  // The compile it waited for finished and was published: the entry is in the disk cache.
  dd::DiskCache disk(t.path(), "", dd::nvrtc_version());
  int entries = 0;
  for (const auto& e : disk.list()) entries += e.ok ? 1 : 0;
  CHECK(entries == 2);  // generic and lean
}

namespace {

// A run of calls that meets a variant of every family: lean in both scale variants and both W
// dtypes, lean saturated only by B, generic BSHD and THD, generic by name, reference by name.
constexpr uint64_t kRecordedVariants = 8;
void run_recorded_calls() {
  std::vector<std::pair<HostProblem, KernelFamily>> calls;
  calls.emplace_back(async_shape(), KernelFamily::automatic);
  HostProblem unit = async_shape();
  unit.sm_scale = 1.0f;
  calls.emplace_back(unit, KernelFamily::automatic);
  HostProblem f32 = bshd(1, 1056, 528, 64, 2);
  f32.w_f32 = true;
  calls.emplace_back(f32, KernelFamily::automatic);
  calls.emplace_back(bshd(2, 1024, 512, 64, 2), KernelFamily::automatic);  // 128 q-tiles x B 2
  calls.emplace_back(bshd(2, 300, 77, 32, 2), KernelFamily::automatic);
  calls.emplace_back(thd({100, 7, 300}, {50, 4, 150}, 32, 2), KernelFamily::automatic);  // H 32: generic whatever lean serves
  calls.emplace_back(async_shape(), KernelFamily::generic);
  calls.emplace_back(bshd(1, 64, 64, 16, 1), KernelFamily::reference);
  uint64_t seed = 1200;
  for (auto& [p, fam] : calls) {
    dsa_support::fill_random(p, ++seed);
    auto dp = dsa_support::upload(p);
    const auto r = dsa_support::run(p, dp, fam);
    int64_t poison = 0;
    for (float v : r.scores) poison += std::isnan(v);
    INFO(p.describe());
    CHECK(poison == 0);
  }
}

}  // namespace

TEST_CASE("record child: a run of calls records each variant once", "[.record_child]") {
  REQUIRE_FALSE(dd::env().record_manifest.empty());
  run_recorded_calls();
  const auto s = dsa_indexer::kernel_cache_stats();
  CHECK(s.recorded_keys == kRecordedVariants);
  CHECK(s.misses == kRecordedVariants);
  std::printf("record child: done\n");
}

TEST_CASE("replay child: the same calls over the warmed cache compile nothing", "[.replay_child]") {
  REQUIRE(dd::env().record_manifest.empty());
  run_recorded_calls();
  const auto s = dsa_indexer::kernel_cache_stats();
  CHECK(s.compiles == 0);
  CHECK(s.disk_hits == kRecordedVariants);
  CHECK(s.misses == kRecordedVariants);
  std::printf("replay child: done\n");
}

TEST_CASE("record: record a run, warm a fresh cache from the file offline, replay compiles nothing", "[record]") {
  dsa_test::TempDir t;
  const std::string manifest = t.path() + "/recorded.txt";
  check_child(run_child("[record_child]", {{"DSA_INDEXER_CACHE_DIR", t.path() + "/a"}, {"DSA_INDEXER_RECORD_MANIFEST", manifest}}),
              "record child: done");
  const std::string text = dsa_test::slurp(manifest);
  INFO(text);
  CHECK(dd::parse_manifest(text, manifest).size() == kRecordedVariants);
  // The offline warmup, as an image build runs it: no GPU needed, into an empty directory.
  const auto w = dsa_test::run_program({DSA_TEST_TOOL, "warmup", "--manifest", manifest, "--cache-dir", t.path() + "/b"});
  INFO(w.output);
  REQUIRE(w.exited);
  REQUIRE(w.code == 0);
  CHECK(dsa_test::count_of(w.output, fmt::format("{} compiled, 0 already cached, 0 failed", kRecordedVariants)) == 1);
  check_child(run_child("[replay_child]", {{"DSA_INDEXER_CACHE_DIR", t.path() + "/b"}}), "replay child: done");
}
