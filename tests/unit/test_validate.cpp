#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dsa_indexer/errors.hpp"
#include "problems.hpp"
#include "ops/validate.hpp"
#include "dispatch/family.hpp"
#include "dispatch/planner.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "jit/codegen.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;
using dsa_indexer::InvalidArgument;
using dsa_indexer::UnsupportedConfig;
using Catch::Contains;

namespace {
Problem run(const Call& c) { return validate(c.q, c.k, c.w, c.out, c.opt, nullptr); }
// The public entry must reject before touching the driver (this machine has none).
void public_rejects(const Call& c, const std::string& needle) {
  CHECK_THROWS_AS(dsa_indexer::indexer_forward(c.q, c.k, c.w, c.out, c.opt, nullptr), InvalidArgument);
  CHECK_THROWS_WITH(dsa_indexer::indexer_forward(c.q, c.k, c.w, c.out, c.opt, nullptr), Contains(needle));
}
}  // namespace

TEST_CASE("validate: a well-formed BSHD call", "[validate]") {
  Call c = bshd_call(2, 256, 128, 64);
  Problem p = run(c);
  CHECK(p.layout == Layout::bshd);
  CHECK(p.batch == 2);
  CHECK(p.s_q == 256);
  CHECK(p.s_k == 128);
  CHECK(p.rows == 512);
  CHECK(p.out_cols == 128);
  CHECK(p.heads == 64);
  CHECK(p.q_stride[0] == 256 * 64 * 128);
  CHECK(p.q_stride[1] == 64 * 128);
  CHECK(p.q_stride[2] == 128);
  CHECK(p.out_stride[1] == 128);
}

TEST_CASE("validate: a well-formed THD call with host mirrors", "[validate]") {
  ThdCall c;
  make_thd(c);
  Problem p = run(c);
  CHECK(p.layout == Layout::thd_local);
  CHECK(p.batch == 3);
  CHECK(p.t_q == 12);
  CHECK(p.t_k == 16);
  CHECK(p.out_cols == 7);
  ThdCall g;
  make_thd(g, 32, true);
  CHECK(run(g).out_cols == 16);
}

TEST_CASE("validate: rank", "[validate]") {
  Call c = bshd_call();
  c.q.rank = 3;
  CHECK_THROWS_WITH(run(c), Contains("q.rank") && Contains("expected 4") && Contains("got 3"));
  public_rejects(c, "q.rank");
  Call d = bshd_call();
  d.w.rank = 2;
  CHECK_THROWS_WITH(run(d), Contains("w.rank"));
}

TEST_CASE("validate: shapes", "[validate]") {
  Call c = bshd_call();
  c.k.shape[0] = 3;
  CHECK_THROWS_WITH(run(c), Contains("k.shape[0] (B, as q)") && Contains("expected 2") && Contains("got 3"));
  Call d = bshd_call();
  d.w.shape[2] = 32;
  CHECK_THROWS_WITH(run(d), Contains("w.shape[2] (H)") && Contains("expected 64") && Contains("got 32"));
  Call e = bshd_call();
  e.q.shape[3] = 64;
  CHECK_THROWS_AS(run(e), UnsupportedConfig);
  CHECK_THROWS_WITH(run(e), Contains("head dim D") && Contains("expected 128") && Contains("got 64"));
  Call f = bshd_call();
  f.q = TensorDesc::contiguous(fake(0x100000), DType::bf16, {2, 256, 8, 128});
  f.w = TensorDesc::contiguous(fake(0x300000), DType::bf16, {2, 256, 8});
  CHECK_THROWS_AS(run(f), UnsupportedConfig);
  CHECK_THROWS_WITH(run(f), Contains("heads H") && Contains("16, 32 or 64") && Contains("got 8"));
  Call g = bshd_call();
  g.k = TensorDesc::contiguous(fake(0x200000), DType::bf16, {2, 128, 2, 128});
  CHECK_THROWS_WITH(run(g), Contains("KV heads") && Contains("MQA"));
  Call h = bshd_call(1, 0, 16);
  CHECK_THROWS_WITH(run(h), Contains("S_q") && Contains(">= 1"));
}

TEST_CASE("validate: dtypes", "[validate]") {
  Call c = bshd_call();
  c.q.dtype = DType::f16;
  CHECK_THROWS_WITH(run(c), Contains("q.dtype") && Contains("expected bf16") && Contains("got f16"));
  public_rejects(c, "q.dtype");
  Call d = bshd_call();
  d.w.dtype = DType::f64;
  CHECK_THROWS_WITH(run(d), Contains("w.dtype") && Contains("bf16 or f32"));
  Call e = bshd_call();
  e.out.dtype = DType::bf16;
  CHECK_THROWS_WITH(run(e), Contains("scores.dtype") && Contains("expected f32"));
  Call f = bshd_call();
  f.q.dtype = static_cast<DType>(42);
  CHECK_THROWS_WITH(run(f), Contains("q.dtype") && Contains("42"));
}

