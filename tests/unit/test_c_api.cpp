#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "dsa_indexer/c_api.h"

namespace {
dsa_tensor tensor(uintptr_t addr, int32_t dtype, std::initializer_list<int64_t> dims) {
  dsa_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void*>(addr);
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) t.shape[i++] = d;
  int64_t s = 1;
  for (int j = t.rank - 1; j >= 0; --j) {
    t.strides[j] = s;
    s *= t.shape[j];
  }
  return t;
}
struct CCall {
  dsa_tensor q = tensor(0x100000, DSA_BF16, {1, 64, 64, 128});
  dsa_tensor k = tensor(0x200000, DSA_BF16, {1, 32, 1, 128});
  dsa_tensor w = tensor(0x300000, DSA_BF16, {1, 64, 64});
  dsa_tensor out = tensor(0x400000, DSA_F32, {1, 64, 32});
  dsa_options o;
  CCall() { dsa_options_init(&o); }
  dsa_status run() { return dsa_indexer_forward(&q, &k, &w, &out, &o, nullptr); }
};
}  // namespace

TEST_CASE("c api: defaults", "[c_api]") {
  dsa_options o;
  dsa_options_init(&o);
  CHECK(o.struct_size == sizeof(dsa_options));
  CHECK(o.ratio == 1);
  CHECK(o.sm_scale == 1.0f);
  CHECK(o.max_seqlen_q == -1);
  CHECK(o.family == DSA_FAMILY_AUTO);
  CHECK(std::string(dsa_version()).size() > 0);
}

TEST_CASE("c api: status codes and the thread-local message", "[c_api]") {
  CCall c;
  c.q.dtype = DSA_F16;
  CHECK(c.run() == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("q.dtype"));
  CCall u;
  u.q.shape[3] = 64;
  u.k.shape[3] = 64;
  CHECK(u.run() == DSA_STATUS_UNSUPPORTED_CONFIG);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("head dim"));
  CCall n;
  n.o.struct_size = 8;
  CHECK(n.run() == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("struct_size"));
  CHECK(dsa_indexer_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(dsa_status_name(DSA_STATUS_COMPILE_ERROR)) == "DSA_STATUS_COMPILE_ERROR");
}

TEST_CASE("c api: a valid call on a machine without a GPU is a driver error, not a crash", "[c_api]") {
  CCall c;
  const dsa_status s = c.run();
  // On a GPU machine the fake pointers are rejected as not device memory instead.
  CHECK((s == DSA_STATUS_DRIVER_ERROR || s == DSA_STATUS_INVALID_ARGUMENT));
  CHECK(std::string(dsa_last_error()).size() > 0);
  dsa_cache_stats st;
  CHECK(dsa_kernel_cache_stats(&st) == DSA_STATUS_OK);
  CHECK(st.capacity >= 1);
  CHECK(dsa_kernel_cache_stats(nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(dsa_last_error()).size() > 0);
  CHECK(dsa_kernel_cache_stats(&st) == DSA_STATUS_OK);
  CHECK(std::string(dsa_last_error()).empty());
}

TEST_CASE("c api: cache stats versions never write past the caller's struct", "[c_api]") {
  static_assert(DSA_CACHE_STATS_V1_SIZE == 7 * sizeof(uint64_t), "version 1: seven counters");
  static_assert(sizeof(dsa_cache_stats) == DSA_CACHE_STATS_V2_SIZE, "version 2: twelve counters");
  // A caller built against version 1 allocates seven counters: the old entry point writes them
  // and nothing after.
  unsigned char buf[DSA_CACHE_STATS_V2_SIZE + 16];
  std::memset(buf, 0xab, sizeof buf);
  auto* st = reinterpret_cast<dsa_cache_stats*>(buf);
  REQUIRE(dsa_kernel_cache_stats(st) == DSA_STATUS_OK);
  CHECK(st->capacity >= 1);
  for (std::size_t i = DSA_CACHE_STATS_V1_SIZE; i < sizeof buf; ++i) CHECK(buf[i] == 0xab);
  // _ex with version 1's size: the same; with a size between fields, whole fields only.
  std::memset(buf, 0xab, sizeof buf);
  REQUIRE(dsa_kernel_cache_stats_ex(st, DSA_CACHE_STATS_V1_SIZE + 4) == DSA_STATUS_OK);
  CHECK(st->capacity >= 1);
  for (std::size_t i = DSA_CACHE_STATS_V1_SIZE; i < sizeof buf; ++i) CHECK(buf[i] == 0xab);
  // Version 2's size: every counter (none counted yet here).
  std::memset(buf, 0xab, sizeof buf);
  REQUIRE(dsa_kernel_cache_stats_ex(st, sizeof(dsa_cache_stats)) == DSA_STATUS_OK);
  CHECK(st->background_compiles == 0);
  CHECK(st->async_fallbacks == 0);
  CHECK(st->background_failures == 0);
  CHECK(st->queue_rejections == 0);
  CHECK(st->recorded_keys == 0);
  for (std::size_t i = DSA_CACHE_STATS_V2_SIZE; i < sizeof buf; ++i) CHECK(buf[i] == 0xab);
  // A newer caller's larger struct: what this library does not know reads 0.
  std::memset(buf, 0xab, sizeof buf);
  REQUIRE(dsa_kernel_cache_stats_ex(st, sizeof buf) == DSA_STATUS_OK);
  for (std::size_t i = DSA_CACHE_STATS_V2_SIZE; i < sizeof buf; ++i) CHECK(buf[i] == 0);
  CHECK(dsa_kernel_cache_stats_ex(st, DSA_CACHE_STATS_V1_SIZE - 8) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("struct_size") && Catch::Contains("56"));
  CHECK(dsa_kernel_cache_stats_ex(nullptr, sizeof(dsa_cache_stats)) == DSA_STATUS_INVALID_ARGUMENT);
}
