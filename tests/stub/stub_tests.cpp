// The forward path on CPUs, through the stand-in driver (tests/stub/cuda_stub.cpp, loaded as
// libcuda.so.1 from LD_LIBRARY_PATH, which CTest sets): validation, dispatch, planning, NVRTC,
// the disk cache, the async worker, shape recording and launch arguments (docs/RELIABILITY.md,
// round 3). Each scenario runs in a child process of its own (this binary again, `--child`),
// because the library reads its environment once per process and because exit is what some of
// them test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dsa_indexer/errors.hpp"
#include "dsa_indexer/indexer.hpp"
#include "dsa_indexer/topk.hpp"
#include "cuda/driver.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "process_support.hpp"
#include "test_support.hpp"

namespace {

using dsa_indexer::DType;
using dsa_indexer::IndexerOptions;
using dsa_indexer::KernelFamily;
using dsa_indexer::TensorDesc;
namespace dd = dsa_indexer::detail;

std::string g_self;  // this binary, for the children

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The stub's counters (it is loaded RTLD_LOCAL by the library: found again by its soname).
template <class F>
F stub_fn(const char* name) {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return h ? reinterpret_cast<F>(::dlsym(h, name)) : nullptr;
}
unsigned long stub_launches() {
  auto f = stub_fn<unsigned long (*)()>("dsa_stub_launches");
  return f ? f() : 0;
}
std::string stub_last_kernel(int* grid_x = nullptr, int* smem = nullptr) {
  auto f = stub_fn<int (*)(char*, int, int*, int*, int*)>("dsa_stub_last_launch");
  char name[512] = {0};
  int block = 0;
  if (f) f(name, sizeof name, grid_x, &block, smem);
  return name;
}

// Device memory of the stub (host memory it knows as device 0's).
void* dalloc(std::size_t bytes) {
  dd::ScopedContext ctx(0);
  CUdeviceptr p = 0;
  DSA_CU(cuMemAlloc(&p, bytes));
  return reinterpret_cast<void*>(p);
}

struct Bshd {
  TensorDesc q, k, w, out;
  IndexerOptions opt;
  Bshd(int64_t b, int64_t sq, int64_t sk, int64_t h = 64, DType wt = DType::bf16) {
    q = TensorDesc::contiguous(dalloc(std::size_t(b * sq * h * 128 * 2)), DType::bf16, {b, sq, h, 128});
    k = TensorDesc::contiguous(dalloc(std::size_t(b * sk * 128 * 2)), DType::bf16, {b, sk, 1, 128});
    w = TensorDesc::contiguous(dalloc(std::size_t(b * sq * h * 4)), wt, {b, sq, h});
    out = TensorDesc::contiguous(dalloc(std::size_t(b * sq * sk * 4)), DType::f32, {b, sq, sk});
    opt.ratio = 2;
  }
  void run(KernelFamily f = KernelFamily::automatic) {
    opt.family = f;
    dsa_indexer::indexer_forward(q, k, w, out, opt, nullptr);
  }
};

// A packed (THD) call whose cu_seqlens live only in (stub) device memory: validation reads them.
struct Thd {
  TensorDesc q, k, w, out;
  IndexerOptions opt;
  Thd(const std::vector<int32_t>& cuq, const std::vector<int32_t>& cuk, int64_t h = 64) {
    const int64_t tq = cuq.back(), tk = cuk.back(), n = static_cast<int64_t>(cuq.size());
    int64_t mq = 0, mk = 0;
    for (std::size_t i = 1; i < cuq.size(); ++i) {
      mq = std::max<int64_t>(mq, cuq[i] - cuq[i - 1]);
      mk = std::max<int64_t>(mk, cuk[i] - cuk[i - 1]);
    }
    q = TensorDesc::contiguous(dalloc(std::size_t(tq * h * 128 * 2)), DType::bf16, {tq, h, 128});
    k = TensorDesc::contiguous(dalloc(std::size_t(tk * 128 * 2)), DType::bf16, {tk, 1, 128});
    w = TensorDesc::contiguous(dalloc(std::size_t(tq * h * 4)), DType::f32, {tq, h});
    out = TensorDesc::contiguous(dalloc(std::size_t(tq * mk * 4)), DType::f32, {tq, mk});
    void* dq = dalloc(cuq.size() * 4);
    void* dk = dalloc(cuk.size() * 4);
    std::memcpy(dq, cuq.data(), cuq.size() * 4);  // stub device memory is host memory
    std::memcpy(dk, cuk.data(), cuk.size() * 4);
    opt.ratio = 2;
    opt.cu_seqlens_q = TensorDesc::contiguous(dq, DType::i32, {n});
    opt.cu_seqlens_k = TensorDesc::contiguous(dk, DType::i32, {n});
    opt.max_seqlen_q = mq;
    opt.max_seqlen_k = mk;
  }
  void run() { dsa_indexer::indexer_forward(q, k, w, out, opt, nullptr); }
};

int g_fails = 0;
void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_fails;
}
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Sync mode: one call of each family and layout; the launch the stub saw names the family,
// launch arguments pass the stub's checks; a second round compiles nothing.
int child_forward() {
  std::string why;
  expect(dd::Driver::probe(&why), "the stub answers as a driver: " + why);
  const dd::DeviceInfo& dev = dd::device_info(0);
  expect(dev.sm_count == 132 && dev.cc_major == 9 && contains(dev.name, "stub"), "a 132-SM sm_90 stub device: " + dev.name);
  Bshd lean(1, 2048, 1024);
  Bshd generic(2, 300, 77, 32);
  Bshd ref(1, 64, 64);
  Thd thd({0, 5, 5, 12}, {0, 3, 10, 16});
  Thd lean_thd({0, 700, 701, 1400}, {0, 350, 351, 700});
  for (int round = 0; round < 2; ++round) {
    const unsigned long before = stub_launches();
    lean.run();
    expect(contains(stub_last_kernel(), "lean"), "BSHD 2048x1024 H64 runs lean: " + stub_last_kernel());
    generic.run();
    expect(contains(stub_last_kernel(), "generic"), "BSHD H32 runs generic: " + stub_last_kernel());
    ref.run(KernelFamily::reference);
    expect(contains(stub_last_kernel(), "reference"), "reference by name: " + stub_last_kernel());
    thd.run();
    expect(contains(stub_last_kernel(), "generic"), "THD with device cu_seqlens runs generic: " + stub_last_kernel());
    lean_thd.run();
    expect(contains(stub_last_kernel(), "lean"), "THD of 1400 tokens runs lean: " + stub_last_kernel());
    expect(stub_launches() - before == 5, fmt::format("round {}: 5 launches, stub saw {}", round, stub_launches() - before));
  }
  const auto s = dsa_indexer::kernel_cache_stats();
  expect(s.compiles + s.disk_hits == 5, fmt::format("5 variants produced once each ({} compiles, {} disk hits)", s.compiles, s.disk_hits));
  expect(s.hits == 5, fmt::format("the second round hit memory 5 times (got {})", s.hits));
  // Lean by name where q-tiles x B cannot fill the SMs: its split variant, 64 q-tiles x 2 chunks.
  Bshd split(1, 512, 16384);
  split.opt.ratio = 1;
  split.run(KernelFamily::lean);
  int split_grid = 0;
  const std::string split_kernel = stub_last_kernel(&split_grid);
  expect(contains(split_kernel, "sm90_indexer_lean_split") && split_grid == 128,
         fmt::format("BSHD 512x16384 by name runs lean's split kernel on 128 CTAs: {} on {}", split_kernel, split_grid));
  // Lean by name at H 32: q-tiles of 16 tokens, 132 of them.
  Bshd h32(1, 132 * 16, 512, 32);
  h32.run(KernelFamily::lean);
  int h32_grid = 0;
  const std::string h32_kernel = stub_last_kernel(&h32_grid);
  expect(contains(h32_kernel, "sm90_indexer_lean") && !contains(h32_kernel, "split") && h32_grid == 132,
         fmt::format("BSHD 2112x512 H32 by name runs lean on 132 CTAs: {} on {}", h32_kernel, h32_grid));
  // Validation still guards the boundary: host memory is not device memory.
  std::vector<char> host(1 << 20);
  Bshd bad(1, 64, 64);
  bad.q.data = host.data();
  try {
    bad.run();
    expect(false, "host memory as q raises");
  } catch (const dsa_indexer::InvalidArgument& e) {
    expect(contains(e.what(), "q.data"), std::string("host memory as q: ") + e.what());
  }
  std::fflush(stdout);
  return g_fails;
}

