#pragma once
// Calls of every family and layout planned the way indexer_forward plans them (validate, the
// dispatcher, the family's plan), for the tests of what a process records about its kernels.
#include <string>
#include <vector>

#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "problems.hpp"
#include "ops/topk.hpp"
#include "ops/validate.hpp"

namespace dsa_test {

struct CallCase {
  std::string what;
  dsa_indexer::detail::Problem p;
  dsa_indexer::detail::DeviceInfo dev;
  dsa_indexer::detail::KernelSpec spec;
};

// `hatch`: the fallback of async mode (the dispatcher with fast paths off).
inline CallCase call_case(std::string what, const Call& c, dsa_indexer::KernelFamily family = dsa_indexer::KernelFamily::automatic,
                          bool hatch = false, dsa_indexer::detail::DeviceInfo dev = dsa_indexer::detail::DeviceInfo::h200()) {
  using namespace dsa_indexer::detail;
  CallCase s{std::move(what), validate(c.q, c.k, c.w, c.out, c.opt, nullptr), dev, {}};
  s.spec = make_plan(s.p, dev, choose_family(s.p, dev, family, hatch)).spec;
  return s;
}

// Lean (both W dtypes, both scale variants, saturated through B, on a device with fewer SMs
// than the planning profile), generic (BSHD, THD local and global, H 16/32/64, LSE, windows,
// the fallback of a lean call), reference (BSHD, THD, LSE).
inline std::vector<CallCase> every_family_calls() {
  using dsa_indexer::KernelFamily;
  std::vector<CallCase> v;
  Call headline = bshd_call(1, 8192, 4096);
  headline.opt.sm_scale = 0.125f;  // bshd_call's default is 1, the other scale variant
  v.push_back(call_case("lean bshd 8192x4096", headline));
  Call one = bshd_call(1, 8192, 4096);
  one.opt.sm_scale = 1.0f;
  v.push_back(call_case("lean scale 1", one));
  Call quarter = bshd_call(1, 2048, 1024);
  quarter.opt.sm_scale = 0.125f;
  v.push_back(call_case("lean 2048x1024 scale 0.125", quarter));
  v.push_back(call_case("lean f32 W", bshd_call(1, 4096, 2048, 64, DType::f32)));
  v.push_back(call_case("lean saturated by B 2 only", bshd_call(2, 1024, 512)));
  dsa_indexer::detail::DeviceInfo small = dsa_indexer::detail::DeviceInfo::h200();
  small.sm_count = 114;
  small.name = "114-SM Hopper";
  v.push_back(call_case("lean on a 114-SM device, unsaturated on the profile", bshd_call(1, 1024, 512), KernelFamily::automatic,
                        false, small));
  v.push_back(call_case("lean by name", bshd_call(1, 8192, 4096), KernelFamily::lean));
  v.push_back(call_case("generic: the fallback of a lean call", bshd_call(1, 8192, 4096), KernelFamily::automatic, true));
  v.push_back(call_case("generic bshd H32", bshd_call(2, 300, 77, 32)));
  v.push_back(call_case("generic bshd H16 f32 W", bshd_call(1, 64, 64, 16, DType::f32)));
  Call lse = bshd_call(2, 256, 128);
  lse.opt.lse = TensorDesc::contiguous(fake(0x700000), DType::f32, {2, 256});
  v.push_back(call_case("generic bshd with lse", lse));
  Call win = bshd_call(1, 2048, 1024);
  win.opt.ks = TensorDesc::contiguous(fake(0x800000), DType::i32, {1, 2048});
  win.opt.ke = TensorDesc::contiguous(fake(0x900000), DType::i32, {1, 2048});
  v.push_back(call_case("generic bshd with explicit windows", win));
  v.push_back(call_case("generic bshd unsaturated H64", bshd_call(1, 512, 512)));
  ThdCall local;
  make_thd(local, 32);
  v.push_back(call_case("generic thd local H32", local));
  ThdCall global;
  make_thd(global, 64, true);
  v.push_back(call_case("generic thd global H64", global));
  // lean THD: the key holds one q-tile as T_q, never T_q itself, T_k or the boundaries
  PackedCall packed({3000, 1, 0, 5190}, {1500, 1, 7, 2595});
  v.push_back(call_case("lean thd local, 4 segments", packed));
  PackedCall packed_global({4000, 4189}, {2000, 2094}, true);
  packed_global.opt.sm_scale = 1.0f;
  v.push_back(call_case("lean thd global scale 1", packed_global));
  v.push_back(call_case("generic: the fallback of a lean thd call", packed, KernelFamily::automatic, true));
  v.push_back(call_case("reference bshd", bshd_call(1, 64, 64), KernelFamily::reference));
  ThdCall ref;
  make_thd(ref, 16, true);
  ref.opt.lse = TensorDesc::contiguous(fake(0x700000), DType::f32, {12});
  v.push_back(call_case("reference thd global with lse", ref, KernelFamily::reference));
  return v;
}

// A top-k call over fake addresses 2^40 bytes apart (outputs may overlap no input), planned the
// way indexer_topk plans it: validate_topk, the dispatcher, the family's plan.
struct TopkCallCase {
  std::string what;
  dsa_indexer::detail::Problem p;
  dsa_indexer::detail::DeviceInfo dev;
  dsa_indexer::detail::KernelSpec spec;
};

inline TopkCallCase topk_case(std::string what, Call& c, int k,
                              dsa_indexer::detail::DeviceInfo dev = dsa_indexer::detail::DeviceInfo::h200()) {
  using namespace dsa_indexer::detail;
  using dsa_indexer::DType;
  c.q.data = fake(uintptr_t(1) << 40);
  c.k.data = fake(uintptr_t(2) << 40);
  c.w.data = fake(uintptr_t(3) << 40);
  const bool thd = c.q.rank == 3;
  const int64_t rows = thd ? c.q.shape[0] : c.q.shape[1];
  const auto indices = thd ? TensorDesc::contiguous(fake(uintptr_t(4) << 40), DType::i32, {rows, k})
                           : TensorDesc::contiguous(fake(uintptr_t(4) << 40), DType::i32, {c.q.shape[0], rows, k});
  dsa_indexer::TopkOptions t;
  t.k = k;
  TopkCallCase tc{std::move(what), validate_topk(c.q, c.k, c.w, indices, c.opt, t, nullptr), dev, {}};
  tc.spec = make_plan(tc.p, dev, choose_family(tc.p, dev, dsa_indexer::KernelFamily::automatic, false)).spec;
  return tc;
}

}  // namespace dsa_test