TEST_CASE("validate: strides", "[validate]") {
  Call c = bshd_call();
  c.q.strides[3] = 2;
  CHECK_THROWS_WITH(run(c), Contains("q.strides[3]") && Contains("innermost dimension contiguous"));
  Call d = bshd_call();
  d.q.strides[2] = 136 + 4;  // not a multiple of 8 elements
  d.q.strides[1] = 64 * 140;
  d.q.strides[0] = 256 * 64 * 140;
  CHECK_THROWS_WITH(run(d), Contains("q.strides[2]") && Contains("multiple of 8"));
  Call e = bshd_call();
  e.out.strides[1] = 64;  // rows overlap
  CHECK_THROWS_WITH(run(e), Contains("scores.strides[1]") && Contains("must not overlap"));
  Call f = bshd_call();
  f.w.strides[1] = -64;
  CHECK_THROWS_WITH(run(f), Contains("w.strides[1]") && Contains(">= 0"));
  Call g = bshd_call();  // padded rows are fine
  g.q.strides[2] = 136;
  g.q.strides[1] = 64 * 136;
  g.q.strides[0] = 256 * 64 * 136;
  CHECK_NOTHROW(run(g));
}

TEST_CASE("validate: 16-byte alignment", "[validate]") {
  Call c = bshd_call();
  c.q.data = fake(0x100008);
  CHECK_THROWS_WITH(run(c), Contains("q.data") && Contains("16-byte aligned") && Contains("0x100008"));
  Call d = bshd_call();
  d.k.data = fake(0x200002);
  CHECK_THROWS_WITH(run(d), Contains("k.data"));
  Call e = bshd_call(2, 256, 128, 64, DType::f32);
  e.w.data = fake(0x300002);
  CHECK_THROWS_WITH(run(e), Contains("w.data") && Contains("aligned to 4 bytes"));
}

TEST_CASE("validate: device mismatch", "[validate]") {
  Call c = bshd_call();
  c.k.device = 1;
  CHECK_THROWS_WITH(run(c), Contains("k.device") && Contains("expected 0 (the device of q)") && Contains("got 1"));
  public_rejects(c, "k.device");
}

TEST_CASE("validate: ratio and sm_scale", "[validate]") {
  Call c = bshd_call();
  c.opt.ratio = 0;
  CHECK_THROWS_WITH(run(c), Contains("ratio") && Contains(">= 1") && Contains("got 0"));
  public_rejects(c, "ratio");
  Call d = bshd_call();
  d.opt.sm_scale = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(run(d), Contains("sm_scale") && Contains("finite"));
  d.opt.sm_scale = INFINITY;
  CHECK_THROWS_WITH(run(d), Contains("sm_scale"));
}

TEST_CASE("validate: cu_seqlens contents", "[validate]") {
  {
    ThdCall c;
    make_thd(c);
    c.cuq[0] = 1;
    CHECK_THROWS_WITH(run(c), Contains("cu_seqlens_q[0]") && Contains("expected 0") && Contains("got 1"));
  }
  {
    ThdCall c;
    make_thd(c);
    c.cuk[2] = 2;
    CHECK_THROWS_WITH(run(c), Contains("cu_seqlens_k[2]") && Contains("non-decreasing"));
  }
  {
    ThdCall c;
    make_thd(c);
    c.cuq[3] = 11;
    CHECK_THROWS_WITH(run(c), Contains("cu_seqlens_q[3] (last)") && Contains("expected 12"));
  }
  {
    ThdCall c;
    make_thd(c);
    c.opt.max_seqlen_k = 5;  // the second segment has 7 keys
    c.out.shape[1] = 5;
    c.out.strides[0] = 5;
    CHECK_THROWS_WITH(run(c), Contains("max_seqlen_k") && Contains(">= 7"));
  }
  {
    ThdCall c;
    make_thd(c);
    c.opt.cu_seqlens_k = TensorDesc::contiguous(fake(0x600000), DType::i32, {3});
    CHECK_THROWS_WITH(run(c), Contains("cu_seqlens_k.shape[0]"));
  }
  {
    ThdCall c;
    make_thd(c);
    c.opt.cu_seqlens_k = TensorDesc();
    CHECK_THROWS_WITH(run(c), Contains("both given (THD) or neither"));
  }
}