// The top-k operation on the stand-in driver: validation, dispatch to the top-k family, its
// blocks (the rows kernel, the block's score family, the selection), the workspace from the
// stream-ordered pool or the caller, the launches' arguments; a second call compiles nothing.
int child_topk() {
  auto launches_of = [](auto&& f) {
    const unsigned long before = stub_launches();
    f();
    return stub_launches() - before;
  };
  // BSHD, S_q 2304 over 65536 keys, the unfused path by name: the 256 MiB budget holds 1024
  // rows, so three blocks of 768 rows (96 q-tiles: lean's split variant). Every row sees at most
  // 576 keys (ratio 4, no offsets), so each block's long-row selection takes the register rows'
  // launches (topk_select_regs_take; without softmax and lse the narrow ones too: three), the
  // general one last.
  Bshd b(1, 2304, 65536);
  b.opt.ratio = 4;
  b.opt.family = dsa_indexer::KernelFamily::topk_unfused;
  const int k = 512;
  TensorDesc idx = TensorDesc::contiguous(dalloc(std::size_t(2304) * k * 4), DType::i32, {1, 2304, k});
  dsa_indexer::TopkOptions t;
  t.k = k;
  t.values = TensorDesc::contiguous(dalloc(std::size_t(2304) * k * 4), DType::f32, {1, 2304, k});
  const unsigned long n = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  expect(n == 15, fmt::format("3 blocks x (rows, scores, narrow and register rows, select) = 15 launches, stub saw {}", n));
  expect(contains(stub_last_kernel(), "sm90_topk_select"), "the last launch selects: " + stub_last_kernel());
  const std::size_t ws = dsa_indexer::indexer_topk_workspace_size(b.q, b.k, b.w, idx, b.opt, t);
  expect(ws >= std::size_t(768) * 65536 * 4 && ws < std::size_t(800) * 65536 * 4,
         fmt::format("the workspace holds one block of 768 x 65536 scores ({} bytes)", ws));
  t.workspace = dalloc(ws);
  t.workspace_bytes = ws;
  const auto before = dsa_indexer::kernel_cache_stats();
  const unsigned long n2 = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  const auto after = dsa_indexer::kernel_cache_stats();
  expect(n2 == 15 && after.compiles == before.compiles && after.disk_hits == before.disk_hits,
         fmt::format("a caller's workspace: 15 launches ({}), nothing produced again", n2));
  // with softmax the narrow rows (256 threads) are not taken: 12
  t.softmax = TensorDesc::contiguous(dalloc(std::size_t(2304) * k * 4), DType::f32, {1, 2304, k});
  const unsigned long n_sm = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  t.softmax = TensorDesc();
  expect(n_sm == 12, fmt::format("with softmax: 3 blocks x (rows, scores, register rows, select) = 12 launches, stub saw {}", n_sm));
  // the register rows forced off: one selection launch per block
  dsa_indexer::detail::set_topk_select_regs(false);
  const unsigned long n_off = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  dsa_indexer::detail::set_topk_select_regs(std::nullopt);
  expect(n_off == 9, fmt::format("register rows off: 3 blocks x (rows, scores, select) = 9 launches, stub saw {}", n_off));
  // long rows by 256 threads (kTopkSelectNarrowLong: by default up to 16384 cells, so this width
  // of 65536 keeps 512 threads), the register rows off: forced on, a call without softmax ends in
  // sm90_topk_select<256>, one with softmax in <512>
  dsa_indexer::detail::set_topk_select_regs(false);
  dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr);
  const std::string default_last = stub_last_kernel();
  expect(contains(default_last, "sm90_topk_selectILi512E"), "long rows of 65536 cells by default: 512 threads (" + default_last + ")");
  dsa_indexer::detail::set_topk_select_narrow_long(true);
  dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr);
  const std::string narrow_last = stub_last_kernel();
  t.softmax = TensorDesc::contiguous(dalloc(std::size_t(2304) * k * 4), DType::f32, {1, 2304, k});
  dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr);
  const std::string wide_last = stub_last_kernel();
  t.softmax = TensorDesc();
  dsa_indexer::detail::set_topk_select_narrow_long(std::nullopt);
  dsa_indexer::detail::set_topk_select_regs(std::nullopt);
  expect(contains(narrow_last, "sm90_topk_selectILi256E") && contains(wide_last, "sm90_topk_selectILi512E"),
         "long rows by 256 threads without softmax (" + narrow_last + "), 512 with (" + wide_last + ")");
  t.workspace_bytes = ws - 256;
  try {
    dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr);
    expect(false, "a short workspace raises");
  } catch (const dsa_indexer::InvalidArgument& e) {
    expect(contains(e.what(), "workspace_bytes"), std::string("a short workspace: ") + e.what());
  }
  // The same call by the fused path: one block of 2304 rows (topk_fused_candidates(512, 65536)
  // = 4404 candidates of 8 bytes per row), 6 launches (rows, the sampled sweep, the redo pool's
  // slots and seeds, its sweep, candidates); without the split redo 4; with the exact sweep 3.
  b.opt.family = dsa_indexer::KernelFamily::topk_fused;
  t.workspace = nullptr;
  t.workspace_bytes = 0;
  dsa_indexer::detail::set_topk_fused_redo_split(false);
  const unsigned long nf = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  const std::size_t wsf = dsa_indexer::indexer_topk_workspace_size(b.q, b.k, b.w, idx, b.opt, t);
  dsa_indexer::detail::set_topk_fused_redo_split(std::nullopt);
  expect(nf == 4, fmt::format("fused without the split redo: 1 block x (rows, sampled sweep, redo, candidates) = 4 launches, stub saw {}", nf));
  expect(contains(stub_last_kernel(), "sm90_topk_candidates"), "fused: the last launch selects: " + stub_last_kernel());
  dsa_indexer::detail::set_topk_fused_margin(std::nanf(""));
  const unsigned long ne = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
  dsa_indexer::detail::set_topk_fused_margin(std::nullopt);
  expect(ne == 3, fmt::format("fused, exact sweep: 1 block x (rows, sweep, candidates) = 3 launches, stub saw {}", ne));
  const std::size_t cands = static_cast<std::size_t>(dsa_indexer::detail::topk_fused_candidates(k, 65536));
  expect(cands == 4404 && wsf >= std::size_t(2304) * cands * 8 && wsf < ws,
         fmt::format("fused: the workspace holds 2304 rows of {} candidates ({} bytes), less than the unfused ({})", cands, wsf,
                     ws));
  // With the split redo by slots (the redo pool off): 7 launches (rows, the sampled sweep, the
  // redo's slots, its split sweep, the join, the whole-row redo, candidates), and the workspace
  // adds the slots' chunk buffers.
  {
    namespace dd = dsa_indexer::detail;
    dd::set_topk_fused_redo_pool(false);
    const dd::TopkRedoSplit rs = dd::topk_redo_split(k, static_cast<int64_t>(cands), 65536);
    const unsigned long ns = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
    const std::string last = stub_last_kernel();
    const std::size_t wss = dsa_indexer::indexer_topk_workspace_size(b.q, b.k, b.w, idx, b.opt, t);
    dd::set_topk_fused_redo_pool(std::nullopt);
    const std::size_t chunks = std::size_t(dd::kTopkRedoSlots) * 8 * std::size_t(rs.parts);
    expect(rs.parts == 8 && rs.chunk == 128 && ns == 7 && contains(last, "sm90_topk_candidates"),
           fmt::format("fused, split redo: {} parts of {} tiles, 7 launches ({}), last {}", rs.parts, rs.chunk, ns, last));
    expect(wss >= wsf + chunks * std::size_t(rs.part_ld) * 8 && wss < wsf + chunks * std::size_t(rs.part_ld) * 8 + (64u << 10),
           fmt::format("fused, split redo: the workspace {} = {} + the chunk buffers ({} x {} entries)", wss, wsf, chunks, rs.part_ld));
    // The redo pool (the default since session 33): 6 launches (rows, the sampled sweep, the
    // redo's slots, its rows' seeds, the pool's sweep, candidates: no join, no whole-row redo),
    // 16 parts (the join that cuts' rule), and a chunk buffer per SM (132 x 8 rows) in the
    // workspace.
    const dd::TopkRedoSplit rp = dd::topk_redo_split(k, static_cast<int64_t>(cands), 65536);
    const unsigned long np = launches_of([&] { dsa_indexer::indexer_topk(b.q, b.k, b.w, idx, b.opt, t, nullptr); });
    const std::string plast = stub_last_kernel();
    const std::size_t wsp = dsa_indexer::indexer_topk_workspace_size(b.q, b.k, b.w, idx, b.opt, t);
    const std::size_t pool = std::size_t(132) * 8 * std::size_t(rp.part_ld) * 8;
    expect(rp.parts == 16 && rp.chunk == 64 && np == 6 && contains(plast, "sm90_topk_candidates"),
           fmt::format("fused, redo pool: {} parts of {} tiles, 6 launches ({}), last {}", rp.parts, rp.chunk, np, plast));
    expect(wsp >= wsf + pool && wsp < wsf + pool + (64u << 10),
           fmt::format("fused, redo pool: the workspace {} = {} + the CTAs' chunk buffers ({} bytes)", wsp, wsf, pool));
  }
  // An automatic call past about 127k keys (S_q 1056, S_k 131072: the unfused blocks hold 352
  // rows, under half a wave; rows of at most 1056 keys: the narrow and register rows) at k 64
  // takes the unfused path (3 blocks, 15 launches) and its workspace (the fused policy wants k
  // 2048); at k 2048 the fused path (the policy on since session 33): one block, 6 launches (with
  // the redo pool), and (sync compile mode) the fused path's workspace, smaller than the unfused
  // path's; with the policy off (set_topk_fused_automatic) the unfused path again.
  {
    Bshd l(1, 1056, 131072);
    l.opt.ratio = 1;
    for (const int kl : {64, 2048}) {
      TensorDesc lidx = TensorDesc::contiguous(dalloc(std::size_t(1056) * kl * 4), DType::i32, {1, 1056, kl});
      dsa_indexer::TopkOptions lt;
      lt.k = kl;
      l.opt.family = dsa_indexer::KernelFamily::automatic;
      dsa_indexer::detail::set_topk_fused_automatic(false);
      const unsigned long nu = launches_of([&] { dsa_indexer::indexer_topk(l.q, l.k, l.w, lidx, l.opt, lt, nullptr); });
      const std::string ulast = stub_last_kernel();
      const std::size_t wd = dsa_indexer::indexer_topk_workspace_size(l.q, l.k, l.w, lidx, l.opt, lt);
      dsa_indexer::detail::set_topk_fused_automatic(std::nullopt);
      expect(nu == 15 && contains(ulast, "sm90_topk_select"),
             fmt::format("k {}, automatic at S_k 131072, the fused policy off: the unfused path, 15 launches ({}), last {}", kl, nu,
                         ulast));
      const unsigned long na = launches_of([&] { dsa_indexer::indexer_topk(l.q, l.k, l.w, lidx, l.opt, lt, nullptr); });
      const std::string alast = stub_last_kernel();
      const std::size_t wa = dsa_indexer::indexer_topk_workspace_size(l.q, l.k, l.w, lidx, l.opt, lt);
      const bool fused = kl == 2048;
      expect(fused ? na == 6 && contains(alast, "sm90_topk_candidates") : na == 15 && contains(alast, "sm90_topk_select"),
             fmt::format("k {}, automatic at S_k 131072: the {} path, {} launches ({}), last {}", kl, fused ? "fused" : "unfused",
                         fused ? 6 : 15, na, alast));
      l.opt.family = dsa_indexer::KernelFamily::topk_fused;
      const std::size_t wf = dsa_indexer::indexer_topk_workspace_size(l.q, l.k, l.w, lidx, l.opt, lt);
      l.opt.family = dsa_indexer::KernelFamily::topk_unfused;
      const std::size_t wu = dsa_indexer::indexer_topk_workspace_size(l.q, l.k, l.w, lidx, l.opt, lt);
      expect(wd == wu && wa == (fused ? wf : wu) && wf < wu && wu <= (std::size_t(257) << 20),
             fmt::format("k {}, automatic at S_k 131072: the policy off, the unfused workspace ({} = {} bytes); on, {} ({}; "
                         "fused {}, under the unfused)",
                         kl, wd, wu, wa, fused ? "the fused one" : "the unfused one", wf));
    }
    l.opt.family = dsa_indexer::KernelFamily::automatic;
  }
  // A selection of width 6000 without softmax: the rows of 4097..8192 cells by the narrow
  // register rows (kTopkSelectRegsMid, on since session 30), three launches, the general
  // 512-thread one last; with them off the general 256-thread kernel, one launch.
  {
    Bshd m(1, 256, 6000);
    m.opt.family = dsa_indexer::KernelFamily::topk_unfused;
    TensorDesc midx = TensorDesc::contiguous(dalloc(std::size_t(256) * 64 * 4), DType::i32, {1, 256, 64});
    dsa_indexer::TopkOptions mt;
    mt.k = 64;
    dsa_indexer::detail::set_topk_select_regs_mid(false);
    const unsigned long n_def = launches_of([&] { dsa_indexer::indexer_topk(m.q, m.k, m.w, midx, m.opt, mt, nullptr); });
    const std::string def_last = stub_last_kernel();
    dsa_indexer::detail::set_topk_select_regs_mid(std::nullopt);
    const unsigned long n_mid = launches_of([&] { dsa_indexer::indexer_topk(m.q, m.k, m.w, midx, m.opt, mt, nullptr); });
    const std::string mid_last = stub_last_kernel();
    expect(n_mid == n_def + 2 && contains(def_last, "sm90_topk_selectILi256ELb0E") && contains(mid_last, "sm90_topk_selectILi512ELb1E"),
           fmt::format("width 6000: {} launches ending in {}; the register rows for 4097..8192 cells: {} ending in {}", n_def,
                       def_last, n_mid, mid_last));
  }
  // THD with device-only cu_seqlens: segments 0 and 2 hold the rows; their keys (with segment 1's
  // between them) span 16 > max_seqlen_k 7 columns, so two blocks; generic with explicit windows.
  Thd thd({0, 5, 5, 12}, {0, 3, 10, 16});
  TensorDesc tidx = TensorDesc::contiguous(dalloc(12 * 8 * 4), DType::i32, {12, 8});
  dsa_indexer::TopkOptions tt;
  tt.k = 8;
  tt.indices = dsa_indexer::TopkIndices::global;
  const unsigned long n3 = launches_of([&] { dsa_indexer::indexer_topk(thd.q, thd.k, thd.w, tidx, thd.opt, tt, nullptr); });
  expect(n3 == 6, fmt::format("THD of 12 rows: two blocks, 6 launches (stub saw {})", n3));
  std::fflush(stdout);
  return g_fails;
}

