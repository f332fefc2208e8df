#include <catch2/catch.hpp>

#include "ops/scores_args.hpp"
#include "families/sm90_indexer_generic.hpp"
#include "problems.hpp"
#include "ops/validate.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;

TEST_CASE("launch: kernel arguments mirror the problem", "[launch]") {
  Call c = bshd_call(2, 100, 50, 32);
  c.opt.sm_scale = 0.125f;
  c.opt.ratio = 4;
  Problem p = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  Plan plan = make_plan(p, DeviceInfo::h200(), generic_family());
  dsa::DsaArgs a = make_args(p);
  CHECK(a.q == 0x100000);
  CHECK(a.out == 0x400000);
  CHECK(a.lse == 0);
  CHECK(a.batch == 2);
  CHECK(a.s_q == 100);
  CHECK(a.s_k == 50);
  CHECK(a.out_cols == 50);
  CHECK(a.ratio == 4);
  CHECK(a.sm_scale == 0.125f);
  CHECK(plan.num_tiles == 2 * 7);  // 16 tokens per tile for H = 32
  CHECK(a.has_offsets == 0);
}

TEST_CASE("launch: TMA geometry for BSHD and THD", "[launch]") {
  Call c = bshd_call(2, 100, 50, 64);
  Problem p = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  TmaGeometry q = q_tma_geometry(p, 4), k = k_tma_geometry(p);
  CHECK(q.rank == 4);
  CHECK(q.dims[0] == 128);
  CHECK(q.dims[1] == 64);
  CHECK(q.dims[2] == 100);
  CHECK(q.dims[3] == 2);
  CHECK(q.strides_bytes[0] == 256);
  CHECK(q.strides_bytes[1] == 64 * 256);
  CHECK(q.box[0] == 64);
  CHECK(q.box[1] * q.box[2] == 256);  // one consumer's packed rows
  CHECK(k.rank == 3);
  CHECK(k.dims[1] == 50);
  CHECK(k.box[1] == 64);
  ThdCall t;
  make_thd(t, 16);
  Problem pt = validate(t.q, t.k, t.w, t.out, t.opt, nullptr);
  TmaGeometry qt = q_tma_geometry(pt, GenericGeometry::tokens_per_consumer(16)), kt = k_tma_geometry(pt);
  CHECK(qt.rank == 3);
  CHECK(qt.box[1] * qt.box[2] == 256);
  CHECK(kt.rank == 2);
  CHECK(kt.dims[1] == 16);
}

TEST_CASE("launch: TMA geometry for FP8 inputs: one 128-byte box per row, the kernels' tile bytes", "[launch][fp8]") {
  // E4M3: elements of one byte, a row of D = 128 is one 128-byte swizzled box (bf16: two of 64)
  Call c = bshd_call(2, 100, 50, 64);
  c.q.dtype = c.k.dtype = DType::e4m3;
  Problem p = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  REQUIRE(p.qk_dtype == DType::e4m3);
  TmaGeometry q = q_tma_geometry(p, 4), k = k_tma_geometry(p);
  CHECK(q.elem_bytes == 1);
  CHECK(k.elem_bytes == 1);
  CHECK(q.rank == 4);
  CHECK(q.dims[0] == 128);
  CHECK(q.strides_bytes[0] == 128);       // one token-head row of D bytes
  CHECK(q.strides_bytes[1] == 64 * 128);  // one token
  CHECK(q.box[0] == 128);                 // the 128B swizzle span, in bytes
  CHECK(q.box[1] * q.box[2] == 256);      // one consumer's packed rows
  CHECK(uint64_t(q.box[0]) * q.box[1] * q.box[2] * q.elem_bytes == 32768);  // InputTiles<true>::kQBytes
  CHECK(k.rank == 3);
  CHECK(k.box[0] == 128);
  CHECK(k.box[1] == 64);
  CHECK(uint64_t(k.box[0]) * k.box[1] * k.elem_bytes == 8192);  // InputTiles<true>::kKvBytes
  CHECK(k.strides_bytes[0] == 128);
  // THD: rank 3 and 2, the same boxes
  ThdCall t;
  make_thd(t, 64);
  t.q.dtype = t.k.dtype = DType::e4m3;
  Problem pt = validate(t.q, t.k, t.w, t.out, t.opt, nullptr);
  TmaGeometry qt = q_tma_geometry(pt, 4), kt = k_tma_geometry(pt);
  CHECK(qt.rank == 3);
  CHECK(qt.elem_bytes == 1);
  CHECK(uint64_t(qt.box[0]) * qt.box[1] * qt.box[2] == 32768);
  CHECK(kt.rank == 2);
  CHECK(uint64_t(kt.box[0]) * kt.box[1] == 8192);
  // the bf16 maps of the same shape differ (elem_bytes is part of the memo's key)
  Call b = bshd_call(2, 100, 50, 64);
  CHECK_FALSE(q == q_tma_geometry(validate(b.q, b.k, b.w, b.out, b.opt, nullptr), 4));
}

TEST_CASE("launch: the tensor-map memo keys on every geometry field", "[launch]") {
  // TmaMemo re-encodes unless base and geometry equal the previous call's; equality must
  // see every field (the encode itself needs the driver and is covered by the GPU tests).
  Call c = bshd_call(2, 100, 50, 64);
  Problem p = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  const TmaGeometry g = q_tma_geometry(p, 4);
  CHECK(g == q_tma_geometry(p, 4));
  CHECK_FALSE(g == k_tma_geometry(p));
  for (int i = 0; i < 5; ++i) {
    TmaGeometry d = g, b = g;
    d.dims[i] += 1;
    b.box[i] += 1;
    CHECK_FALSE(g == d);
    CHECK_FALSE(g == b);
  }
  for (int i = 0; i < 4; ++i) {
    TmaGeometry s = g;
    s.strides_bytes[i] += 16;
    CHECK_FALSE(g == s);
  }
  TmaGeometry r = g;
  r.rank = 3;
  CHECK_FALSE(g == r);
}