TEST_CASE("validate: THD needs max_seqlen", "[validate]") {
  ThdCall c;
  make_thd(c);
  c.opt.max_seqlen_q = -1;
  CHECK_THROWS_WITH(run(c), Contains("max_seqlen_q") && Contains("not given"));
  public_rejects(c, "max_seqlen_q");
}

TEST_CASE("validate: output too small or misshapen", "[validate]") {
  Call c = bshd_call();
  c.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {2, 256, 127});
  CHECK_THROWS_WITH(run(c), Contains("scores.shape[2] (S_k)") && Contains("expected 128") && Contains("got 127"));
  ThdCall t;
  make_thd(t);
  t.out = TensorDesc::contiguous(fake(0x400000), DType::f32, {11, 7});
  CHECK_THROWS_WITH(run(t), Contains("scores.shape[0] (T_q)"));
  Call n = bshd_call();
  n.out.data = nullptr;
  CHECK_THROWS_WITH(run(n), Contains("scores.data") && Contains("null"));
}

TEST_CASE("validate: optional tensors", "[validate]") {
  Call c = bshd_call();
  c.opt.q_causal_offsets = TensorDesc::contiguous(fake(0x700000), DType::i32, {3});
  CHECK_THROWS_WITH(run(c), Contains("q_causal_offsets.shape[0] (B)"));
  Call d = bshd_call();
  d.opt.ks = TensorDesc::contiguous(fake(0x700000), DType::i32, {2, 256});
  CHECK_THROWS_WITH(run(d), Contains("ks / ke") && Contains("both"));
  d.opt.ke = TensorDesc::contiguous(fake(0x710000), DType::i32, {2, 256});
  CHECK_NOTHROW(run(d));
  d.opt.q_causal_offsets = TensorDesc::contiguous(fake(0x720000), DType::i32, {2});
  CHECK_THROWS_WITH(run(d), Contains("q_causal_offsets") && Contains("explicit ks/ke"));
  Call e = bshd_call();
  e.opt.lse = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 255});
  CHECK_THROWS_WITH(run(e), Contains("lse.shape[1] (S_q)"));
  Call f = bshd_call();
  f.opt.thd_columns = dsa_indexer::ThdColumns::global;
  CHECK_THROWS_WITH(run(f), Contains("thd_columns"));
  Call g = bshd_call();
  g.opt.family = static_cast<dsa_indexer::KernelFamily>(9);
  CHECK_THROWS_WITH(run(g), Contains("family"));
}

TEST_CASE("validate: missing tensors", "[validate]") {
  Call c = bshd_call();
  c.q = TensorDesc();
  CHECK_THROWS_WITH(run(c), Contains("q") && Contains("not given"));
  public_rejects(c, "not given");
}

// Found by tests/fuzz/fuzz_c_api.cpp (UBSan): extents and strides of up to 2^40 each made the
// element count and the nested spans overflow int64 before any check rejected them.
TEST_CASE("validate: huge extents and strides are rejected without int64 overflow", "[validate]") {
  Call c = bshd_call();
  c.q.shape[0] = c.q.shape[1] = int64_t(1) << 40;
  CHECK_THROWS_AS(run(c), InvalidArgument);
  Call d = bshd_call();
  d.q.shape[1] = int64_t(1) << 40;
  d.q.strides[1] = int64_t(1) << 40;
  CHECK_THROWS_WITH(run(d), Contains("q.strides[1] * q.shape[1]") && Contains("fits in int64"));
}

TEST_CASE("validate: device cu_seqlens are read in chunks, pointer checked before allocating", "[validate]") {
  ThdCall c;
  make_thd(c);
  c.opt.cu_seqlens_q_host = c.opt.cu_seqlens_k_host = nullptr;
  c.opt.cu_seqlens_q.shape[0] = c.opt.cu_seqlens_k.shape[0] = int64_t(1) << 40;  // 4 TB if allocated at once
  std::size_t largest = 0;
  MetadataReader refuse = [&](const void*, int32_t*, std::size_t n) {
    largest = std::max(largest, n);
    throw InvalidArgument("cu_seqlens.data: expected device memory, got a fake pointer");
  };
  CHECK_THROWS_WITH(validate(c.q, c.k, c.w, c.out, c.opt, refuse), Contains("fake pointer"));
  CHECK(largest == (std::size_t(1) << 16));
  // A normal length is one read of exactly that many values.
  ThdCall n;
  make_thd(n);
  int reads = 0;
  MetadataReader copy = [&](const void* dev, int32_t* host, std::size_t count) {
    ++reads;
    const int32_t* src = dev == n.opt.cu_seqlens_q.data ? n.cuq : n.cuk;
    CHECK(count == 4);
    std::copy(src, src + count, host);
  };
  n.opt.cu_seqlens_q_host = n.opt.cu_seqlens_k_host = nullptr;
  CHECK(validate(n.q, n.k, n.w, n.out, n.opt, copy).cu_k_host[3] == 16);
  CHECK(reads == 2);
}