// Async mode with recording: the first call runs the fallback (generic) while the worker makes
// the lean variant; once it is resident, lean serves; the variant is recorded.
int child_async() {
  Bshd lean(1, 2048, 1024);
  lean.run();
  expect(contains(stub_last_kernel(), "generic"), "the first async call runs the fallback: " + stub_last_kernel());
  const auto t0 = std::chrono::steady_clock::now();
  while (dsa_indexer::kernel_cache_stats().background_compiles < 1 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  lean.run();
  expect(contains(stub_last_kernel(), "lean"), "once produced, lean serves: " + stub_last_kernel());
  const auto s = dsa_indexer::kernel_cache_stats();
  expect(s.background_compiles == 1 && s.async_fallbacks == 1 && s.background_failures == 0,
         fmt::format("1 background compile, 1 fallback, 0 failures (got {}, {}, {})", s.background_compiles, s.async_fallbacks,
                     s.background_failures));
  expect(s.recorded_keys >= 1, fmt::format("the lean variant was recorded ({} keys)", s.recorded_keys));
  std::fflush(stdout);
  return g_fails;
}

// Shapes that each need their own lean variant, all served meanwhile by one generic variant
// (which the test put in the prebuilt directory, so the fallback never compiles).
const int64_t kExitShapes[][2] = {{1088, 256}, {1152, 256}, {1216, 256}, {1280, 256}};

[[noreturn]] void exit_now() {
  std::printf("exit-at %lld\n", static_cast<long long>(now_ns()));
  std::fflush(stdout);
  std::exit(0);
}

// Queues background compiles, then exits `delay_ms` later: from main, from another thread, or
// in a forked child that queued one of its own (and its parent after it).
int child_exit(const std::string& how, int delay_ms) {
  std::vector<Bshd*> calls;
  for (int i = 0; i < 3; ++i) calls.push_back(new Bshd(1, kExitShapes[i][0], kExitShapes[i][1]));
  for (Bshd* c : calls) c->run();
  if (how == "main") {
    ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
    exit_now();
  }
  if (how == "thread") {
    std::thread t([delay_ms] {
      ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
      exit_now();
    });
    t.join();  // never returns: the other thread ends the process
    return 3;
  }
  if (how == "fork") {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return 4;
    if (pid == 0) {
      ::alarm(60);  // alarms are not inherited across fork: a hang here dies by SIGALRM too
      Bshd extra(1, kExitShapes[3][0], kExitShapes[3][1]);
      extra.run();  // the child's own worker starts and compiles
      calls[0]->run();
      ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
      exit_now();
    }
    ::usleep(static_cast<useconds_t>(delay_ms / 2) * 1000);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::printf("forked child: %s %d\n", WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      std::fflush(stdout);
      std::_Exit(5);
    }
    exit_now();
  }
  return 6;
}

dsa_test::ChildResult run_child(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                                int alarm_s = 300, const std::string& program = g_self) {
  std::vector<std::string> argv{program, "--child"};
  argv.insert(argv.end(), args.begin(), args.end());
  return dsa_test::run_program(argv, [env, alarm_s] {
    ::alarm(static_cast<unsigned>(alarm_s));  // survives exec: a hang dies by SIGALRM
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    return true;
  });
}

}  // namespace

