// The fused top-k without a GPU: the dispatcher's choice (fused where its gates hold, the
// unfused path otherwise and under the escape hatch), the candidate-buffer and workspace
// arithmetic, and every variant the default manifest's top-k lines produce compiled by NVRTC
// without spills.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <vector>
#include <string>

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "dsa_indexer/errors.hpp"
#include "dsa_indexer/topk.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "jit/codegen.hpp"
#include "ops/topk.hpp"
#include "ops/warmup.hpp"
#include "problems.hpp"
#include "compile_checks.hpp"
#include "sm90_topk_candidates_args.cuh"
#include "sm90_indexer_lean_args.cuh"
#include "sm90_topk_fused_args.cuh"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::KernelFamily;
using dsa_indexer::TopkOptions;
using Catch::Contains;

namespace {

constexpr uintptr_t kQ = uintptr_t(1) << 40, kK = uintptr_t(2) << 40, kW = uintptr_t(3) << 40, kIdx = uintptr_t(4) << 40,
                    kLse = uintptr_t(6) << 40;

Problem topk_problem(int64_t B, int64_t sq, int64_t sk, int k, int64_t ratio = 1, bool lse = false) {
  Call c = bshd_call(B, sq, sk);
  c.q.data = fake(kQ);
  c.k.data = fake(kK);
  c.w.data = fake(kW);
  c.opt.ratio = ratio;
  if (lse) c.opt.lse = TensorDesc::contiguous(fake(kLse), DType::f32, {B, sq});
  const TensorDesc ind = TensorDesc::contiguous(fake(kIdx), DType::i32, {B, sq, k});
  TopkOptions t;
  t.k = k;
  return validate_topk(c.q, c.k, c.w, ind, c.opt, t, nullptr);
}


}  // namespace