// FP8 inputs (issue 22): e4m3 q and k with optional fp32 per-row scales; every bad input a typed
// error naming the parameter, raised before anything is compiled or launched.
namespace {
Call fp8_call(int64_t B = 2, int64_t sq = 256, int64_t sk = 128, int64_t H = 64) {
  Call c = bshd_call(B, sq, sk, H);
  c.q.dtype = DType::e4m3;
  c.k.dtype = DType::e4m3;
  return c;
}
}  // namespace

TEST_CASE("validate: FP8 E4M3 inputs and their scales", "[validate][fp8]") {
  Call c = fp8_call();
  Problem p = run(c);
  CHECK(p.qk_dtype == DType::e4m3);
  CHECK_FALSE(p.has_q_scale);
  CHECK_FALSE(p.has_k_scale);
  c.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::f32, {2, 256, 64});
  c.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 128, 1});
  p = run(c);
  CHECK(p.has_q_scale);
  CHECK(p.has_k_scale);
  CHECK(p.q_scale_stride[0] == 256 * 64);
  CHECK(p.q_scale_stride[1] == 64);
  CHECK(p.q_scale_stride[2] == 1);
  CHECK(p.k_scale_stride[0] == 128);
  CHECK(p.k_scale_stride[1] == 1);
  c.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 128});  // (B, S_k) too
  CHECK(run(c).k_scale_stride[1] == 1);
  // THD: (T_q, H) and (T_k,) or (T_k, 1)
  ThdCall t;
  make_thd(t, 32);
  t.q.dtype = t.k.dtype = DType::e4m3;
  t.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::f32, {12, 32});
  t.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {16});
  p = run(t);
  CHECK(p.q_scale_stride[1] == 32);
  CHECK(p.k_scale_stride[1] == 1);
  t.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {16, 1});
  CHECK_NOTHROW(run(t));
}

TEST_CASE("validate: FP8 bad input names the parameter", "[validate][fp8]") {
  auto err = [](const Call& c) {
    try {
      run(c);
    } catch (const dsa_indexer::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // fp8 q with bf16 k, and the reverse
  Call a = fp8_call();
  a.k.dtype = DType::bf16;
  CHECK_THAT(err(a), Contains("k.dtype: expected e4m3, as q, got bf16"));
  Call b = bshd_call();
  b.k.dtype = DType::e4m3;
  CHECK_THAT(err(b), Contains("k.dtype: expected bf16, as q, got e4m3"));
  // E5M2: a format no family computes from
  Call c = fp8_call();
  c.q.dtype = c.k.dtype = DType::e5m2;
  CHECK_THROWS_AS(run(c), UnsupportedConfig);
  CHECK_THAT(err(c), Contains("q.dtype") && Contains("e5m2"));
  // scales with bf16 inputs
  Call d = bshd_call();
  d.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::f32, {2, 256, 64});
  CHECK_THAT(err(d), Contains("q_scale: expected not given for bf16 q/k"));
  Call d2 = bshd_call();
  d2.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 128});
  CHECK_THAT(err(d2), Contains("k_scale: expected not given for bf16 q/k"));
  // wrong dtype, shape, rank, device
  Call e = fp8_call();
  e.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::bf16, {2, 256, 64});
  CHECK_THAT(err(e), Contains("q_scale.dtype: expected f32, got bf16"));
  Call f = fp8_call();
  f.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::f32, {2, 256, 32});
  CHECK_THAT(err(f), Contains("q_scale.shape[2]") && Contains("64"));
  Call g = fp8_call();
  g.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 128, 2});
  CHECK_THAT(err(g), Contains("k_scale.shape[2]"));
  Call h = fp8_call();
  h.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {256});
  CHECK_THAT(err(h), Contains("k_scale") && Contains("rank"));
  Call i = fp8_call();
  i.opt.k_scale = TensorDesc::contiguous(fake(0x800000), DType::f32, {2, 64});
  CHECK_THAT(err(i), Contains("k_scale.shape[1]") && Contains("128"));
  Call j = fp8_call();
  j.opt.q_scale = TensorDesc::contiguous(fake(0x700000), DType::f32, {2, 256, 64});
  j.opt.q_scale.device = 1;
  CHECK_THAT(err(j), Contains("q_scale"));
  // TMA: an e4m3 row stride must be a multiple of 16 elements (16 bytes)
  Call k = fp8_call();
  k.q.strides[2] = 64 * 128 + 8;
  k.q.strides[1] = k.q.strides[2];
  CHECK_THAT(err(k), Contains("q.strides") && Contains("16 elements"));
}