TEST_CASE("stub: sync forward of every family and layout on the stand-in driver", "[stub]") {
  dsa_test::TempDir t;
  auto r = run_child({"forward"}, {{"DSA_INDEXER_CACHE_DIR", t.path() + "/cache"}});
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  CHECK(dsa_test::count_of(r.output, "\nok ") + (r.output.rfind("ok ", 0) == 0) >= 14);
  // A second process finds all five variants on disk.
  auto again = run_child({"forward"}, {{"DSA_INDEXER_CACHE_DIR", t.path() + "/cache"}});
  INFO(again.output);
  CHECK(again.code == 0);
}

TEST_CASE("stub: the top-k operation end to end on the stand-in driver", "[stub]") {
  dsa_test::TempDir t;
  auto r = run_child({"topk"}, {{"DSA_INDEXER_CACHE_DIR", t.path() + "/cache"}});
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  CHECK(dsa_test::count_of(r.output, "ok ") >= 8);
}

TEST_CASE("stub: async mode runs the fallback, then the background-compiled lean variant, and records it", "[stub]") {
  dsa_test::TempDir t;
  auto r = run_child({"async"}, {{"DSA_INDEXER_CACHE_DIR", t.path() + "/cache"},
                                 {"DSA_INDEXER_LEAN_COMPILE", "async"},
                                 {"DSA_INDEXER_RECORD_MANIFEST", t.path() + "/m.txt"}});
  INFO(r.output);
  CHECK(r.exited);
  CHECK(r.code == 0);
  CHECK_THAT(dsa_test::slurp(t.path() + "/m.txt"), Catch::Contains("family=lean"));
}