TEST_CASE("topk fused: the dispatcher takes it where its gates hold", "[topk][dispatch]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const Problem p = topk_problem(1, 2048, 4096, 512);
  // automatic: the unfused path where its blocks hold half a wave of rows (shorter rows), the
  // fused one past that (topk_unfused_short_blocks)
  CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
  CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, true), Contains("DSA_INDEXER_DISABLE_LEAN"));
  // the escape hatch: the unfused path
  CHECK(&choose_family(p, dev, KernelFamily::automatic, true) == &topk_unfused_family());
  CHECK(&choose_family(p, dev, KernelFamily::topk_unfused, false) == &topk_unfused_family());
  // lse: the fused path refuses it unless the lane-order lse is on (kTopkLseLanes, off until it
  // runs on a GPU); then both paths serve it (the sweep's variant with kTopkLse, keyed apart,
  // with its states' shared memory); an unsaturated block (fewer q-tiles than SMs): unfused
  const Problem with_lse = topk_problem(1, 2048, 4096, 512, 1, true);
  CHECK(&choose_family(with_lse, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  CHECK_THROWS_WITH(choose_family(with_lse, dev, KernelFamily::topk_fused, false), Contains("family topk_fused: lse"));
  set_topk_lse_lanes(true);
  CHECK(&choose_family(with_lse, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
  {
    const std::vector<Problem> a = topk_fused_family().inner_problems(p, dev), b = topk_fused_family().inner_problems(with_lse, dev);
    REQUIRE(a.size() == 1);
    REQUIRE(b.size() == 1);
    const Plan pa = make_plan(a[0], dev, topk_fused_sweep_family()), pb = make_plan(b[0], dev, topk_fused_sweep_family());
    // (a call with lse keeps the whole-row redo: no split variant; without, the redo pool's, .rs2)
    std::string key_a = pa.spec.shape_key();
    REQUIRE(key_a.find(".rs2") != std::string::npos);
    key_a.erase(key_a.find(".rs2"), 4);
    CHECK(pb.spec.shape_key() == key_a + ".tlse1");
    CHECK(pb.spec.dynamic_smem == pa.spec.dynamic_smem + static_cast<uint32_t>(dsa::kLeanTopkLseBytes));
    CHECK(render(pa.spec).text.find("kTopkLse") == std::string::npos);
    CHECK_THAT(render(pb.spec).text, Contains("kTopkLse = 1"));
  }
  set_topk_lse_lanes(std::nullopt);
  const Problem small = topk_problem(4, 512, 4096, 64);
  CHECK(&choose_family(small, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  CHECK_THROWS_WITH(choose_family(small, dev, KernelFamily::topk_fused, false), Contains("grid saturation"));
  // S_q not a multiple of the lean q-tile
  CHECK(&choose_family(topk_problem(1, 2050, 4096, 64), dev, KernelFamily::automatic, false) == &topk_unfused_family());
  // the sweep serves only its internal operation, and no top-k call by name
  CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused_sweep, false),
                    Contains("family topk_fused_sweep: operation: expected topk_sweep, got topk"));
  // its inner problems are the sweeps of the distinct block shapes, which the sweep family serves
  const std::vector<Problem> inner = topk_fused_family().inner_problems(p, dev);
  REQUIRE(inner.size() == 1);
  CHECK(inner[0].op == Operation::topk_sweep);
  CHECK(&choose_family(inner[0], dev, KernelFamily::automatic, false) == &topk_fused_sweep_family());
}

TEST_CASE("topk fused: automatic calls take it where the unfused blocks fall under half a wave", "[topk][dispatch]") {
  const DeviceInfo dev = DeviceInfo::h200();  // 132 SMs: half a wave is 528 rows
  const auto automatic = [&](const Problem& p) { return &choose_family(p, dev, KernelFamily::automatic, false); };
  // the policy (kTopkFusedAutomatic, on since session 33)
  CHECK(topk_fused_automatic());
  // S_k 65536: the 256 MiB budget holds 1024 rows (lean split blocks): unfused
  const Problem p64k = topk_problem(1, 8192, 65536, 2048);
  CHECK_FALSE(topk_unfused_short_blocks(p64k, dev));
  CHECK(automatic(p64k) == &topk_unfused_family());
  // S_k 131072 and 262144: 512 and 256 rows: fused at k 2048; at k 512 and 1024 unfused (the
  // fused path slower there, session 33), by name fused
  for (int k : {2048, 1024, 512}) {
    INFO("k " << k);
    const Problem a = topk_problem(1, 4096, 131072, k), b = topk_problem(1, 2048, 262144, k);
    CHECK(topk_unfused_short_blocks(a, dev));
    const Family* want = k >= kTopkFusedAutoMinK ? &topk_fused_family() : &topk_unfused_family();
    CHECK(automatic(a) == want);
    CHECK(automatic(b) == want);
    CHECK(&choose_family(a, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    // the escape hatch still gives the unfused path
    CHECK(&choose_family(a, dev, KernelFamily::automatic, true) == &topk_unfused_family());
    // and by name the unfused path serves it, in blocks within its budget
    CHECK(&choose_family(a, dev, KernelFamily::topk_unfused, false) == &topk_unfused_family());
    CHECK(make_plan(a, dev, topk_unfused_family()).workspace_bytes < (uint64_t(257) << 20));
    // the fused workspace: blocks of full waves, less than the unfused one where the policy takes
    // it (k 2048) and at k 512; at k 1024 the redo pool's chunk buffers (35 MB on 132 SMs) take it
    // past the unfused one by under 1 %
    const uint64_t wf = make_plan(a, dev, topk_fused_family()).workspace_bytes, wu = make_plan(a, dev, topk_unfused_family()).workspace_bytes;
    if (k == 1024) CHECK(wf < wu + wu / 100);
    else CHECK(wf < wu);
  }
  // the policy off (set_topk_fused_automatic): unfused at every S_k
  set_topk_fused_automatic(false);
  CHECK(automatic(topk_problem(1, 4096, 131072, 2048)) == &topk_unfused_family());
  CHECK(automatic(topk_problem(1, 2048, 262144, 2048)) == &topk_unfused_family());
  set_topk_fused_automatic(std::nullopt);
  // with lse too when the lane-order lse is on; else lse, FP8 (served by name only), few rows
  // (S_q under half a wave), or candidates past the sweep's limit: unfused
  CHECK(automatic(topk_problem(1, 4096, 131072, 2048, 1, true)) == &topk_unfused_family());
  set_topk_lse_lanes(true);
  CHECK(automatic(topk_problem(1, 4096, 131072, 2048, 1, true)) == &topk_fused_family());
  set_topk_lse_lanes(std::nullopt);
  Problem fp8 = topk_problem(1, 4096, 131072, 2048);
  fp8.qk_dtype = DType::e4m3;
  CHECK(automatic(fp8) == &topk_unfused_family());
  CHECK(&choose_family(fp8, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
  const Problem few = topk_problem(1, 512, 262144, 2048);
  CHECK_FALSE(topk_unfused_short_blocks(few, dev));
  CHECK(automatic(few) == &topk_unfused_family());
  CHECK_FALSE(topk_fused_candidates_fit(2048, int64_t(1) << 20));
  CHECK(topk_fused_candidates_fit(2048, 262144));
  const Problem huge = topk_problem(1, 2048, int64_t(1) << 20, 2048);
  CHECK(topk_unfused_short_blocks(huge, dev));
  CHECK(automatic(huge) == &topk_unfused_family());
  // a GPU with more SMs needs more rows for half a wave: the 65536 call's 1024 rows still do
  DeviceInfo big = dev;
  big.sm_count = 256;
  CHECK_FALSE(topk_unfused_short_blocks(p64k, big));
  big.sm_count = 512;
  CHECK(topk_unfused_short_blocks(p64k, big));
}

TEST_CASE("topk fused: candidate buffers and the workspace", "[topk][planner]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const int64_t tile = dsa::kLeanTopkTileCols;
  // The sampled sweep (the default): its sample and the cells above its cut, with room for 6
  // deviations (the formula, worked by hand: S_k 16384, k 2048: stride 16, m 1024, e 128,
  // r = ceil(128 + 5 sqrt(128)) = 185, 185 x 16 x (1 + 6 / sqrt(185)) = 4265.1, + 1024 + 64).
  CHECK(topk_fused_candidates(2048, 16384) == 5356);
  CHECK(topk_fused_candidates(2048, 32768) == 6376);
  CHECK(topk_fused_candidates(2048, 65536) == 7992);
  CHECK(topk_fused_candidates(2048, 131072) == 10304);  // past the candidates kernel's staging
  CHECK(topk_fused_candidates(2048, 4096) == 4096 + tile);  // a row never holds more than S_k + one tile
  CHECK(topk_fused_candidates(64, 300) == 364);
  CHECK(topk_fused_candidates(2048, 300) == 2048 + tile);  // but always k + one tile
  CHECK(topk_fused_candidates(2048, int64_t(1) << 20) == dsa::kLeanTopkMaxLd);
  for (int k : {1, 7, 64, 512, 2048})
    for (int64_t sk : {int64_t(1), int64_t(100), int64_t(4096), int64_t(1) << 20}) {
      const int64_t ld = topk_fused_candidates(k, sk);
      CHECK(ld >= k + tile);
      CHECK(ld % 4 == 0);
      CHECK(ld <= dsa::kLeanTopkMaxLd);
    }
  // The exact sweep: 4k, at least 1024, within the candidates kernel's shared-memory list.
  set_topk_fused_margin(std::nanf(""));
  CHECK(topk_fused_candidates(2048, 65536) == 8192);
  CHECK(topk_fused_candidates(512, 65536) == 2048);
  CHECK(topk_fused_candidates(1, 65536) == 1024);
  CHECK(topk_fused_candidates(64, 300) == 364);
  for (int k : {1, 7, 64, 512, 2048})
    for (int64_t sk : {int64_t(1), int64_t(100), int64_t(4096), int64_t(1) << 20})
      CHECK(topk_fused_candidates(k, sk) <= dsa::kTopkCandMaxLd);
  set_topk_fused_margin(std::nullopt);
  set_topk_fused_candidates(100000);  // forced: up to the sweep's limit, past the staging
  CHECK(topk_fused_candidates(7, 65536) == dsa::kLeanTopkMaxLd);
  set_topk_fused_candidates(100);
  CHECK(topk_fused_candidates(7, 65536) == 100);
  CHECK(topk_fused_candidates(512, 65536) == 512 + tile);  // a forced size still holds k + one tile
  set_topk_fused_candidates(0);
  // The workspace: blocks of rows x candidates within kTopkFusedBudget whatever S_q and S_k,
  // and the split redo's slots (kTopkRedoSlots x 8 rows x at most 16 chunks of k + max(k, 1024) +
  // 64 entries: 34 MiB at k 2048 with the join that cuts, 15 MiB without it, where 7 chunks' k
  // fit the rows' buffers); S_q 8192 at S_k 16384 in two blocks of 4096 rows.
  // (the slots: with the redo pool off, as before session 33)
  set_topk_fused_redo_pool(false);
  const uint64_t slots = uint64_t(kTopkRedoSlots) * 8 * kTopkRedoMaxParts * (2 * 2048 + 64) * 8;
  const uint64_t cap = kTopkFusedBudget + (uint64_t(1) << 20) + slots;
  const uint64_t one = make_plan(topk_problem(1, 8192, 16384, 2048), dev, topk_fused_family()).workspace_bytes;
  CHECK(one >= uint64_t(4096) * 5356 * 8);
  CHECK(one <= cap);
  for (const bool cut : {false, true}) {
    set_topk_fused_redo_join_cut(cut);
    for (int64_t sq : {int64_t(4096), int64_t(8192), int64_t(32768), int64_t(1) << 20})
      for (int64_t sk : {int64_t(16384), int64_t(65536), int64_t(131072), int64_t(1) << 20})
        CHECK(make_plan(topk_problem(1, sq, sk, 2048), dev, topk_fused_family()).workspace_bytes <= cap);
  }
  set_topk_fused_redo_join_cut(std::nullopt);
  // the redo pool (the default since session 33): a chunk buffer per SM (8 rows of k + max(k,
  // 1024) + 64 entries: 35 MB on 132 SMs at k 2048) whatever the block's q-tiles, beside their
  // lists and the rows' locks
  const uint64_t pool = uint64_t(dev.sm_count) * 8 * (2 * 2048 + 64) * 8;
  set_topk_fused_redo_pool(std::nullopt);
  CHECK(topk_fused_redo_pool());
  for (int64_t sq : {int64_t(4096), int64_t(8192), int64_t(32768), int64_t(1) << 20})
    for (int64_t sk : {int64_t(16384), int64_t(65536), int64_t(131072), int64_t(1) << 20}) {
      const Problem p = topk_problem(1, sq, sk, 2048);
      const uint64_t with = make_plan(p, dev, topk_fused_family()).workspace_bytes;
      CHECK(with <= kTopkFusedBudget + (uint64_t(1) << 20) + pool);
      set_topk_fused_redo_split(false);
      const uint64_t without = make_plan(p, dev, topk_fused_family()).workspace_bytes;
      set_topk_fused_redo_split(std::nullopt);
      CHECK(with - without >= pool);
      CHECK(with - without <= pool + (uint64_t(1) << 20));
    }
  set_topk_fused_redo_pool(std::nullopt);
  // without the split redo, within the budget alone
  set_topk_fused_redo_split(false);
  for (int64_t sq : {int64_t(4096), int64_t(8192), int64_t(32768), int64_t(1) << 20})
    for (int64_t sk : {int64_t(16384), int64_t(65536), int64_t(131072), int64_t(1) << 20})
      CHECK(make_plan(topk_problem(1, sq, sk, 2048), dev, topk_fused_family()).workspace_bytes <= cap - slots);
  set_topk_fused_redo_split(std::nullopt);
}

TEST_CASE("topk fused: every variant of the default manifest's top-k shapes compiles without spills", "[topk][nvrtc]") {
  const DeviceInfo dev = DeviceInfo::h200();
  std::vector<ManifestProblem> lines = parse_manifest(
      "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=8192  sk=65536  ratio=1 w=bf16 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=16384 sk=4096   ratio=4 w=f32 k=2048 scale=both family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=8192  sk=2048   ratio=4 w=bf16 k=512 family=topk_fused\n",
      "test");
  std::set<std::string> seen;
  std::vector<KernelSpec> specs;
  int fused = 0, sweeps = 0;
  for (const KernelSpec& spec : manifest_specs(lines, dev)) {
    const std::string fam = spec.family->name();
    if (fam != "sm90_topk_fused" && fam != "sm90_topk_fused_sweep") continue;
    if (!seen.insert(spec.variant_key()).second) continue;
    (fam == "sm90_topk_fused" ? fused : sweeps)++;
    specs.push_back(spec);
  }
  check_compiles_without_spills(specs, "sm90_topk");
  CHECK(fused == 1);
  CHECK(sweeps >= 5);  // the block shapes of each line, bf16 and fp32 W, both scale variants
}

namespace {
// The distinct sweep variants the manifest lines imply, in their order.
std::vector<KernelSpec> sweep_specs(const char* manifest, const DeviceInfo& dev) {
  const std::vector<ManifestProblem> lines = parse_manifest(manifest, "test");
  std::vector<KernelSpec> v;
  std::set<std::string> seen;
  for (const KernelSpec& s : manifest_specs(lines, dev))
    if (std::string(s.family->name()) == "sm90_topk_fused_sweep" && seen.insert(s.variant_key()).second) v.push_back(s);
  return v;
}
}  // namespace

// FP8 (E4M3 q / k with their scales): the sweep is
// lean's FP8 main loop with the selection epilogue, both protocols' kernels, bf16 and fp32 W, the
// partitioned appends too.
TEST_CASE("topk fused: the FP8 sweep variants compile without spills", "[topk][nvrtc][fp8]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines =
      "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 in=e4m3 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=4096  sk=131072 ratio=1 w=f32 in=e4m3 k=512 family=topk_fused\n";
  std::vector<KernelSpec> specs = sweep_specs(lines, dev);
  REQUIRE(specs.size() >= 2);
  for (const KernelSpec& s : specs) {
    INFO(s.variant_key());
    CHECK_THAT(render(s).text, Contains("kInputE4m3"));
    CHECK(s.dynamic_smem <= static_cast<uint32_t>(dev.max_smem_optin));
  }
  set_topk_fused_part(true);
  const std::vector<KernelSpec> part = sweep_specs(lines, dev);
  set_topk_fused_part(std::nullopt);
  specs.insert(specs.end(), part.begin(), part.end());
  check_compiles_without_spills(specs, "sm90_topk");
}

// The lse (kTopkLse): both protocols' kernels with the consumers' lane states, bf16 and fp32 W and
// FP8, long and short rows, the partitioned appends: no spills, within the shared memory.
TEST_CASE("topk fused: the lse sweep variants compile without spills", "[topk][nvrtc]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines =
      "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 lse=1 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=4096  sk=131072 ratio=1 w=f32 lse=1 k=512 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=16384 sk=4096   ratio=4 w=bf16 lse=1 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 in=e4m3 lse=1 k=2048 family=topk_fused\n";
  set_topk_lse_lanes(true);
  std::vector<KernelSpec> specs = sweep_specs(lines, dev);
  set_topk_fused_part(true);
  const std::vector<KernelSpec> part = sweep_specs(lines, dev);
  set_topk_fused_part(std::nullopt);
  set_topk_lse_lanes(std::nullopt);
  specs.insert(specs.end(), part.begin(), part.end());
  REQUIRE(specs.size() >= 8);
  for (const KernelSpec& s : specs) {
    INFO(s.variant_key());
    CHECK_THAT(render(s).text, Contains("kTopkLse = 1"));
    CHECK(s.dynamic_smem <= static_cast<uint32_t>(dev.max_smem_optin));
  }
  check_compiles_without_spills(specs, "sm90_topk");
}

// The partitioned appends (set_topk_fused_part): their own sweep variants (the key's part1; the
// default variants keep their keys and sources), compiled without spills, bf16 and fp32 W.
TEST_CASE("topk fused: the partitioned sweep variants compile without spills, keyed apart", "[topk][nvrtc]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines =
      "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 k=2048 family=topk_fused\n"
      "op=topk layout=bshd heads=64 sq=4096  sk=131072 ratio=1 w=f32 k=2048 family=topk_fused\n";
  set_topk_fused_redo_split(false);  // (the split redo's key token, tested below, out of the way)
  const std::vector<KernelSpec> plain = sweep_specs(lines, dev);
  set_topk_fused_part(true);
  const std::vector<KernelSpec> part = sweep_specs(lines, dev);
  set_topk_fused_part(std::nullopt);
  set_topk_fused_redo_split(std::nullopt);
  REQUIRE(part.size() == plain.size());
  REQUIRE(!part.empty());
  for (std::size_t i = 0; i < part.size(); ++i) {
    INFO(part[i].shape_key());
    CHECK(part[i].shape_key() == plain[i].shape_key() + ".part1");
    CHECK(plain[i].shape_key().find("part") == std::string::npos);
    CHECK_THAT(render(part[i]).text, Contains("kTopkPart = 1"));
    CHECK(render(plain[i]).text.find("kTopkPart") == std::string::npos);
  }
  check_compiles_without_spills(part, "sm90_topk");
}

// The split redo's and the redo pool's variant cases: bf16 and fp32 W, bf16 and E4M3 inputs.
constexpr const char* kRedoLines =
    "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 k=2048 family=topk_fused\n"
    "op=topk layout=bshd heads=64 sq=2048  sk=262144 ratio=1 w=f32 k=512 family=topk_fused\n"
    "op=topk layout=bshd heads=64 sq=8192  sk=16384  ratio=1 w=bf16 in=e4m3 k=2048 family=topk_fused\n";

// The split redo (kTopkFusedRedoSplit, on): BSHD sweeps of calls that take it key a variant of
// their own whose module adds the split redo's kernel (with it off, the variants keep their keys
// and sources of before); compiled without spills, bf16 and fp32 W, bf16 and E4M3 inputs. THD
// sweeps and calls with lse keep the whole-row redo (no split variant).
TEST_CASE("topk fused: the split redo's sweep variants compile without spills, keyed apart", "[topk][nvrtc]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines = kRedoLines;
  set_topk_fused_redo_split(false);
  const std::vector<KernelSpec> plain = sweep_specs(lines, dev);
  set_topk_fused_redo_split(std::nullopt);  // on by default
  set_topk_fused_redo_pool(false);           // (the slots' kernel: the pool is the default)
  const std::vector<KernelSpec> split = sweep_specs(lines, dev);
  set_topk_fused_redo_pool(std::nullopt);
  set_topk_lse_lanes(true);
  const std::vector<KernelSpec> lse =
      sweep_specs("op=topk layout=bshd heads=64 sq=8192 sk=16384 ratio=1 w=bf16 lse=1 k=2048 family=topk_fused\n", dev);
  set_topk_lse_lanes(std::nullopt);
  set_topk_fused_redo_split(std::nullopt);
  REQUIRE(split.size() == plain.size());
  REQUIRE(!split.empty());
  for (std::size_t i = 0; i < split.size(); ++i) {
    INFO(split[i].shape_key());
    CHECK(split[i].shape_key() == plain[i].shape_key() + ".rs1");
    const GeneratedSource g = render(split[i]), g0 = render(plain[i]);
    CHECK_THAT(g.text, Contains("kTopkRedoSplit = 1"));
    CHECK(std::count(g.kernels.begin(), g.kernels.end(), "dsa::sm90_topk_fused_redo_split<DsaKernelConfig, DsaLeanSchedule>") == 1);
    CHECK(g0.text.find("kTopkRedoSplit") == std::string::npos);
    CHECK(g0.kernels.size() == 2);
  }
  for (const KernelSpec& s : lse) CHECK(s.shape_key().find("rs1") == std::string::npos);
  check_compiles_without_spills(split, "sm90_topk");
}

// The redo pool (kTopkFusedRedoPool, the default since session 33): the split redo's variants with
// the pool's kernel in the split kernel's place (.rs2), the join under the rows' locks within the
// exact protocol's selector registers; without spills, bf16 and fp32 W, bf16 and E4M3 inputs.
TEST_CASE("topk fused: the redo pool's sweep variants compile without spills, keyed apart", "[topk][nvrtc]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines = kRedoLines;
  set_topk_fused_redo_pool(false);
  const std::vector<KernelSpec> split = sweep_specs(lines, dev);
  set_topk_fused_redo_pool(std::nullopt);
  const std::vector<KernelSpec> pool = sweep_specs(lines, dev);
  REQUIRE(pool.size() == split.size());
  REQUIRE(!pool.empty());
  for (std::size_t i = 0; i < pool.size(); ++i) {
    INFO(pool[i].shape_key());
    const std::string key = split[i].shape_key();
    REQUIRE(key.size() > 4);
    CHECK(key.substr(key.size() - 4) == ".rs1");
    CHECK(pool[i].shape_key() == key.substr(0, key.size() - 4) + ".rs2");
    const GeneratedSource g = render(pool[i]);
    CHECK_THAT(g.text, Contains("kTopkRedoSplit = 2"));
    CHECK(std::count(g.kernels.begin(), g.kernels.end(), "dsa::sm90_topk_fused_redo_pool<DsaKernelConfig, DsaLeanSchedule>") == 1);
    CHECK(std::count(g.kernels.begin(), g.kernels.end(), "dsa::sm90_topk_fused_redo_split<DsaKernelConfig, DsaLeanSchedule>") == 0);
    CHECK(g.kernels.size() == 3);
  }
  check_compiles_without_spills(pool, "sm90_topk");
}

// The split redo's arithmetic (topk_redo_split): chunks that together cover every KV tile, each at
// least 16 tiles, at most 16, whose rows (at most k entries each) fit the row's buffer when
// joined, or with the join that cuts (a row's list cut to k before a chunk that would not fit)
// as many as the row's tiles allow where the buffer holds 2k; none below 2 chunks; a chunk's
// buffer holds k, room for max(k, 1024) appends and a tile.
TEST_CASE("topk fused: the split redo's chunks and buffers", "[topk][planner]") {
  struct Row {
    int64_t k, s_k;
  };
  // (the redo pool joins as the join that cuts does: its parts)
  for (const int mode : {0, 1, 2}) {
    const bool cut = mode != 0;
    set_topk_fused_redo_join_cut(mode == 1);
    set_topk_fused_redo_pool(mode == 2);
    for (const Row r : {Row{2048, 262144}, Row{512, 262144}, Row{2048, 65536}, Row{512, 65536}, Row{2048, 16384},
                        Row{1, 4096}, Row{7, 3000}, Row{2048, 4096}, Row{64, 2048}}) {
      const int64_t ld = topk_fused_candidates(r.k, r.s_k);
      const TopkRedoSplit rs = topk_redo_split(r.k, ld, r.s_k);
      INFO("join cut " << (mode == 1) << " pool " << (mode == 2) << " k " << r.k << " S_k " << r.s_k << " ld " << ld << ": parts " << rs.parts << " chunk "
                       << rs.chunk << " part_ld " << rs.part_ld);
      const int64_t tiles = (r.s_k + 63) / 64;
      REQUIRE(rs.parts >= 2);
      CHECK(rs.parts <= kTopkRedoMaxParts);
      if (cut) {
        CHECK(2 * r.k <= ld);
        CHECK(rs.parts == std::min<int64_t>(kTopkRedoMaxParts, tiles / kTopkRedoMinChunk));
      } else {
        CHECK(int64_t(rs.parts) * r.k <= ld);
      }
      CHECK(int64_t(rs.parts) * rs.chunk >= tiles);
      CHECK(int64_t(rs.parts - 1) * rs.chunk < tiles);  // no chunk past the row
      CHECK(rs.chunk >= kTopkRedoMinChunk);
      CHECK(rs.part_ld == std::min<int64_t>((r.k + std::max<int64_t>(r.k, 1024) + 64 + 3) / 4 * 4, dsa::kLeanTopkMaxLd));
      CHECK(rs.part_ld % 4 == 0);
    }
    // k 2048 at S_k 262144: the row's buffer holds 7 chunks' k, with the join that cuts the 16
    // chunks' cap; k 512: the cap either way
    CHECK(topk_redo_split(2048, topk_fused_candidates(2048, 262144), 262144).parts == (cut ? 16 : 7));
    CHECK(topk_redo_split(512, topk_fused_candidates(512, 262144), 262144).parts == 16);
    // under 2 chunks: none (a row of 31 tiles; a buffer of under 2k)
    CHECK(topk_redo_split(64, 4096, 1984).parts == 0);
    CHECK(topk_redo_split(2048, 4095, 262144).parts == 0);
    CHECK(topk_redo_split(0, 4096, 262144).parts == 0);
  }
  set_topk_fused_redo_join_cut(std::nullopt);
  set_topk_fused_redo_pool(std::nullopt);
}

TEST_CASE("topk fused: the sweep's plan fits the device's shared memory", "[topk]") {
  // The selector epilogue's slots and rows beside lean's 5 KV stages; fp32 weights (a second
  // weight buffer) leave room for 4 stages only, and the plan gives one up (the same products).
  const DeviceInfo dev = DeviceInfo::h200();
  auto sweep_spec = [&](DType w) {
    Problem p = topk_problem(1, 8192, 16384, 2048);
    p.w_dtype = w;
    const std::vector<Problem> inner = topk_fused_family().inner_problems(p, dev);
    REQUIRE(!inner.empty());
    return make_plan(inner[0], dev, topk_fused_sweep_family()).spec;
  };
  const KernelSpec bf16 = sweep_spec(DType::bf16), f32 = sweep_spec(DType::f32);
  CHECK(bf16.dynamic_smem <= static_cast<uint32_t>(dev.max_smem_optin));
  CHECK(f32.dynamic_smem <= static_cast<uint32_t>(dev.max_smem_optin));
  CHECK_THAT(bf16.variant_key(), Contains(".s5"));
  CHECK_THAT(f32.variant_key(), Contains(".s4"));
  CHECK(bf16.dynamic_smem > static_cast<uint32_t>(dsa::kLeanTopkSweepSmemBytes));
}

namespace {

// Sample-first order of n KV tiles at stride S: a permutation of [0, n), the sample tiles
// (S/2 + S j) first and ascending, then the others ascending.
template <int S>
void check_tile_order(int32_t n) {
  INFO("stride " << S << " tiles " << n);
  const int32_t ns = dsa::lean_sample_tiles<S>(n);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int32_t last = -1;
  bool ok = true;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = dsa::lean_tile_at<S>(i, n);
    if (t < 0 || t >= n) {
      ok = false;
      break;
    }
    ++seen[static_cast<size_t>(t)];
    ok = ok && ((i < ns) == (t % S == S / 2));  // the sample tiles first, and only they
    ok = ok && (i == ns || t > last);            // ascending within each part
    last = t;
  }
  CHECK(ok);
  for (int32_t t = 0; ok && t < n; ++t) CHECK(seen[static_cast<size_t>(t)] == 1);
  // the lse replay's run-time form (sm90_topk_lse) walks the same order
  bool same = true;
  for (int32_t i = 0; i < n; ++i) same = same && dsa::lean_tile_at_rt(i, n, S) == dsa::lean_tile_at<S>(i, n);
  CHECK(same);
  int32_t want = 0;
  for (int32_t t = 0; t < n; ++t) want += t % S == S / 2 ? 1 : 0;
  CHECK(ns == want);
}

// The visible cells of a window [0, hi) in the sample tiles at stride S, against a count.
template <int S>
void check_sample_cells(int64_t hi) {
  int64_t want = 0;
  for (int64_t p = 0; p < hi; ++p) want += (p / dsa::kLeanTopkTileCols) % S == S / 2 ? 1 : 0;
  INFO("stride " << S << " hi " << hi);
  CHECK(static_cast<int64_t>(dsa::lean_topk_sample_cells<S>(hi)) == want);
}

}  // namespace

TEST_CASE("topk fused: the sweep's sample-first tile order and sample sizes", "[topk]") {
  for (int32_t n : {0, 1, 7, 8, 9, 15, 16, 17, 24, 25, 31, 32, 33, 100, 255, 256, 257, 1000, 1024, 2049}) {
    check_tile_order<16>(n);
    check_tile_order<32>(n);
    check_tile_order<64>(n);
    check_tile_order<128>(n);
    for (int32_t i = 0; i < n; ++i) CHECK(dsa::lean_tile_at<1>(i, n) == i);  // the scores kernels: in order
    for (int32_t i = 0; i < n; ++i) CHECK(dsa::lean_tile_at_rt(i, n, 1) == i);
  }
  // The lse's lane slots (sm90_topk_lse.cuh): slot (w, i) takes columns 64 kt + 16 w + i + 8 j,
  // so over a q-tile's tiles the 32 slots x 2 cover each of its 64 n columns exactly once.
  for (int32_t n : {1, 9, 40}) {
    std::vector<int> seen(static_cast<size_t>(64 * n), 0);
    for (int32_t it = 0; it < n; ++it)
      for (int w = 0; w < 4; ++w)
        for (int i = 0; i < 8; ++i)
          for (int j = 0; j < 2; ++j) ++seen[static_cast<size_t>(dsa::lean_tile_at_rt(it, n, 16) * 64 + 16 * w + i + 8 * j)];
    CHECK(std::count(seen.begin(), seen.end(), 1) == 64 * n);
  }
  for (int64_t hi = 0; hi < 5 * 64 * 16 + 70; hi += 13) check_sample_cells<16>(hi);
  for (int64_t hi : {int64_t(0), int64_t(511), int64_t(512), int64_t(513), int64_t(575), int64_t(576), int64_t(1024),
                     int64_t(1087), int64_t(1088), int64_t(16383), int64_t(16384), int64_t(65535), int64_t(65536),
                     int64_t(131071), int64_t(131072)}) {
    check_sample_cells<16>(hi);
    check_sample_cells<32>(hi);
    check_sample_cells<64>(hi);
    check_sample_cells<128>(hi);
  }
  // the stride: 16 up to S_k 16384, then a sample of about 1024 cells
  CHECK(dsa::lean_topk_sample_stride(1) == 16);
  CHECK(dsa::lean_topk_sample_stride(16384) == 16);
  CHECK(dsa::lean_topk_sample_stride(16385) == 32);
  CHECK(dsa::lean_topk_sample_stride(32768) == 32);
  CHECK(dsa::lean_topk_sample_stride(65536) == 64);
  CHECK(dsa::lean_topk_sample_stride(131072) == 128);
}

namespace {

// A THD top-k call over a packing (problems.hpp's PackedCall, its operands moved to addresses
// that no output overlaps), k, local or global indices, optionally with an lse.
Problem thd_topk(PackedCall& c, int k, bool lse = false, bool global = false) {
  c.q.data = fake(kQ);
  c.k.data = fake(kK);
  c.w.data = fake(kW);
  const int64_t tq = c.cuq.back();
  if (lse) c.opt.lse = TensorDesc::contiguous(fake(kLse), DType::f32, {tq});
  const TensorDesc ind = TensorDesc::contiguous(fake(kIdx), DType::i32, {tq, k});
  TopkOptions t;
  t.k = k;
  t.indices = global ? dsa_indexer::TopkIndices::global : dsa_indexer::TopkIndices::local;
  return validate_topk(c.q, c.k, c.w, ind, c.opt, t, nullptr);
}

// The visible cells of a window [lo, hi) in the sample tiles at stride s, against a count.
void check_sample_cells_in(int64_t lo, int64_t hi, int s) {
  int64_t want = 0;
  for (int64_t p = lo; p < hi; ++p) want += (p / dsa::kLeanTopkTileCols) % s == s / 2 ? 1 : 0;
  INFO("stride " << s << " window [" << lo << ", " << hi << ")");
  CHECK(static_cast<int64_t>(dsa::lean_topk_sample_cells_in(lo, hi, s)) == want);
}

}  // namespace

// THD (by name only: automatic THD calls keep the unfused path, measured slower in session 27):
// with the segment groups (topk_fused_thd_rows off; on, the row ranges below) the unfused path's
// blocks (segments grouped up to max_seqlen_k keys), each swept as a B 1 problem with the rows
// kernel's windows by the THD sweep kernel (lean's row-windows variant with the selection
// epilogue); lse calls, blocks under a wave of q-tiles and (topk_fused_ragged_thd off) blocks of
// a ragged end are refused.
TEST_CASE("topk fused: THD calls by name, blocks swept as row windows", "[topk][dispatch][thd]") {
  const DeviceInfo dev = DeviceInfo::h200();
  set_topk_fused_thd_rows(false);
  for (bool global : {false, true}) {
    INFO("global " << global);
    // blocks: rows [0, 3152) over keys [0, 6096) (two segments), rows [3152, 6152) over 8192
    PackedCall c({2048, 1104, 3000}, {4096, 2000, 8192});
    const Problem p = thd_topk(c, 512, false, global);
    CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
    CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, true), Contains("DSA_INDEXER_DISABLE_LEAN"));
    const Plan outer = make_plan(p, dev, topk_fused_family());
    CHECK(outer.spec.shape_key() == "thd");  // the rows kernel's THD windows
    CHECK_THAT(render(outer.spec).text, Contains("kLayout = dsa::kLayoutThdLocal"));
    const std::vector<Problem> inner = topk_fused_family().inner_problems(p, dev);
    REQUIRE(inner.size() == 2);
    CHECK(inner[0].s_q == 3152);
    CHECK(inner[0].s_k == 6096);
    CHECK(inner[1].s_q == 3000);
    CHECK(inner[1].s_k == 8192);
    for (const Problem& s : inner) {
      CHECK(s.op == Operation::topk_sweep);
      CHECK(s.has_windows);
      CHECK(s.batch == 1);
      CHECK(s.sweep.sample_stride == 16);
      CHECK(&choose_family(s, dev, KernelFamily::automatic, false) == &topk_fused_sweep_family());
      const Plan sp = make_plan(s, dev, topk_fused_sweep_family());
      const std::string key = sp.spec.shape_key();
      INFO(key);
      CHECK_THAT(key, Contains("thd_global"));
      CHECK_THAT(key, Contains("sq8"));
      CHECK_THAT(key, Contains("sk0"));
      CHECK_THAT(key, Contains("rw1"));
      CHECK(key.find(".ss") == std::string::npos);  // max_seqlen_k 8192: the stride THD variants default to
      CHECK(sp.num_tiles == s.s_q / 8);
      const GeneratedSource g = render(sp.spec);
      REQUIRE(g.kernels.size() == 2);
      CHECK(g.kernels[0] == "dsa::sm90_topk_fused_sweep_thd<DsaKernelConfig, dsa::kLeanTopkSampled>");
      CHECK(g.kernels[1] == "dsa::sm90_topk_fused_sweep_thd<DsaKernelConfig, dsa::kLeanTopkExact>");
      CHECK(g.text.find("DsaLeanSchedule") == std::string::npos);  // the schedule is a launch parameter
    }
    // one variant for both blocks (a THD variant carries one q-tile)
    CHECK(make_plan(inner[0], dev, topk_fused_sweep_family()).spec == make_plan(inner[1], dev, topk_fused_sweep_family()).spec);
    // the call's gate key names its blocks' lean gates (rows, saturation), so packings of other
    // blocks get verdicts of their own
    const std::string gk = topk_fused_family().gate_key(p, dev);
    CHECK_THAT(gk, Contains(".sq3152."));
    CHECK_THAT(gk, Contains(".sq3000."));
  }
  {  // lse: refused on THD calls, whatever the lane-order lse (THD's is the two-pass sum)
    PackedCall c({2048, 1104, 3000}, {4096, 2000, 8192});
    const Problem p = thd_topk(c, 512, /*lse=*/true);
    CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("family topk_fused: lse") && Contains("THD"));
    set_topk_lse_lanes(true);
    CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("family topk_fused: lse") && Contains("THD"));
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
    set_topk_lse_lanes(std::nullopt);
  }
  {  // a block of 600 rows (a segment whose keys and the next's pass max_seqlen_k): under a wave
    PackedCall c({600, 2000}, {600, 9000});
    const Problem p = thd_topk(c, 64);
    CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("grid saturation"));
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  }
  {  // T_q 3149: the last block's 1101 rows are no whole q-tiles (the row-windows gate), served
     // only with topk_fused_ragged_thd (on since session 27), under a gate key of its own
    PackedCall c({2048, 1101}, {4096, 8192});
    const Problem p = thd_topk(c, 64);
    set_topk_fused_ragged_thd(false);
    CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("a multiple of 8 (explicit windows)"));
    const std::string off = topk_fused_family().gate_key(p, dev);
    CHECK_THAT(off, Contains(".rg0"));
    set_topk_fused_ragged_thd(true);
    CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
    CHECK_THAT(topk_fused_family().gate_key(p, dev), Contains(".rg1"));
    const std::vector<Problem> inner = topk_fused_family().inner_problems(p, dev);
    REQUIRE(inner.size() == 2);
    CHECK(inner[1].s_q == 1101);  // the last block: no rows to pad with
    // the same variant as a block of whole q-tiles (a THD variant carries one q-tile)
    CHECK(make_plan(inner[0], dev, topk_fused_sweep_family()).spec == make_plan(inner[1], dev, topk_fused_sweep_family()).spec);
    CHECK(make_plan(inner[1], dev, topk_fused_sweep_family()).num_tiles == (1101 + 7) / 8);
    set_topk_fused_ragged_thd(std::nullopt);
    CHECK_THAT(topk_fused_family().gate_key(p, dev), Contains(".rg1"));  // the default
    // BSHD's blocks are causal (no explicit windows): no token
    CHECK(topk_fused_family().gate_key(topk_problem(1, 4096, 131072, 2048), dev).find(".rg") == std::string::npos);
  }
  {  // max_seqlen_k 131072: the call's sample stride (128) keys the variant; automatic: unfused
     // even where the unfused blocks would hold under half a wave (BSHD's policy)
    PackedCall c({2048, 1104}, {131072, 2000});
    const Problem p = thd_topk(c, 512);
    CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
    const std::vector<Problem> inner = topk_fused_family().inner_problems(p, dev);
    REQUIRE(inner.size() == 2);
    for (const Problem& s : inner) {
      CHECK(s.sweep.sample_stride == 128);
      const KernelSpec spec = make_plan(s, dev, topk_fused_sweep_family()).spec;
      INFO(spec.shape_key());
      CHECK_THAT(spec.shape_key(), Contains(".ss128"));
      CHECK_THAT(render(spec).text, Contains("kTopkSampleStride = 128"));
    }
    PackedCall one({4096}, {131072});
    const Problem q = thd_topk(one, 2048);
    CHECK(topk_unfused_short_blocks(q, dev));
    CHECK(&choose_family(q, dev, KernelFamily::automatic, false) == &topk_unfused_family());
  }
  // BSHD sweeps keep their keys (no sample stride token: their kSeqK gives it)
  for (const Problem& s : topk_fused_family().inner_problems(topk_problem(1, 4096, 131072, 2048), dev))
    CHECK(make_plan(s, dev, topk_fused_sweep_family()).spec.shape_key().find(".ss") == std::string::npos);
  set_topk_fused_thd_rows(std::nullopt);
}

