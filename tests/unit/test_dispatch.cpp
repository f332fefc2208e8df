#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dsa_indexer/errors.hpp"
#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "problems.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "ops/validate.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::KernelFamily;
using Catch::Contains;

namespace {

// The headline shape: saturates 132 SMs with B 1 (1024 q-tiles).
Call lean_call(int64_t B = 1, int64_t sq = 8192, int64_t sk = 4096, int64_t H = 64) { return bshd_call(B, sq, sk, H); }
Problem prob(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }
const Family& pick(const Call& c, KernelFamily f = KernelFamily::automatic, bool hatch = false,
                   const DeviceInfo& dev = DeviceInfo::h200()) {
  return choose_family(prob(c), dev, f, hatch);
}
std::string lean_error(const Call& c, bool hatch = false, const DeviceInfo& dev = DeviceInfo::h200()) {
  try {
    pick(c, KernelFamily::lean, hatch, dev);
  } catch (const dsa_indexer::UnsupportedConfig& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("dispatch: THD calls that pass the lean gates go lean, in both column modes", "[dispatch][thd]") {
  // 3 ragged segments of 8190 packed tokens (1024 q-tiles, the last one short)
  PackedCall t({4000, 1, 4189}, {2000, 1, 2094});
  CHECK(&pick(t) == &lean_family());
  PackedCall g({4000, 1, 4189}, {2000, 1, 2094}, true);
  CHECK(&pick(g) == &lean_family());
  CHECK(&pick(t, KernelFamily::generic) == &generic_family());
  CHECK(&pick(t, KernelFamily::automatic, true) == &generic_family());  // the escape hatch
  // too few q-tiles to fill the device
  PackedCall small({500, 300}, {250, 150});
  CHECK(&pick(small) == &generic_family());
  CHECK_THAT(lean_error(small), Contains("grid saturation (q-tiles of T_q)") && Contains("got 100"));
  // H 32 and 16 go lean (q-tiles of 16 and 32 tokens), H 8 does not; LSE goes lean (session 11:
  // its lse in generic's order)
  PackedCall h32({4096, 4096}, {2048, 2048}, false, 32);
  CHECK(lean_error(h32) == "accepted");
  CHECK(&pick(h32) == &lean_family());
  PackedCall h16({4096, 4096}, {2048, 2048}, false, 16);
  CHECK(&pick(h16) == &lean_family());
  PackedCall h8({4096, 4096}, {2048, 2048}, false, 8);
  CHECK_THAT(lean_error(h8), Contains("heads H"));
  PackedCall lse({4096, 4096}, {2048, 2048});
  lse.opt.lse = TensorDesc::contiguous(fake(0x800000), DType::f32, {8192});
  CHECK(lean_error(lse) == "accepted");
  CHECK(&pick(lse) == &lean_family());
  // the planner needs the host cu_seqlens (validate always has them: mirrors or one read)
  Problem p = prob(t);
  CHECK(lean_family().check(p, DeviceInfo::h200()).passed());
  p.cu_q_host.clear();
  CHECK(std::string(lean_family().check(p, DeviceInfo::h200()).failed) == "host cu_seqlens");
}

TEST_CASE("dispatch: the lean THD key ignores T_q, T_k and the segment boundaries", "[dispatch][thd]") {
  std::mt19937 rng(11);
  const KernelSpec first = make_plan(prob(PackedCall({8192}, {4096})), DeviceInfo::h200(), lean_family()).spec;
  CHECK(first.shape_key() == "thd_local.sq8.sk0.wbf16.scale1.s5");
  for (int i = 0; i < 20; ++i) {
    // a random packing of 8185..8192 tokens into 1..9 segments (empty and one-token ones too)
    const int n = 1 + static_cast<int>(rng() % 9);
    const int64_t tq = 8185 + static_cast<int64_t>(rng() % 8);
    std::vector<int64_t> sq(static_cast<std::size_t>(n)), sk(static_cast<std::size_t>(n));
    int64_t left = tq;
    for (int s = 0; s < n; ++s) {
      sq[static_cast<std::size_t>(s)] = s == n - 1 ? left : std::min<int64_t>(left, rng() % 3 == 0 ? rng() % 2 : rng() % 4000);
      left -= sq[static_cast<std::size_t>(s)];
      sk[static_cast<std::size_t>(s)] = sq[static_cast<std::size_t>(s)] / (1 + rng() % 4);
    }
    PackedCall c(sq, sk);
    INFO("packing " << i);
    const Plan plan = make_plan(prob(c), DeviceInfo::h200(), lean_family());
    CHECK(plan.spec == first);
    CHECK(plan.num_tiles == 1024);
    CHECK(plan.schedule != nullptr);
  }
  // T_q is not in the key (the variant carries one q-tile; T_q rounded up to it counts the items)
  const Plan other = make_plan(prob(PackedCall({1500, 37, 2000}, {700, 10, 900})), DeviceInfo::h200(), lean_family());
  CHECK(other.spec == first);
  CHECK(other.num_tiles == (3537 + 7) / 8);
  // what the key does hold: the columns, W, the scale variant
  CHECK(make_plan(prob(PackedCall({8193}, {4096})), DeviceInfo::h200(), lean_family()).spec.shape_key() ==
        "thd_local.sq8.sk0.wbf16.scale1.s5");
  CHECK(make_plan(prob(PackedCall({8192}, {4096}, true)), DeviceInfo::h200(), lean_family()).spec.shape_key() ==
        "thd_global.sq8.sk0.wbf16.scale1.s5");
}

TEST_CASE("dispatch: automatic goes lean where every gate holds, else generic", "[dispatch]") {
  CHECK(&pick(lean_call()) == &lean_family());
  CHECK(&pick(lean_call(4)) == &lean_family());
  Call f32 = lean_call();
  f32.w = TensorDesc::contiguous(fake(0x300000), DType::f32, {1, 8192, 64});
  CHECK(&pick(f32) == &lean_family());
  CHECK(&pick(lean_call(1, 8192, 4096, 32)) == &lean_family());
  CHECK(&pick(lean_call(), KernelFamily::generic) == &generic_family());
  CHECK(&pick(lean_call(), KernelFamily::reference) == &reference_family());
  CHECK(&pick(lean_call(), KernelFamily::lean) == &lean_family());
  // offsets are served by lean; ragged S_k too
  Call off = lean_call(1, 8192, 999);
  off.opt.q_causal_offsets = TensorDesc::contiguous(fake(0x700000), DType::i32, {1});
  CHECK(&pick(off) == &lean_family());
}

TEST_CASE("dispatch: each lean gate rejects exactly its own cause", "[dispatch]") {
  // A forced lean call names the failed gate; the automatic call falls back to generic.
  struct Case {
    const char* name;
    Call call;
    const char* gate;
  };
  std::vector<Case> cases;
  {
    Call c = lean_call();
    c.w.data = fake(0x300008);  // 8-byte aligned only
    cases.push_back({"misaligned w", c, "operand alignment"});
  }
  {
    Call c = lean_call();
    c.out.data = fake(0x400004);
    cases.push_back({"misaligned scores", c, "operand alignment"});
  }
  {
    // (B 1 explicit windows go lean, as one packed sequence: test_window_start.cpp)
    Call c = lean_call(2);
    c.opt.ks = TensorDesc::contiguous(fake(0x800000), DType::i32, {2, 8192});
    c.opt.ke = TensorDesc::contiguous(fake(0x900000), DType::i32, {2, 8192});
    cases.push_back({"explicit windows, B 2", c, "explicit windows"});
  }
  cases.push_back({"S_q not a multiple of 8", lean_call(1, 8196, 4096), "S_q"});
  {
    Call c = lean_call();
    c.out = TensorDesc{fake(0x400000), DType::f32, 3, {1, 8192, 4096}, {8192 * 4100, 4100, 1}, 0};
    cases.push_back({"strided scores", c, "operand strides"});
  }
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string e = lean_error(c.call);
    CHECK_THAT(e, Contains("family lean: ") && Contains(c.gate));
    for (const auto& other : cases)
      if (std::string(other.gate) != c.gate) CHECK_THAT(e, !Contains(std::string("lean: ") + other.gate));
    CHECK(&pick(c.call) == &generic_family());
  }
  // the saturation verdict reads the device's SM count: 1024 q-tiles saturate 132 SMs, not
  // 2048; below it BSHD calls take the split variant (lean_split.cpp's tests)
  DeviceInfo big{0, 2048, 9, 0, 232448, "fake 2048-SM Hopper"};
  CHECK(lean_error(lean_call(), false, big) == "accepted");
  CHECK(&pick(lean_call(), KernelFamily::automatic, false, big) == &lean_family());
  CHECK(&pick(lean_call(2), KernelFamily::automatic, false, big) == &lean_family());
  CHECK(lean_error(lean_call(1, 1024, 512)) == "accepted");
  // BSHD H 32 and 16: lean (q-tiles of 16 and 32 tokens), named or automatic
  for (int64_t h : {32, 16}) {
    CHECK(lean_error(lean_call(1, 8192, 4096, h)) == "accepted");
    CHECK(&pick(lean_call(1, 8192, 4096, h)) == &lean_family());
  }
  CHECK_THAT(lean_error(lean_call(1, 8200, 4096, 32)), Contains("S_q") && Contains("a multiple of 16"));
  CHECK_THAT(lean_error(lean_call(1, 8208, 4096, 16)), Contains("S_q") && Contains("a multiple of 32"));
  CHECK(&pick(lean_call(1, 1024, 512)) == &lean_family());
  DeviceInfo h20{0, 78, 9, 0, 232448, "fake 78-SM Hopper"};
  CHECK(&pick(lean_call(1, 1024, 512), KernelFamily::automatic, false, h20) == &lean_family());
  // a device that is not sm_90 fails the first gate
  DeviceInfo sm90a_like{0, 132, 9, 1, 232448, "fake 9.1"};
  CHECK_THAT(lean_error(lean_call(), false, sm90a_like), Contains("compute capability"));
}

TEST_CASE("dispatch: the escape hatch forces generic, and a forced lean call says why", "[dispatch]") {
  CHECK(&pick(lean_call(), KernelFamily::automatic, true) == &generic_family());
  CHECK_THAT(lean_error(lean_call(), true), Contains("DSA_INDEXER_DISABLE_LEAN"));
  CHECK(&pick(lean_call(), KernelFamily::generic, true) == &generic_family());
}

TEST_CASE("dispatch: verdicts are cached by what decides them, never by B or sm_scale", "[dispatch]") {
  const DeviceInfo dev{5, 132, 9, 0, 232448, "fake device 5"};  // a device no other test uses
  const DispatchStats s0 = dispatch_stats();
  Call a = lean_call(1, 4096, 2048);
  pick(a, KernelFamily::automatic, false, dev);
  const DispatchStats s1 = dispatch_stats();
  CHECK(s1.verdict_misses == s0.verdict_misses + 1);
  for (int64_t B : {2, 3, 7}) {
    Call b = lean_call(B, 4096, 2048);
    b.opt.sm_scale = 0.25f * static_cast<float>(B);
    b.opt.ratio = B;
    CHECK(&pick(b, KernelFamily::automatic, false, dev) == &lean_family());
  }
  const DispatchStats s2 = dispatch_stats();
  CHECK(s2.verdict_misses == s1.verdict_misses);  // same verdict key: hits only
  CHECK(s2.verdict_hits == s1.verdict_hits + 3);
  // what decides it does change the key: S_q, the saturation verdict, alignment, the device
  pick(lean_call(1, 2048, 2048), KernelFamily::automatic, false, dev);
  Call mis = lean_call(1, 4096, 2048);
  mis.k.data = fake(0x200010);
  mis.w.data = fake(0x300008);
  pick(mis, KernelFamily::automatic, false, dev);
  DeviceInfo dev6 = dev;
  dev6.ordinal = 6;
  pick(a, KernelFamily::automatic, false, dev6);
  CHECK(dispatch_stats().verdict_misses == s2.verdict_misses + 3);
}

TEST_CASE("dispatch: every family is in the registry under its own id and name", "[dispatch]") {
  std::set<int> ids;
  std::set<std::string> names;
  for (const Family* f : families()) {
    CHECK(ids.insert(static_cast<int>(f->id())).second);
    CHECK(names.insert(f->option()).second);
    CHECK(&family_for(f->id()) == f);
    CHECK(family_by_option(f->option()) == f);
    // one stem per family: sm90_indexer_<name> for the scores families, sm90_<name> otherwise
    const std::string stem = f->operation() == Operation::scores ? std::string("sm90_indexer_") + f->option()
                                                                 : std::string("sm90_") + f->option();
    CHECK(std::string(f->name()) == stem);
    CHECK(f->params().size() <= static_cast<size_t>(kMaxSpecParams));
  }
  CHECK(family_by_option("fastest") == nullptr);
  CHECK_THROWS_AS(family_for(KernelFamily::automatic), dsa_indexer::InvalidArgument);
  CHECK_THROWS_AS(family_for(static_cast<KernelFamily>(9)), dsa_indexer::InvalidArgument);
  CHECK(family_options() == "reference (2), generic (1), lean (3), topk_unfused (4), topk_fused (5) or topk_fused_sweep (6)");
}
