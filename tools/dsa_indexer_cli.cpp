// dsa-indexer: the command-line tool (`dsa-indexer --help`, `dsa-indexer <command> --help`).
//   warmup --manifest FILE|default [--cache-dir DIR] [--arch sm_90a]   fill the disk cache, no GPU needed
//   cache ls|verify [--cache-dir DIR] [--prebuilt-dir DIR], cache clear [--cache-dir DIR]
//   demo [--cache-dir DIR] [--op scores|topk]                 default problem, checked and timed
//   bench [--json FILE] [--family lean,generic,auto,reference] [--reps N] [--quick] [--match TEXT] [--thd-order balanced|static|both]
//         [--op scores|topk|both] [--topk-k 2048,512]            (top-k rows: tools/cli_topk.cpp)
//         [--topk-lse] [--topk-lse-lanes on|off]                 (top-k rows with the lse output)
//         [--topk-select-short on|off] [--topk-select-medium on|off] [--topk-select-regs on|off] [--topk-regs-narrow on|off] [--topk-narrow-long on|off] [--topk-regs-mid on|off] [--topk-regs-ctas N]  (short rows' selection kernels)
//         [--in bf16|e4m3]                                       (FP8 rows: tools/cli_fp8.cpp; with --op topk the top-k rows)
//   jitcost [--cache-dir DIR] [--json FILE], version, --version
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "default_manifest.hpp"
#include "cuda/driver.hpp"
#include "core/env.hpp"
#include "ops/forward.hpp"
#include "ops/scores_args.hpp"
#include "dispatch/planner.hpp"
#include "ops/validate.hpp"
#include "gemm_ceiling.hpp"
#include "bench_families.hpp"
#include "cli_fp8.hpp"
#include "cli_topk.hpp"
#include "gpu_runner.hpp"
#include "host_problem.hpp"
#include "stats.hpp"
#include "event_timing.hpp"
#include "jit/runtime.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "dispatch/family.hpp"
#include "ops/warmup.hpp"

namespace dd = dsa_indexer::detail;
using namespace dsa_support;

namespace {

struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> opt;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = opt.find(k);
    return it == opt.end() ? def : it->second;
  }
  bool has(const std::string& k) const { return opt.count(k) != 0; }
};

// The exit codes (README, "Tools"): 0 success; 1 the action ran and failed (bad cache entries,
// failed compiles, an error it reported); 2 the command line was not understood (nothing ran);
// 3 the action needs a GPU and none is usable.
constexpr int kExitFailed = 1, kExitUsage = 2, kExitNoGpu = 3;

int usage() {
  fmt::print(stderr, "usage: dsa-indexer <command> [options]; dsa-indexer --help lists the commands, "
                     "dsa-indexer <command> --help the options of one\n");
  return kExitUsage;
}

dd::EnvConfig config_with_dir(const Args& a) {
  dd::EnvConfig c = dd::env();
  if (a.has("cache-dir")) c.cache_dir = a.get("cache-dir");
  // --prebuilt-dir alone examines that read-only directory only.
  if (a.has("prebuilt-dir")) {
    c.prebuilt_dir = a.get("prebuilt-dir");
    if (!a.has("cache-dir")) c.cache_dir.clear();
  }
  c.disk_cache = true;
  return c;
}


int run_warmup(const std::string& manifest_text, const std::string& manifest_name, const Args& a) {
  dd::EnvConfig cfg = config_with_dir(a);
  if (cfg.cache_dir.empty()) {
    fmt::print(stderr, "warmup: no cache directory: pass --cache-dir or set DSA_INDEXER_CACHE_DIR\n");
    return 2;
  }
  dd::Runtime rt(cfg);
  auto problems = dd::parse_manifest(manifest_text, manifest_name);
  dd::DeviceInfo profile = dd::DeviceInfo::h200();
  dd::set_lean_consumers(std::stoi(a.get("lean-consumers", "2")));
  dd::set_lean_free(a.has("lean-free"));
  std::vector<dd::KernelSpec> specs = dd::manifest_specs(problems, profile);
  const std::string arch = a.get("arch", "sm_90a");
  if (arch != "sm_90a") {
    fmt::print(stderr, "warmup: --arch: expected sm_90a (the only target the kernels are written for), got {}\n", arch);
    return 2;
  }
  // Before any compile: a directory that cannot store entries would make every one of them a
  // failure after its compile.
  if (const std::string why = rt.disk().prepare_for_stores(); !why.empty()) {
    fmt::print(stderr, "warmup: cannot store kernels in {}: {}\n", cfg.cache_dir, why);
    return 1;
  }
  fmt::print("warmup: {} problems in {} -> {} kernel variants, cache {}\n", problems.size(), manifest_name, specs.size(),
             cfg.cache_dir);
  auto s = dd::warmup(rt, specs, [](int i, int n, const dd::KernelSpec& spec, const std::string& status) {
    fmt::print("[{}/{}] {} {}: {}\n", i, n, spec.family->name(), spec.shape_key(), status);
    std::fflush(stdout);
  });
  fmt::print("warmup: {} compiled, {} already cached, {} failed in {:.2f} s\n", s.compiled, s.cached, s.failed, s.seconds);
  for (const auto& f : s.failures) fmt::print(stderr, "  failed: {}\n", f);
  return s.failed ? 1 : 0;
}

int run_cache(const Args& a) {
  if (a.pos.empty()) return usage();
  dd::EnvConfig cfg = config_with_dir(a);
  dd::DiskCache disk(cfg.cache_dir, cfg.prebuilt_dir, dd::nvrtc_version());
  const std::string& sub = a.pos[0];
  if (sub == "clear") {
    const dd::ClearReport r = disk.clear();
    for (const auto& p : r.problems) fmt::print(stderr, "cache clear: {}\n", p);
    fmt::print("cache clear: removed {} files from {}{}\n", r.removed, cfg.cache_dir,
               r.problems.empty() ? "" : fmt::format(", {} could not be removed or read", r.problems.size()));
    return r.problems.empty() ? 0 : 1;
  }
  if (sub != "ls" && sub != "verify") return usage();
  std::string problem = cfg.cache_dir.empty() && !cfg.prebuilt_dir.empty() ? std::string() : disk.directory_problem();
  if (!problem.empty()) fmt::print("cache directory problem: {}\n", problem);
  if (const std::string p = disk.prebuilt_problem(); !p.empty()) {
    fmt::print("prebuilt directory problem: {}\n", p);
    problem += p;
  }
  auto entries = disk.list();
  int bad = 0;
  uint64_t bytes = 0;
  for (const auto& e : entries) {
    if (e.ok) {
      bytes += e.cubin_bytes;
      if (sub == "ls") fmt::print("{}  {:>8} B  {}\n", e.key.substr(0, 16), e.cubin_bytes, e.source_name);
    } else {
      ++bad;
      fmt::print("BAD {}: {}\n", e.path, e.problem);
    }
  }
  fmt::print("cache {}: {} entries ok, {} bad, {} cubin bytes in {}{}\n", sub, entries.size() - bad, bad, bytes,
             cfg.cache_dir, cfg.prebuilt_dir.empty() ? "" : " (+ prebuilt " + cfg.prebuilt_dir + ")");
  return (sub == "verify" && (bad || !problem.empty())) ? 1 : 0;
}