TEST_CASE("topk fused: a THD window's sample cells", "[topk]") {
  for (int s : {16, 32, 128})
    for (int64_t lo : {int64_t(0), int64_t(1), int64_t(63), int64_t(64), int64_t(500), int64_t(511), int64_t(512),
                       int64_t(575), int64_t(576), int64_t(1000), int64_t(4095)})
      for (int64_t len : {int64_t(0), int64_t(1), int64_t(37), int64_t(64), int64_t(100), int64_t(1024), int64_t(3000),
                          int64_t(9000), int64_t(20000)})
        check_sample_cells_in(lo, lo + len, s);
  // a window of at most 1024 s keys has at most 1024 sample cells wherever it starts (the cut
  // holds a row's sample in 32 keys per lane)
  for (int64_t lo = 0; lo < 16 * 64 * 2; lo += 7) CHECK(dsa::lean_topk_sample_cells_in(lo, lo + 16 * 1024, 16) <= 1024u);
}

TEST_CASE("topk fused: the THD sweep variants compile without spills", "[topk][nvrtc][thd]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const char* lines =
      "op=topk layout=thd_local heads=64 sq=8192 sk=131072 ratio=1 w=bf16 k=2048 family=topk_fused\n"
      "op=topk layout=thd_local heads=64 sq=8192 sk=8192   ratio=1 w=f32 k=2048 scale=both family=topk_fused\n"
      "op=topk layout=thd_local heads=64 sq=8192 sk=16384  ratio=1 w=bf16 in=e4m3 k=2048 family=topk_fused\n";
  std::vector<KernelSpec> specs = sweep_specs(lines, dev);
  set_topk_fused_part(true);
  const std::vector<KernelSpec> part = sweep_specs(lines, dev);
  set_topk_fused_part(std::nullopt);
  specs.insert(specs.end(), part.begin(), part.end());
  REQUIRE(specs.size() == 8);  // bf16 (ss128), fp32 (both scales), FP8 (bf16 W); each with and without part1
  int strided = 0;
  for (const KernelSpec& s : specs) {
    INFO(s.variant_key());
    const GeneratedSource g = render(s);
    REQUIRE(g.kernels.size() == 2);
    CHECK_THAT(g.kernels[0], Contains("sm90_topk_fused_sweep_thd"));
    CHECK_THAT(s.shape_key(), Contains("rw1"));
    CHECK(s.dynamic_smem <= static_cast<uint32_t>(dev.max_smem_optin));
    strided += s.shape_key().find(".ss128") != std::string::npos ? 1 : 0;
  }
  CHECK(strided == 2);  // the bf16 line's, with and without part1
  check_compiles_without_spills(specs, "sm90_topk");
}