TEST_CASE("dispatch: FP8 calls take the FP8 families, automatically since validated on a GPU", "[dispatch][fp8]") {
  using dsa_indexer::KernelFamily;
  const DeviceInfo dev = DeviceInfo::h200();
  Call c = fp8_call(1, 8192, 4096, 64);
  const Problem p = run(c);
  // S_q no multiple of the q-tile: generic
  CHECK(&choose_family(run(fp8_call(1, 8196, 4096, 64)), dev, KernelFamily::automatic, false) == &generic_family());
  const Family& g = choose_family(p, dev, KernelFamily::generic, false);
  CHECK(&g == &generic_family());
  const Plan plan = make_plan(p, dev, g);
  CHECK(plan.spec.shape_key() == "h64.wbf16.lse0.bshd.s5.ine4m3");
  // one 128-byte box per row of D: 64 KB of Q and 5 x 8 KB of KV less than the bf16 variant
  CHECK(plan.spec.dynamic_smem + 64 * 1024 + 5 * 8 * 1024 == generic_spec(64, DType::bf16, false, Layout::bshd).dynamic_smem);
  // bf16 variants keep their keys and sources (the input parameter is omitted at its default)
  CHECK(generic_spec(64, DType::bf16, false, Layout::bshd).shape_key() == "h64.wbf16.lse0.bshd.s5");
  CHECK(render(generic_spec(64, DType::bf16, false, Layout::bshd)).text.find("kInput") == std::string::npos);
  CHECK(render(plan.spec).text.find("static constexpr int kInput = dsa::kInputE4m3;") != std::string::npos);
  // the families without an FP8 main loop refuse e4m3, naming what they compute from
  CHECK_THROWS_WITH(choose_family(p, dev, KernelFamily::reference, false), Contains("q/k dtype: expected bf16, got e4m3"));
  // generic names both precisions it computes from
  Problem f16 = p;
  f16.qk_dtype = DType::f16;
  CHECK_THROWS_WITH(choose_family(f16, dev, KernelFamily::generic, false), Contains("expected bf16 or e4m3, got f16"));
}

TEST_CASE("lean FP8: planned by name, every variant compiles without spills", "[dispatch][fp8][nvrtc]") {
  using dsa_indexer::KernelFamily;
  const DeviceInfo dev = DeviceInfo::h200();
  const Problem p = run(fp8_call(1, 8192, 4096, 64));
  const Family& f = choose_family(p, dev, KernelFamily::lean, false);
  const Plan plan = make_plan(p, dev, f);
  CHECK(plan.spec.shape_key() == "bshd.sq8192.sk4096.wbf16.scale1.s8.ine4m3");  // FP8: 8 KV stages
  // bf16 lean keeps its key (the input parameter is omitted at its default)
  CHECK(lean_spec(8192, 4096, DType::bf16, true).shape_key() == "bshd.sq8192.sk4096.wbf16.scale1.s5");
  CHECK(&choose_family(p, dev, KernelFamily::automatic, false) == &lean_family());
  // BSHD and THD (both column modes), bf16 and fp32 W, both scale variants
  std::vector<KernelSpec> specs = {plan.spec,
                                   lean_spec(8192, 4096, DType::f32, false, Layout::bshd, DType::e4m3),
                                   lean_spec(2048, 65536, DType::bf16, false, Layout::bshd, DType::e4m3),
                                   lean_spec(8192, 0, DType::bf16, false, Layout::thd_local, DType::e4m3),
                                   lean_spec(8192, 0, DType::f32, true, Layout::thd_global, DType::e4m3)};
  for (const KernelSpec& s : specs) {
    const GeneratedSource g = render(s);
    INFO(g.name);
    const CompileOutput out = nvrtc_compile({g.name, g.text, g.kernels, compile_options(s.arch), nullptr});
    INFO(out.log);
    CHECK_FALSE(out.cubin.empty());
    CHECK(out.log.find(" 0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
    CHECK(out.log.find("bytes stack frame") != std::string::npos);
    CHECK(out.log.find(" 0 bytes stack frame") != std::string::npos);
  }
}