// Class 1 (issue 24): a process that exits while the background worker compiles must exit 0,
// at once or within a bound, never crash inside NVRTC or spin. Random exit points (seeded;
// DSA_STUB_EXIT_SEED overrides), three ways of exiting, with and without the compile helper.
void exit_storm(bool with_helper, int per_mode, double bound_s) {
  dsa_test::TempDir t;
  const std::string warm = t.path() + "/warm";
  // The fallback variant goes to a prebuilt directory once, so no child compiles in process on
  // its own thread: what races with exit is the worker alone.
  auto w = run_child({"warm"}, {{"DSA_INDEXER_CACHE_DIR", warm}});
  INFO(w.output);
  REQUIRE(w.code == 0);
  const char* seed_env = std::getenv("DSA_STUB_EXIT_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10)) : 24u;
  std::mt19937 rng(seed + (with_helper ? 1000u : 0u));
  std::uniform_int_distribution<int> delay(0, 1200);
  // Without the helper: a copy of this binary where the library's lookup beside it finds none
  // (the build tree has one in libexec/), and DSA_INDEXER_COMPILE_HELPER unset.
  std::string program = g_self;
  if (!with_helper) {
    program = t.path() + "/dsa_stub_tests";
    std::filesystem::copy_file(g_self, program);
  }
  int n = 0, bad = 0;
  double worst = 0;
  for (int i = 0; i < per_mode; ++i) {
    for (const char* how : {"main", "thread", "fork"}) {
      const int d = delay(rng);
      std::vector<std::pair<std::string, std::string>> env{{"DSA_INDEXER_CACHE_DIR", t.path() + fmt::format("/c{}", n)},
                                                           {"DSA_INDEXER_PREBUILT_DIR", warm},
                                                           {"DSA_INDEXER_LEAN_COMPILE", "async"}};
      if (with_helper) env.push_back({"DSA_INDEXER_COMPILE_HELPER", DSA_TEST_HELPER});
      auto r = run_child({"exit", how, std::to_string(d)}, env, 60, program);
      const int64_t reaped = now_ns();
      const auto at = r.output.rfind("exit-at ");
      const double latency = at == std::string::npos ? -1 : double(reaped - std::atoll(r.output.c_str() + at + 8)) / 1e9;
      const bool ok = r.exited && r.code == 0 && latency >= 0 && latency < bound_s &&
                      (with_helper || r.output.find("was not found") != std::string::npos);
      worst = std::max(worst, latency);
      if (!ok) {
        ++bad;
        UNSCOPED_INFO(fmt::format("seed {} run {} ({} exit after {} ms): {} {}, exit took {:.3f} s; output:\n{}", seed, n, how,
                                  d, r.exited ? "status" : "signal", r.exited ? r.code : r.signal, latency, r.output));
      }
      ++n;
    }
  }
  WARN(fmt::format("{} processes ({}), {} bad, slowest exit {:.3f} s (bound {} s)", n,
                   with_helper ? "compile helper" : "in-process NVRTC", bad, worst, bound_s));
  CHECK(bad == 0);
}

TEST_CASE("stub: exit during background compiles, with the compile helper", "[stub_exit]") { exit_storm(true, 8, 3.0); }

TEST_CASE("stub: exit during background compiles, NVRTC in process", "[stub_exit]") { exit_storm(false, 8, 10.0); }

int child_warm() {
  Bshd c(1, kExitShapes[0][0], kExitShapes[0][1]);
  c.run(KernelFamily::generic);
  return contains(stub_last_kernel(), "generic") ? 0 : 1;
}

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc >= 3 && std::string(argv[1]) == "--child") {
    const std::string mode = argv[2];
    try {
      if (mode == "forward") return child_forward();
      if (mode == "async") return child_async();
      if (mode == "topk") return child_topk();
      if (mode == "warm") return child_warm();
      if (mode == "exit" && argc >= 5) return child_exit(argv[3], std::atoi(argv[4]));
    } catch (const std::exception& e) {
      std::printf("child: %s\n", e.what());
      return 90;
    }
    return 91;
  }
  // Every case needs the stub, not a real driver or none: a wrong LD_LIBRARY_PATH fails here.
  std::string why;
  if (!dd::Driver::probe(&why) || !contains(dd::device_info(0).name, "stub")) {
    std::fprintf(stderr, "the stand-in driver is not the libcuda.so.1 this process loads (LD_LIBRARY_PATH?): %s\n", why.c_str());
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