// The THD packings of the GPU cases (tests/gpu/test_topk_fused.cpp, [topk_fused_thd]) pass the
// fused path's gate on a 132-SM device (blocks of whole q-tiles, each at least a wave), so that
// they run the sweep and not the refusal.
TEST_CASE("topk fused: the GPU cases' THD packings take the fused path by name", "[topk][dispatch][thd]") {
  const DeviceInfo dev = DeviceInfo::h200();
  struct Packing {
    std::vector<int64_t> sq, sk;
    int64_t ratio;
    size_t sweeps;  // distinct block shapes
  };
  const Packing packings[] = {{{2045, 1035, 3080}, {4096, 2000, 8192}, 1, 2},
                              {{1203, 901, 1504}, {1000, 2000, 3500}, 2, 2},
                              {{1101, 1203, 2304}, {3000, 2500, 9000}, 1, 2},
                              {{1203, 1101, 1504}, {3000, 20000, 6000}, 1, 3},
                              {{603, 461, 1056}, {500, 700, 1200}, 1, 2}};
  // every protocol check_fused runs: the default margin, the redo's -4 (at small k no cut: every
  // cell a candidate, the fewest rows per block) and exact; and the tiny buffer (k + 64)
  const std::optional<float> margins[] = {std::nullopt, -4.0f, std::nanf("")};
  // row ranges (the default) and segment groups (sweeps: the distinct block shapes) both serve it
  auto check_both_blockings = [&](const Problem& p, size_t sweeps) {
    CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    set_topk_fused_thd_rows(false);
    CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
    CHECK(topk_fused_family().inner_problems(p, dev).size() == sweeps);
    set_topk_fused_thd_rows(std::nullopt);
  };
  for (const Packing& pk : packings)
    for (int k : {1, 7, 64, 512, 2048})
      for (const std::optional<float>& margin : margins)
        for (int64_t entries : {int64_t(0), int64_t(64)}) {
          set_topk_fused_margin(margin);
          set_topk_fused_candidates(entries > 0 ? k + entries : 0);
          PackedCall c(pk.sq, pk.sk);
          c.opt.ratio = pk.ratio;
          const Problem p = thd_topk(c, k);
          INFO("T_q " << p.t_q << " max_seqlen_k " << p.s_k << " k " << k << " margin " << (margin ? std::to_string(*margin) : std::string("default")) << " entries "
                      << entries);
          check_both_blockings(p, pk.sweeps);
        }
  set_topk_fused_margin(std::nullopt);
  set_topk_fused_candidates(0);
  // the ragged last blocks ("a ragged last block", with topk_fused_ragged_thd): 1101 and 1061 rows
  set_topk_fused_ragged_thd(true);
  const Packing ragged[] = {{{2045, 1101}, {4096, 4096}, 1, 2}, {{1203, 1101, 1061}, {3000, 20000, 1500}, 1, 3}};
  for (const Packing& pk : ragged)
    for (int k : {1, 64, 2048})
      for (const std::optional<float>& margin : margins) {
        set_topk_fused_margin(margin);
        PackedCall c(pk.sq, pk.sk);
        c.opt.ratio = pk.ratio;
        const Problem p = thd_topk(c, k);
        INFO("ragged: T_q " << p.t_q << " k " << k << " margin " << (margin ? std::to_string(*margin) : std::string("default")));
        check_both_blockings(p, pk.sweeps);
      }
  set_topk_fused_margin(std::nullopt);
  set_topk_fused_ragged_thd(std::nullopt);
}