// Median device time of the forward over `sets` rotating input sets (cold L2).
Timed time_forward(std::vector<DeviceProblem>& sets, dsa_indexer::KernelFamily fam, int warm, int reps, CUstream stream) {
  dd::ScopedContext ctx(0);
  for (auto& s : sets) s.opt.family = fam;
  auto call = [&](int i) {
    auto& s = sets[static_cast<size_t>(i) % sets.size()];
    dsa_indexer::indexer_forward(s.tq, s.tk, s.tw, s.tout, s.opt, stream);
  };
  for (int i = 0; i < warm; ++i) call(i);
  return event_times(reps, stream, 1, call);
}

// Median device time per call with the same inputs every time (L2 warm), replayed from a CUDA
// graph of `per_graph` captured calls so that host cost is excluded.
Timed time_forward_graph(DeviceProblem& s, dsa_indexer::KernelFamily fam, int reps, int per_graph = 10) {
  s.opt.family = fam;
  return graph_times(reps, per_graph, [&](CUstream st) { dsa_indexer::indexer_forward(s.tq, s.tk, s.tw, s.tout, s.opt, st); });
}

HostProblem bshd(int64_t sq, int64_t sk, int64_t ratio, int heads, bool wf32 = false) {
  HostProblem p;
  p.layout = Layout::bshd;
  p.batch = 1;
  p.s_q = sq;
  p.s_k = sk;
  p.ratio = ratio;
  p.heads = heads;
  p.w_f32 = wf32;
  p.sm_scale = 0.125f;
  return p;
}

// The families a bench or demo compares: "lean,generic" by default, "auto" for the dispatcher.
using dsa_cli::bench_families;

int run_demo(const Args& a) {
  std::string why;
  if (!gpu_available(&why)) {
    fmt::print("demo: no usable GPU here ({}).\n"
               "demo: running the offline warmup of the default manifest instead.\n", why);
    return run_warmup(kDefaultManifest, "default manifest", a);
  }
  if (a.get("op", "scores") == "topk") return dsa_cli::run_topk_demo();
  const auto& dev = dd::device_info(0);
  HostProblem p = bshd(8192, 4096, 2, 64);
  fmt::print("demo: {} ({} SMs); problem {}\n", dev.name, dev.sm_count, p.describe());
  fill_random(p, 20261202);
  DeviceProblem dp = upload(p);
  auto t0 = std::chrono::steady_clock::now();
  GpuResult r = run(p, dp, dsa_indexer::KernelFamily::automatic);
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int64_t> rows;
  for (int64_t r0 : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(63), int64_t(64), int64_t(1000), int64_t(4095),
                     int64_t(4096), int64_t(6001), int64_t(8190), int64_t(8191)})
    rows.push_back(r0);
  auto ref = oracle_rows(p, rows);
  std::vector<float> got;
  for (int64_t r0 : rows) got.insert(got.end(), r.scores.begin() + r0 * p.cols(), r.scores.begin() + (r0 + 1) * p.cols());
  Comparison c = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), p.cols());
  int64_t poison = 0;
  for (float v : r.scores) poison += std::isnan(v);
  const bool ok = c.ok(2e-7) && poison == 0;
  fmt::print("demo: first call (compile or cache load + run) {:.3f} s\n", first_s);
  fmt::print("demo: {} sampled rows vs CPU fp64: rel-L2 {:.3e}, -inf pattern mismatches {}, unwritten cells {} -> {}\n",
             rows.size(), c.rel_l2, c.pattern_mismatch, poison, ok ? "VERIFIED" : "FAILED");
  if (!c.first_problem.empty()) fmt::print("demo: first problem: {}\n", c.first_problem);
  std::vector<DeviceProblem> sets;
  sets.push_back(std::move(dp));
  for (int i = 1; i < 3; ++i) {
    HostProblem pi = p;
    fill_random(pi, 1000 + i);
    sets.push_back(upload(pi));
  }
  // Which family the dispatcher chose is invisible in the results: the generic family must give
  // the same bits.
  GpuResult g = run(p, sets[0], dsa_indexer::KernelFamily::generic);
  const bool same_bits = g.scores.size() == r.scores.size() &&
                         std::memcmp(g.scores.data(), r.scores.data(), r.scores.size() * sizeof(float)) == 0;
  fmt::print("demo: automatic vs generic family: {}\n", same_bits ? "bitwise identical" : "DIFFERENT BITS");
  const double flops = 2.0 * 64 * 128 * static_cast<double>(visible_pairs(p));
  for (const auto& f : bench_families("auto,lean,generic")) {
    Timed t = time_forward(sets, f.family, 5, 30, nullptr);
    fmt::print("demo: {:<8} median {:.1f} us over 30 runs (3 rotating input sets): {:.1f} TFLOP/s useful ({:.3e} visible pairs)\n",
               f.name, t.median_us, flops / (t.median_us * 1e-6) / 1e12, static_cast<double>(visible_pairs(p)));
  }
  auto st = dsa_indexer::kernel_cache_stats();
  fmt::print("demo: kernel cache: {} hits, {} misses, {} compiles, {} disk hits\n", st.hits, st.misses, st.compiles, st.disk_hits);
  return ok && same_bits ? 0 : 1;
}