// Row-range THD blocks (topk_fused_thd_rows, on since session 27): the blocking's even split
// of the packed rows whatever the segments, so the packings whose segment groups leave a sliver
// under a wave (the redo's margin at small k: every cell a candidate, 4064 rows of 8192 keys in
// 256 MiB) are served; each block spans the keys of the segments it touches (past max_seqlen_k),
// and every block selects with the call's block size.
TEST_CASE("topk fused: THD row-range blocks serve the packings segment groups refuse", "[topk][dispatch][thd]") {
  const DeviceInfo dev = DeviceInfo::h200();
  const std::optional<float> margins[] = {std::nullopt, -4.0f, std::nanf("")};
  struct Packing {
    std::vector<int64_t> sq, sk;
  };
  // the sliver of session 26's GPU run; the THD bench row (T_q 16384); a ragged end (with the flag)
  const Packing packings[] = {{{2045, 1107, 3000}, {4096, 2000, 8192}}, {{5462, 8198, 2724}, {5462, 8198, 2724}}, {{2045, 1107, 3001}, {4096, 2000, 8192}}};
  for (const Packing& pk : packings)
    for (int k : {1, 64, 2048})
      for (const std::optional<float>& margin : margins) {
        set_topk_fused_margin(margin);
        PackedCall c(pk.sq, pk.sk);
        c.opt.ratio = 1;
        const Problem p = thd_topk(c, k);
        INFO("T_q " << p.t_q << " k " << k << " margin " << (margin ? std::to_string(*margin) : std::string("default")));
        const bool ragged = p.t_q % 8 != 0;
        set_topk_fused_thd_rows(true);
        if (ragged) {
          set_topk_fused_ragged_thd(false);
          CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("a multiple of 8"));
          set_topk_fused_ragged_thd(true);
        }
        CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
        CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &topk_unfused_family());
        CHECK_THAT(topk_fused_family().gate_key(p, dev), Contains(".tr1"));
        const TopkBlocking bl = topk_blocking(p, dev, kTopkFusedBudget, uint64_t(topk_fused_candidates(k, p.s_k)) * 8 + 5);
        int64_t next = 0;
        for_each_topk_row_block(p, bl, [&](const TopkBlock& b) {
          CHECK(b.row0 == next);
          next += b.n;
          CHECK(b.n >= 1056);  // a q-tile per SM: the even split leaves no sliver
          // its keys start at its first row's segment (no empty segments here)
          const auto seg = std::upper_bound(p.cu_q_host.begin(), p.cu_q_host.end(), static_cast<int32_t>(b.row0)) - p.cu_q_host.begin() - 1;
          CHECK(b.k_base == p.cu_k_host[static_cast<size_t>(seg)]);
          CHECK(topk_select_width(p, b) == p.s_k);
        });
        CHECK(next == p.t_q);
        set_topk_fused_thd_rows(std::nullopt);
        set_topk_fused_ragged_thd(std::nullopt);
      }
  set_topk_fused_margin(std::nullopt);
  // off (segment groups): the first packing's sliver is refused under the redo's margin at k 1;
  // on (the default since session 27) it is served
  set_topk_fused_margin(-4.0f);
  PackedCall c({2045, 1107, 3000}, {4096, 2000, 8192});
  c.opt.ratio = 1;
  const Problem p = thd_topk(c, 1);
  set_topk_fused_thd_rows(false);
  CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::topk_fused, false), Contains("grid saturation"));
  CHECK_THAT(topk_fused_family().gate_key(p, dev), Contains(".tr0"));
  set_topk_fused_thd_rows(std::nullopt);
  CHECK(&choose_family(p, dev, KernelFamily::topk_fused, false) == &topk_fused_family());
  CHECK_THAT(topk_fused_family().gate_key(p, dev), Contains(".tr1"));
  set_topk_fused_margin(std::nullopt);
}