// JIT costs (docs/DESIGN.md, "Speed targets"): cold NVRTC compile per variant, disk-cache hit,
// module load, host overhead of a cache-hit call and of each of its stages, device memory
// allocated per call. `--json FILE` writes the figures for bench/peers.py.
namespace jit {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Host time per call of `body`, in µs: `batches` batches of `per_batch` back-to-back calls,
// median over batches. `between` runs untimed after each batch (a device sync, so that a batch
// never waits on a full launch queue: 200 launches stay far below its depth).
template <class Body, class Between>
std::pair<double, double> per_call_us(int batches, int per_batch, Body&& body, Between&& between) {
  std::vector<double> v;
  for (int b = 0; b < batches; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_batch; ++i) body();
    v.push_back(seconds(Clock::now() - t0) / per_batch * 1e6);
    between();
  }
  return {median(v), *std::min_element(v.begin(), v.end())};
}

struct Stage {
  std::string name, what;
  double median_us = 0, min_us = 0;
};

// A private directory from mkdtemp (0700, a fresh name nobody could have pre-created or
// linked), removed with everything in it when the scope ends, however it ends.
class PrivateTempDir {
 public:
  explicit PrivateTempDir(const std::string& base) {
    std::string tmpl = base + "/dsa_jitcost.XXXXXX";
    if (!::mkdtemp(tmpl.data()))
      throw dsa_indexer::CacheError(fmt::format("cannot create a private directory under {}: {}", base, std::strerror(errno)));
    path_ = tmpl;
  }
  ~PrivateTempDir() {
    ::nftw(path_.c_str(), [](const char* p, const struct stat*, int type, FTW*) {
      return type == FTW_DP ? ::rmdir(p) : ::unlink(p);
    }, 16, FTW_DEPTH | FTW_PHYS);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace jit

int run_jitcost(const Args& a) {
  using namespace jit;
  dd::EnvConfig cfg = dd::env();
  const PrivateTempDir scratch(a.has("cache-dir") ? a.get("cache-dir") : cfg.temp_dir);
  const std::string tmp = scratch.path();
  cfg.cache_dir = tmp;
  cfg.disk_cache = true;
  // The per-call stage below runs on the process-wide runtime (indexer_forward, Runtime::get()):
  // it gets the private directory too, so that no stage reads or writes the user's cache.
  if (!dd::Runtime::configure_process(cfg))
    throw std::logic_error("jitcost: the process-wide runtime was made before its cache directory was set");
  dd::Runtime rt(cfg);
  std::vector<dd::KernelSpec> specs;
  for (int h : {16, 32, 64})
    for (bool lse : {false, true}) specs.push_back(dd::generic_spec(h, dsa_indexer::DType::bf16, lse, Layout::bshd));
  specs.push_back(dd::reference_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd));
  // Lean compiles per shape: the headline key in both scale variants, and the largest default one.
  specs.push_back(dd::lean_spec(8192, 4096, dsa_indexer::DType::bf16, false));
  specs.push_back(dd::lean_spec(8192, 4096, dsa_indexer::DType::bf16, true));
  specs.push_back(dd::lean_spec(16384, 8192, dsa_indexer::DType::f32, false));
  std::string json = "{\n  \"nvrtc\": \"" + dd::nvrtc_version() + "\",\n  \"compiles\": [\n";
  fmt::print("jitcost: cold NVRTC compile (in process, empty cache {}):\n", tmp);
  std::vector<double> disk_ms;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    bool from_disk = false;
    auto t0 = Clock::now();
    dd::CacheEntry e = rt.entry(s, &from_disk);
    const double c = seconds(Clock::now() - t0);
    std::vector<double> d;
    for (int r = 0; r < 5; ++r) {
      auto t1 = Clock::now();
      rt.entry(s, &from_disk);
      d.push_back(seconds(Clock::now() - t1) * 1e3);
    }
    disk_ms.push_back(median(d));
    fmt::print("  {:<24} {:<28} compile {:.3f} s, disk-cache hit (read + verify) {:.2f} ms\n", s.family->name(),
               s.shape_key(), c, median(d));
    json += fmt::format("{}    {{\"family\": \"{}\", \"variant\": \"{}\", \"order\": {}, \"compile_s\": {:.4f}, "
                        "\"disk_hit_ms\": {:.4f}, \"cubin_bytes\": {}}}",
                        i ? ",\n" : "", s.family->name(), s.shape_key(), i, c, median(d), e.cubin.size());
  }
  json += "\n  ]";
  auto finish = [&](const std::string& tail) {
    json += tail + "\n}\n";
    if (a.has("json")) std::ofstream(a.get("json")) << json;
  };
  std::string why;
  if (!gpu_available(&why)) {
    fmt::print("jitcost: no GPU ({}): module load and per-call overhead not measured\n", why);
    finish(fmt::format(",\n  \"gpu\": null,\n  \"no_gpu_reason\": \"{}\"", why));
    return 0;
  }
  dd::ScopedContext ctx(0);
  dd::Driver& d = dd::Driver::get();
  const dd::DeviceInfo& dev = dd::device_info(0);
  double load_ms = 0;
  size_t load_bytes = 0;
  {
    bool fd = false;
    dd::CacheEntry e = rt.entry(specs[4], &fd);
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
      CUmodule m = nullptr;
      auto t0 = Clock::now();
      d.check(d.cuModuleLoadData(&m, e.cubin.data()), "cuModuleLoadData");
      ms.push_back(seconds(Clock::now() - t0) * 1e3);
      d.cuModuleUnload(m);
    }
    load_ms = median(ms);
    load_bytes = e.cubin.size();
    fmt::print("jitcost: cuModuleLoadData of {} ({} B): median {:.2f} ms; disk hit + load ~{:.2f} ms\n", specs[4].shape_key(),
               load_bytes, load_ms, load_ms + disk_ms[4]);
  }

  // The per-call host overhead on the process-wide runtime, with the kernel already loaded.
  HostProblem p = bshd(64, 64, 2, 64);
  fill_random(p, 5);
  DeviceProblem dp = upload(p);
  dp.opt.family = dsa_indexer::KernelFamily::generic;
  auto call = [&] { dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, nullptr); };
  auto sync = [&] { d.check(d.cuCtxSynchronize(), "cuCtxSynchronize"); };
  for (int i = 0; i < 20; ++i) call();
  sync();
  size_t free0 = 0, free1 = 0, total = 0;
  d.check(d.cuMemGetInfo(&free0, &total), "cuMemGetInfo");
  const int batches = 50, per_batch = 200;
  auto [full_med, full_min] = per_call_us(batches, per_batch, call, sync);
  d.check(d.cuMemGetInfo(&free1, &total), "cuMemGetInfo");
  const long long allocated = static_cast<long long>(free0) - static_cast<long long>(free1);
  fmt::print("jitcost: cache-hit call host overhead (validate + pointer checks + lookup + 2 TMA descriptors + launch), "
             "{} batches of {} back-to-back calls, device sync between batches: median {:.2f} us/call (min {:.2f})\n",
             batches, per_batch, full_med, full_min);
  fmt::print("jitcost: device memory free before/after {} calls: {} / {} bytes ({} allocated by the library)\n",
             batches * per_batch, free0, free1, allocated);

  // The same call, stage by stage (each timed alone in a loop of its own).
  std::vector<Stage> st;
  auto no_reader = [](const void*, int32_t*, std::size_t) { throw std::logic_error("jitcost: unexpected cu_seqlens read"); };
  auto nothing = [] {};
  dd::Problem prob = dd::validate(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, no_reader);
  const dd::Family& fam = dd::choose_family(prob, dev, dp.opt.family, false);
  const dd::Plan plan = dd::make_plan(prob, dev, fam);
  auto kernel = dd::Runtime::get().kernel(plan.spec, 0);
  auto add = [&](const char* name, const char* what, std::pair<double, double> t) {
    st.push_back({name, what, t.first, t.second});
  };
  add("validate", "argument validation into a Problem",
      per_call_us(batches, per_batch, [&] { prob = dd::validate(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, no_reader); }, nothing));
  add("context", "push + pop of the device's primary context",
      per_call_us(batches, per_batch, [&] { dd::ScopedContext c(0); }, nothing));
  add("pointers", "cuPointerGetAttributes per non-null pointer (4 here)",
      per_call_us(batches, per_batch, [&] { dd::check_problem_pointers(prob); }, nothing));
  add("plan", "family choice + plan",
      per_call_us(batches, per_batch, [&] { (void)dd::make_plan(prob, dd::device_info(0), dd::choose_family(prob, dd::device_info(0), dp.opt.family, false)); }, nothing));
  add("lookup", "in-memory kernel-cache hit (key + LRU)",
      per_call_us(batches, per_batch, [&] { kernel = dd::Runtime::get().kernel(plan.spec, 0); }, nothing));
  // Both maps, encoded by hand (as launch_forward does without its memo); the `driver` stage
  // below launches with them.
  dd::TmaDescBytes qm, km;
  const dd::TmaGeometry qg = dd::q_tma_geometry(prob, dd::GenericGeometry::tokens_per_consumer(prob.heads)),
                        kg = dd::k_tma_geometry(prob);
  add("tma", "2 cuTensorMapEncodeTiled",
      per_call_us(batches, per_batch, [&] {
        dd::encode_tma(&qm, prob.q, qg.rank, qg.dims, qg.strides_bytes, qg.box, qg.elem_bytes);
        dd::encode_tma(&km, prob.k, kg.rank, kg.dims, kg.strides_bytes, kg.box, kg.elem_bytes);
      }, nothing));
  add("launch", "arguments + tensor maps (memoized) + cuLaunchKernelEx",
      per_call_us(batches, per_batch, [&] { dd::launch_forward(prob, plan, *kernel, nullptr); }, sync));
  {
    // The driver's own share: cuLaunchKernelEx alone, same function, grid and parameters.
    dsa::DsaArgs args = dd::make_args(prob);
    dsa::TileGrid grid{plan.num_tiles, plan.tiles_per_batch};
    dsa::DsaScales scales = dd::make_scales(prob);
    void* params[] = {&qm, &km, &args, &grid, &scales};
    add("driver", "cuLaunchKernelEx alone (the driver's share of launch)",
        per_call_us(batches, per_batch, [&] {
          dd::launch_one(kernel->functions[0], plan.launches[0], nullptr, params, "cuLaunchKernelEx");
        }, sync));
  }
  sync();
  {
    // The whole call again on a created (non-blocking) stream: adds the stream check.
    CUstream s = nullptr;
    d.check(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    auto sync_s = [&] { d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize"); };
    auto t = per_call_us(batches, per_batch, [&] { dsa_indexer::indexer_forward(dp.tq, dp.tk, dp.tw, dp.tout, dp.opt, s); }, sync_s);
    add("stream", "the whole call on a created non-blocking stream (adds cuStreamGetCtx)", t);
    d.check(d.cuStreamDestroy(s), "cuStreamDestroy");
  }
  double sum = 0;
  for (const auto& x : st) {
    if (x.name != "tma" && x.name != "driver" && x.name != "stream") sum += x.median_us;
    fmt::print("  stage {:<9} {:>6.3f} us (min {:.3f})  {}\n", x.name, x.median_us, x.min_us, x.what);
  }
  fmt::print("  stages validate..launch: {:.2f} us vs {:.2f} us for the whole call\n", sum, full_med);

  std::string tail = fmt::format(",\n  \"gpu\": \"{}\",\n  \"module_load\": {{\"variant\": \"{}\", \"cubin_bytes\": {}, \"median_ms\": {:.4f}, "
                                 "\"disk_hit_plus_load_ms\": {:.4f}}},\n",
                                 dev.name, specs[4].shape_key(), load_bytes, load_ms, load_ms + disk_ms[4]);
  tail += fmt::format("  \"host_overhead\": {{\"case\": \"bshd S_q 64 S_k 64 H 64 ratio 2, generic, null stream\", \"batches\": {}, "
                      "\"calls_per_batch\": {}, \"median_us\": {:.4f}, \"min_us\": {:.4f}, \"allocated_bytes\": {}, "
                      "\"free_before\": {}, \"free_after\": {}}},\n  \"stages\": [\n",
                      batches, per_batch, full_med, full_min, allocated, free0, free1);
  for (size_t i = 0; i < st.size(); ++i)
    tail += fmt::format("{}    {{\"name\": \"{}\", \"what\": \"{}\", \"median_us\": {:.4f}, \"min_us\": {:.4f}}}", i ? ",\n" : "",
                        st[i].name, st[i].what, st[i].median_us, st[i].min_us);
  tail += "\n  ]";
  finish(tail);
  return 0;
}

struct BenchCase {
  std::string name;
  HostProblem p;
};

// THD, local columns: segments of sq[i] query rows and sq[i] / ratio key rows.
HostProblem thd_packing(const std::vector<int64_t>& sq, int64_t ratio) {
  HostProblem p;
  p.layout = Layout::thd_local;
  p.heads = 64;
  p.ratio = ratio;
  p.sm_scale = 0.125f;
  p.cu_q = {0};
  p.cu_k = {0};
  for (int64_t s : sq) {
    p.cu_q.push_back(p.cu_q.back() + static_cast<int32_t>(s));
    p.cu_k.push_back(p.cu_k.back() + static_cast<int32_t>(s / ratio));
  }
  return p;
}

// bench --in e4m3: the FP8 rows alone (tools/cli_fp8.cpp), their own JSON members.
int run_fp8_bench(const Args& a) {
  dsa_cli::Fp8BenchOptions fo;
  fo.reps = std::stoi(a.get("reps", "20"));
  fo.families = a.get("family", fo.families);
  fo.quick = a.has("quick");
  fo.match = a.get("match");
  const auto& dev = dd::device_info(0);
  fmt::print("bench: {} ({} SMs), {} reps, median device-event time: cold = rotating input sets > 200 MB, "
             "warm = same inputs, CUDA-graph replay\n", dev.name, dev.sm_count, fo.reps);
  bool ok = true;
  const std::string members = dsa_cli::run_fp8_bench(fo, &ok);
  if (a.has("json"))
    std::ofstream(a.get("json")) << "{\n  \"device\": \"" + dev.name + "\",\n  \"input\": \"e4m3\",\n" + members + "\n}\n";
  return ok ? 0 : kExitFailed;
}

int run_bench(const Args& a) {
  const bool fp8 = a.get("in", "bf16") == "e4m3";
  const std::string op = a.get("op", "scores");
  if (fp8 && op == "both") {
    fmt::print(stderr, "bench: --in e4m3 runs the FP8 scores rows (--op scores) or the FP8 top-k rows (--op topk), not both\n");
    return kExitUsage;
  }
  std::string why;
  if (!gpu_available(&why)) {
    fmt::print(stderr, "bench: needs a Hopper GPU ({})\n", why);
    return kExitNoGpu;
  }
  if (fp8 && op == "scores") return run_fp8_bench(a);
  const int reps = std::stoi(a.get("reps", "20"));
  const auto fams = bench_families(a.get("family", "lean,generic"));
  const bool quick = a.has("quick");
  const std::string thd_orders = a.get("thd-order", "balanced");
  const std::string mode = a.get("mode", "both");  // cold, warm or both (a power probe times one alone)
  const bool want_scores = op != "topk", want_topk = op != "scores";
  std::vector<BenchCase> cases;
  for (int64_t sq : {2048, 4096, 8192, 16384}) cases.push_back({fmt::format("bshd H64 r2 S_q {}", sq), bshd(sq, sq / 2, 2, 64)});
  for (int64_t sq : {4096, 8192, 16384}) cases.push_back({fmt::format("bshd H64 r4 S_q {}", sq), bshd(sq, sq / 4, 4, 64)});
  cases.push_back({"bshd H64 r2 S_q 8192 fp32-W", bshd(8192, 4096, 2, 64, true)});
  cases.push_back({"bshd H64 r2 S_q 8192 B4", bshd(8192, 4096, 2, 64)});
  cases.back().p.batch = 4;
  cases.push_back({"bshd H64 r2 S_q 8192 scale1", bshd(8192, 4096, 2, 64)});
  cases.back().p.sm_scale = 1.0f;
  cases.push_back({"bshd H32 r2 S_q 8192", bshd(8192, 4096, 2, 32)});
  cases.push_back({"bshd H16 r2 S_q 8192", bshd(8192, 4096, 2, 16)});
  // Chunked prefill (issue 23): q-tiles x B below the SMs, the rows ending at S_k (ratio 1, offset
  // S_k - S_q); lean by name serves them with its split variant.
  for (int64_t sk : {16384, 65536})
    for (int64_t sq : {512, 1024}) {
      cases.push_back({fmt::format("bshd H64 prefill S_q {} S_k {}", sq, sk), bshd(sq, sk, 1, 64)});
      cases.back().p.offsets = {static_cast<int32_t>(sk - sq)};
    }
  // Packed training batches (THD, local columns, segments of sq / ratio keys): 3 ragged
  // segments and a realistic 8-segment packing, and one segment (the work of a BSHD row).
  cases.push_back({"thd H64 r2 3 ragged T_q 8192", thd_packing({2731, 4099, 1362}, 2)});
  cases.push_back({"thd H64 r2 8 segs T_q 8192", thd_packing({1500, 700, 2100, 300, 1200, 900, 1100, 392}, 2)});
  cases.push_back({"thd H64 r4 3 ragged T_q 8192", thd_packing({2731, 4099, 1362}, 4)});
  cases.push_back({"thd H64 r4 8 segs T_q 8192", thd_packing({1500, 700, 2100, 300, 1200, 900, 1100, 392}, 4)});
  cases.push_back({"thd H64 r2 3 ragged T_q 16384", thd_packing({5462, 8198, 2724}, 2)});
  cases.push_back({"thd H64 r2 8 segs T_q 16384", thd_packing({3000, 1400, 4200, 600, 2400, 1800, 2200, 784}, 2)});
  cases.push_back({"thd H64 r4 3 ragged T_q 16384", thd_packing({5462, 8198, 2724}, 4)});
  cases.push_back({"thd H64 r4 8 segs T_q 16384", thd_packing({3000, 1400, 4200, 600, 2400, 1800, 2200, 784}, 4)});
  cases.push_back({"thd H64 r2 1 seg T_q 8192", thd_packing({8192}, 2)});
  // THD at H 32 and 16 (GLM-style indexers; lean's q-tiles of 16 and 32 tokens)
  cases.push_back({"thd H32 r2 3 ragged T_q 8192", thd_packing({2731, 4099, 1362}, 2)});
  cases.back().p.heads = 32;
  cases.push_back({"thd H32 r4 8 segs T_q 8192", thd_packing({1500, 700, 2100, 300, 1200, 900, 1100, 392}, 4)});
  cases.back().p.heads = 32;
  cases.push_back({"thd H16 r2 3 ragged T_q 8192", thd_packing({2731, 4099, 1362}, 2)});
  cases.back().p.heads = 16;
  cases.push_back({"thd H16 r4 8 segs T_q 8192", thd_packing({1500, 700, 2100, 300, 1200, 900, 1100, 392}, 4)});
  cases.back().p.heads = 16;
  if (quick) cases.resize(4);
  if (a.has("lse"))  // every row with the lse output too (training calls; lean's split variant adds its combine)
    for (BenchCase& c : cases) {
      c.p.lse = true;
      c.name += " lse";
    }
  if (a.has("match")) {  // only the shapes whose name contains the text
    const std::string m = a.get("match");
    cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const BenchCase& c) { return c.name.find(m) == std::string::npos; }),
                cases.end());
  }
  if (!want_scores) cases.clear();  // --op topk: the top-k rows only
  const auto& dev = dd::device_info(0);
  GemmCeiling ceil = measure_gemm_ceiling(8192, 10);
  fmt::print("bench: {} ({} SMs), {} reps, median device-event time: cold = rotating input sets > 200 MB, "
             "warm = same inputs, CUDA-graph replay\n", dev.name, dev.sm_count, reps);
  if (ceil.ok)
    fmt::print("bench: bf16 GEMM ceiling (cuBLAS {}, {}^3): {:.1f} us = {:.1f} TFLOP/s\n", ceil.library, ceil.n, ceil.median_us, ceil.tflops);
  else
    fmt::print("bench: bf16 GEMM ceiling unavailable: {}\n", ceil.why);
  if (want_scores)
    fmt::print("{:<30} {:<8} {:>10} {:>8} {:>7} {:>10} {:>8} {:>7}\n", "shape", "family", "cold us", "TFLOP/s", "% ceil",
               "warm us", "TFLOP/s", "% ceil");
  std::string json = "{\n  \"device\": \"" + dev.name + "\",\n";
  json += fmt::format("  \"gemm_ceiling_tflops\": {:.2f},\n  \"cases\": [\n", ceil.ok ? ceil.tflops : 0.0);
  bool first = true;
  for (auto& c : cases) {
    fill_random(c.p, 42);
    const double set_bytes = (c.p.q.size() + c.p.k.size()) * 2.0 + c.p.rows() * static_cast<double>(c.p.cols()) * 4;
    const int nsets = std::max(2, static_cast<int>(std::ceil(200e6 / set_bytes)));
    std::vector<DeviceProblem> sets;
    for (int i = 0; i < std::min(nsets, 4); ++i) {
      HostProblem pi = c.p;
      if (i) fill_random(pi, 42 + i);
      sets.push_back(upload(pi));
    }
    const double pairs = static_cast<double>(visible_pairs(c.p));
    // lean THD also in the static q-tile order (--thd-order both): what per-call balancing buys
    auto runs = fams;
    if (c.p.thd() && thd_orders == "both")
      for (const auto& f : fams)
        if (f.family == dsa_indexer::KernelFamily::lean) runs.push_back({f.name + "/st", f.family, f.lean_consumers, f.lean_free});
    for (const auto& run : runs) {
      const std::string& fname = run.name;
      const dsa_indexer::KernelFamily fam = run.family;
      run.apply();
      Timed cold, warm;
      const bool static_order = (fam == dsa_indexer::KernelFamily::lean && fname.size() > 3 && fname.substr(fname.size() - 3) == "/st") ||
                                (thd_orders == "static" && fam == dsa_indexer::KernelFamily::lean);
      dd::set_lean_thd_order(static_order ? dd::LeanThdOrder::static_order : dd::LeanThdOrder::balanced);
      try {
        if (mode != "warm") cold = time_forward(sets, fam, 3, reps, nullptr);
        if (mode != "cold") warm = time_forward_graph(sets[0], fam, reps);
      } catch (const dsa_indexer::UnsupportedConfig& e) {
        fmt::print("{:<30} {:<8} {}\n", c.name, fname, "-- (not served: see --family)");
        continue;
      }
      // (0 for a column --mode left untimed, so the table and the JSON stay finite)
      auto tf = [&](const Timed& t) { return t.median_us > 0 ? 2.0 * c.p.heads * 128 * pairs / (t.median_us * 1e-6) / 1e12 : 0.0; };
      auto pct = [&](double x) { return ceil.ok ? 100.0 * x / ceil.tflops : 0.0; };
      fmt::print("{:<30} {:<8} {:>10.1f} {:>8.1f} {:>6.1f}% {:>10.1f} {:>8.1f} {:>6.1f}%\n", c.name, fname, cold.median_us,
                 tf(cold), pct(tf(cold)), warm.median_us, tf(warm), pct(tf(warm)));
      std::fflush(stdout);
      json += fmt::format("{}    {{\"name\": \"{}\", \"family\": \"{}\", \"cold_us\": {:.2f}, \"cold_min_us\": {:.2f}, "
                          "\"warm_us\": {:.2f}, \"cold_tflops\": {:.2f}, \"warm_tflops\": {:.2f}, \"visible_pairs\": {:.0f}}}",
                          first ? "" : ",\n", c.name, fname, cold.median_us, cold.min_us, warm.median_us, tf(cold), tf(warm), pairs);
      first = false;
    }
  }
  dd::set_lean_thd_order(dd::LeanThdOrder::balanced);
  dd::set_lean_consumers(2);
  dd::set_lean_free(false);
  json += "\n  ]";
  if (want_topk) {
    dsa_cli::TopkBenchOptions to;
    to.reps = reps;
    to.ks = dsa_cli::parse_topk_ks(a.get("topk-k", "2048,512"));
    to.quick = quick;
    to.match = a.get("match");
    to.budget_mib = std::stoull(a.get("topk-budget", "0"));
    to.one_wave = a.has("topk-one-wave");
    // on|off options: unset leaves the library's default
    auto on_off = [&](const char* name) { return a.has(name) ? std::optional<bool>(a.get(name) == "on") : std::nullopt; };
    to.lean_windows = on_off("topk-lean-windows");
    to.fused_part = on_off("topk-fused-part");
    to.lse = a.has("topk-lse");
    to.lse_lanes = on_off("topk-lse-lanes");
    to.select_short = on_off("topk-select-short");
    to.select_medium = on_off("topk-select-medium");
    to.regs_mid = on_off("topk-regs-mid");
    to.narrow_long = on_off("topk-narrow-long");
    to.regs_narrow = on_off("topk-regs-narrow");
    if (a.has("topk-regs-ctas")) to.regs_ctas = std::stoi(a.get("topk-regs-ctas"));
    to.select_regs = on_off("topk-select-regs");
    to.fp8 = fp8;
    json += ",\n  \"topk_cases\": [\n" + dsa_cli::run_topk_bench(to) + "\n  ]";
  }
  json += "\n}\n";
  if (a.has("json")) std::ofstream(a.get("json")) << json;
  return 0;
}


// The command line, on CLI11: per-command options and help, values required where an option
// takes one, and anything not understood is an error before any action runs (the hand-written
// parser it replaces ran `cache clear` on the default cache for `cache clear --help` or a
// misspelt option). Parsed options land in Args, which the commands read as before.
struct Cli {
  CLI::App app{"dsa-indexer: JIT kernels of the DeepSeek Sparse Attention lightning indexer (sm_90a)", "dsa-indexer"};
  Args args;
  std::string command;
  std::vector<std::pair<std::string, std::string*>> values;  // option name -> where CLI11 stores it
  std::map<std::string, std::string> storage;

  // A string option "--name VALUE" of `sub`, copied into args.opt when given. An empty VALUE is
  // an error, never "the default": `cache clear --cache-dir "$UNSET"` must not clear the
  // user's real cache (issue 24, class 4).
  CLI::Option* value(CLI::App* sub, const std::string& name, const std::string& help) {
    std::string* slot = &storage[sub->get_name() + "/" + name];
    values.emplace_back(name, slot);
    return sub->add_option("--" + name, *slot, help)
        ->type_name("VALUE")
        ->expected(1)
        ->check([](const std::string& v) {
          return v.empty() ? std::string("an empty value is not accepted (an unset shell variable?); leave the "
                                         "option out for its default")
                           : std::string();
        });
  }
  CLI::App* command_of(CLI::App* parent, const std::string& name, const std::string& help) {
    CLI::App* c = parent->add_subcommand(name, help);
    c->callback([this, c] { command = c->get_name(); });
    return c;
  }
};

void build_cli(Cli& cli) {
  CLI::App& app = cli.app;
  app.set_version_flag("--version", fmt::format("dsa-indexer {} (NVRTC {})", dsa_indexer::version(), dd::nvrtc_version()),
                       "print the version and exit");
  app.require_subcommand(1, 1);
  app.footer("Exit codes: 0 success, 1 the command failed, 2 the command line was not understood (nothing ran), "
             "3 the command needs a GPU and none is usable.");
  auto family_list = [](const std::string& v) -> std::string {
    try {
      bench_families(v);
    } catch (const std::exception& e) {
      std::string m = e.what();
      if (m.rfind("--family: ", 0) == 0) m.erase(0, 10);  // CLI11 names the option itself
      return m;
    }
    return {};
  };

  CLI::App* warmup = cli.command_of(&app, "warmup", "compile every kernel variant a manifest implies into the disk cache (no GPU needed)");
  cli.value(warmup, "manifest", "a manifest file, or 'default' (cache/manifests/default.txt, built in)")->required();
  cli.value(warmup, "cache-dir", "the writable cache directory (default: DSA_INDEXER_CACHE_DIR, else the XDG cache)");
  cli.value(warmup, "arch", "target architecture")->check(CLI::IsMember({"sm_90a"}));
  cli.value(warmup, "lean-consumers", "lean's consumer warpgroups: 2 (the default) or 4 (the variants bench's lean4 rows run)")
      ->check(CLI::IsMember({"2", "4"}));
  warmup->add_flag_callback("--lean-free", [&cli] { cli.args.opt["lean-free"] = "1"; },
                            "lean's consumers free-running, without the ring of named barriers (the variants bench's lean4f rows run)");

  CLI::App* cache = app.add_subcommand("cache", "list, verify or clear the disk cache");
  cache->require_subcommand(1, 1);
  for (const char* sub : {"ls", "verify", "clear"}) {
    const std::string s = sub;
    CLI::App* c = cli.command_of(cache, s, s == "ls" ? "list the entries (and report bad ones)"
                                           : s == "verify" ? "verify every entry and the directories; exit 1 on any problem"
                                                           : "remove every entry and temp file; exit 1 on anything it could not remove");
    cli.value(c, "cache-dir", "the writable cache directory (default: DSA_INDEXER_CACHE_DIR, else the XDG cache)");
    if (s != "clear")
      cli.value(c, "prebuilt-dir", "a read-only cache directory; alone (without --cache-dir) only it is examined");
  }

  CLI::App* demo = cli.command_of(&app, "demo", "on a GPU: the default DeepSeek-V4-like problem, checked against fp64 and timed; "
                                                "without one: the warmup of the default manifest");
  cli.value(demo, "cache-dir", "the cache directory of the warmup without a GPU");
  cli.value(demo, "op", "scores (the default) or topk: the top-k of a DeepSeek-V4-like problem against a reference "
                        "selection of our own scores")->check(CLI::IsMember({"scores", "topk"}));

  CLI::App* bench = cli.command_of(&app, "bench", "a table of shapes: median device time, TFLOP/s, % of a cuBLAS bf16 GEMM "
                                                  "(--in e4m3: FP8 rows, % of a cuBLASLt FP8 GEMM)");
  cli.value(bench, "json", "also write the results to this JSON file");
  cli.value(bench, "family", fmt::format("comma list of auto, lean4 (lean with four consumer warpgroups), lean4f (lean4 with "
                                         "free-running consumers), leanf (lean's two consumers free-running), {} "
                                         "(default lean,generic)",
                                         dd::family_options()))->check(family_list);
  cli.value(bench, "reps", "timed repetitions per shape (default 20)")->check(CLI::Range(1, 1000000));
  cli.value(bench, "mode", "scores rows: both (the default), cold or warm alone (the other column's time and TFLOP/s 0; for "
                           "sampling clocks and power per mode)")->check(CLI::IsMember({"both", "cold", "warm"}));
  bench->add_flag_callback("--lse", [&cli] { cli.args.opt["lse"] = "1"; },
                           "every scores row also writes the lse output (names end in ' lse'; bf16 rows)");
  cli.value(bench, "thd-order", "lean THD q-tile order: balanced (per packing, the default), static (packed order), "
                                "or both (adds lean/st rows)")->check(CLI::IsMember({"balanced", "static", "both"}));
  cli.value(bench, "match", "only the shapes whose name contains this text (e.g. thd)");
  cli.value(bench, "op", "scores (the default: the scores rows), topk (the top-k rows: indexer_topk against the scores "
                         "alone of the same shape) or both")->check(CLI::IsMember({"scores", "topk", "both"}));
  cli.value(bench, "topk-k", "the k of the top-k rows, a comma list in [1, 2048] (default 2048,512)")
      ->check([](const std::string& v) -> std::string {
        try {
          dsa_cli::parse_topk_ks(v);
        } catch (const std::exception& e) {
          std::string m = e.what();
          if (m.rfind("--topk-k: ", 0) == 0) m.erase(0, 10);
          return m;
        }
        return {};
      });
  cli.value(bench, "topk-budget", "top-k rows: the workspace budget in MiB of both paths' blocks (default: the "
                                  "library's, 256 MiB)")->check(CLI::Range(1, 1 << 20));
  bench->add_flag_callback("--topk-one-wave", [&cli] { cli.args.opt["topk-one-wave"] = "1"; },
                           "top-k rows: the unfused path's blocks hold one wave of 8-row q-tiles at least, beyond the budget at "
                           "long S_k (before session 22), instead of staying within it (lean's split variant)");
  cli.value(bench, "topk-lean-windows", "top-k rows: the unfused path's blocks with explicit windows (THD) on lean's "
                                        "row-windows variant (on, the library's default) or on generic (off, before session 23)")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-fused-part", "top-k rows: the fused sweep's appends after the cut in warp-private partitions "
                                      "(on) or by a shared atomic per warp and tile (off, the library's default)")
      ->check(CLI::IsMember({"on", "off"}));
  bench->add_flag_callback("--topk-lse", [&cli] { cli.args.opt["topk-lse"] = "1"; },
                           "top-k rows: every call (the scores and the top-k) also writes the lse output");
  cli.value(bench, "topk-lse-lanes", "top-k rows with --topk-lse: BSHD lse in the fused sweep's lane order, which lets the "
                                     "fused path serve lse calls (on), or the selection's two-pass sum (off, the library's default)")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-select-short", "top-k rows: rows of at most 4096 cells selected by the short-row kernel (on) or the "
                                        "general one (off); unset: the library's default")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-regs-mid", "top-k rows: selections of 4097 to 8192 cells without softmax and lse by the narrow register "
                                    "rows (on) or the general kernel (off); unset: the library's default")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-narrow-long", "top-k rows: long-row selections outside the register rows, without softmax and lse, by "
                                       "256 threads (on) or 512 (off); unset: the library's default")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-regs-narrow", "top-k rows: register-rows selections without softmax and lse take their rows of at most "
                                       "4096 cells by the 256-thread short-row kernel first (on) or not (off); unset: the library's default")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-regs-ctas", "top-k rows: the register rows' first launch on N CTAs per SM (0: one CTA per row; unset: "
                                     "the library's 8)")
      ->check(CLI::Range(0, 64));
  cli.value(bench, "topk-select-medium", "top-k rows: rows of 4097 to 8192 cells selected by the 8-word short-row kernel (on) "
                                         "or the general one (off); unset: the library's default")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "topk-select-regs", "top-k rows: long-row selections (512 threads) take their rows of at most 8192 cells "
                                       "from registers (on) or every row by the general path (off); unset: the library's policy (where at "
                                       "least half of a launch's rows are known to fit)")
      ->check(CLI::IsMember({"on", "off"}));
  cli.value(bench, "in", "input precision of q and k: bf16 (the default: the scores and top-k rows) or e4m3 (the FP8 rows of issue 22: "
                        "S_q 8192 / S_k 4096 ratio 2, S_q 2048 with S_k 8192 and 65536 ending at S_k (ratio 1, offset "
                        "S_k - S_q - 1), S_q 16384 / S_k 8192; per-row fp32 q_scale and k_scale; families by --family, "
                        "default generic,lean,auto; our bf16 lean on the same inputs; the same run's cuBLASLt FP8 GEMM "
                        "ceiling; sampled rows against the fp64 oracle on the dequantized inputs, every cell bitwise "
                        "against generic FP8; exit 1 when a check fails). With --op topk, e4m3 gives the top-k rows' shapes on "
                        "E4M3 q and k with both scales (the same columns as bf16). --op both is bf16 only")
      ->check(CLI::IsMember({"bf16", "e4m3"}));
  bench->add_flag_callback("--quick", [&cli] { cli.args.opt["quick"] = "1"; }, "the first four shapes only (top-k: two; e4m3: the headline one)");

  CLI::App* jitcost = cli.command_of(&app, "jitcost", "cold compile per variant, disk-cache hit, module load, per-call host overhead by stage");
  cli.value(jitcost, "cache-dir", "where jitcost makes its private temp directory (default: TMPDIR, else /tmp)");
  cli.value(jitcost, "json", "also write the figures to this JSON file");

  cli.command_of(&app, "version", "print the version");
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  try {
    build_cli(cli);
    cli.app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.app.exit(e);  // --help (or -h) anywhere: the help of that command, nothing runs
  } catch (const CLI::CallForAllHelp& e) {
    return cli.app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.app.exit(e);
  } catch (const CLI::ParseError& e) {
    cli.app.exit(e);  // prints what was not understood and the usage
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "dsa-indexer: {}\n", e.what());
    return kExitFailed;
  }
  Args& a = cli.args;
  for (CLI::App* sub : cli.app.get_subcommands()) {
    for (CLI::App* leaf : sub->get_subcommands()) a.pos.push_back(leaf->get_name());
  }
  for (const auto& [name, slot] : cli.values)
    if (!slot->empty()) a.opt[name] = *slot;
  const std::string& cmd = cli.command;
  try {
    if (cmd == "warmup") {
      const std::string m = a.get("manifest");
      if (m == "default") return run_warmup(kDefaultManifest, "default manifest", a);
      return run_warmup(dd::read_manifest_file(m), m, a);
    }
    if (cmd == "ls" || cmd == "verify" || cmd == "clear") return run_cache(a);
    if (cmd == "demo") return run_demo(a);
    if (cmd == "bench") return run_bench(a);
    if (cmd == "jitcost") return run_jitcost(a);
    if (cmd == "version") {
      fmt::print("dsa-indexer {} (NVRTC {})\n", dsa_indexer::version(), dd::nvrtc_version());
      return 0;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "dsa-indexer {}: {}\n", cmd, e.what());
    return kExitFailed;
  }
  return usage();
}
