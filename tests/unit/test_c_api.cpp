#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <vector>
#include <string>

#include "dsa_indexer/c_api.h"

namespace {
dsa_tensor tensor(uintptr_t addr, int32_t dtype, const std::vector<int64_t>& dims) {
  dsa_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = reinterpret_cast<void*>(addr);
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(dims.size());
  for (int i = 0; i < t.rank; ++i) t.shape[i] = dims[static_cast<std::size_t>(i)];
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

namespace {
// Fake addresses 2^40 bytes apart: the top-k validation checks that no output overlaps an input.
constexpr uintptr_t kTb = uintptr_t(1) << 40;
struct CTopk {
  dsa_tensor q = tensor(1 * kTb, DSA_BF16, {2, 256, 64, 128});
  dsa_tensor k = tensor(2 * kTb, DSA_BF16, {2, 128, 1, 128});
  dsa_tensor w = tensor(3 * kTb, DSA_BF16, {2, 256, 64});
  dsa_tensor indices = tensor(4 * kTb, DSA_I32, {2, 256, 64});
  dsa_options o;
  dsa_topk_options t;
  CTopk() {
    dsa_options_init(&o);
    dsa_topk_options_init(&t);
    t.k = 64;
  }
  dsa_status run() { return dsa_indexer_topk(&q, &k, &w, &indices, &o, &t, nullptr); }
  dsa_status size(std::size_t* out) { return dsa_indexer_topk_workspace_size(&q, &k, &w, &indices, &o, &t, out); }
};

// Both entry points of one call: the same status, and a message naming what `needle` names.
void check_both(CTopk& c, dsa_status want, const std::string& needle) {
  INFO(needle);
  CHECK(c.run() == want);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains(needle));
  std::size_t bytes = 12345;
  CHECK(c.size(&bytes) == want);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains(needle));
  CHECK(bytes == 12345);  // untouched on failure
}
}  // namespace

TEST_CASE("c api topk: defaults are the C++ TopkOptions'", "[c_api][topk]") {
  dsa_topk_options t;
  std::memset(&t, 0x5a, sizeof t);
  dsa_topk_options_init(&t);
  CHECK(t.struct_size == sizeof(dsa_topk_options));
  CHECK(t.k == DSA_TOPK_MAX_K);
  CHECK(t.sort_by_score == 0);
  CHECK(t.indices == DSA_TOPK_INDICES_LOCAL);
  CHECK((t.values.data == nullptr && t.values.rank == 0));
  CHECK((t.softmax.data == nullptr && t.softmax.rank == 0));
  CHECK((t.workspace == nullptr && t.workspace_bytes == 0));
  dsa_topk_options_init(nullptr);  // no crash
}

TEST_CASE("c api topk: validation errors are status codes with the library's message", "[c_api][topk]") {
  {
    CTopk c;
    c.t.k = 0;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "indexer_topk: k: expected >= 1, got 0");
  }
  {
    CTopk c;
    c.t.k = DSA_TOPK_MAX_K + 1;
    check_both(c, DSA_STATUS_UNSUPPORTED_CONFIG, "k: expected <= 2048");
  }
  {
    CTopk c;
    c.indices.dtype = DSA_I64;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "indices.dtype");
  }
  {
    CTopk c;
    c.indices.shape[2] = 63;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "indices.shape[2]");
  }
  {
    CTopk c;
    c.t.values = tensor(5 * kTb, DSA_BF16, {2, 256, 64});
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "values.dtype");
  }
  {
    CTopk c;
    c.t.softmax = tensor(4 * kTb + 64, DSA_F32, {2, 256, 64});  // over indices
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "does not overlap softmax");
  }
  {
    CTopk c;
    c.t.indices = 7;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "topk.indices");
  }
  {
    CTopk c;
    c.t.workspace = reinterpret_cast<void*>(6 * kTb + 16);
    c.t.workspace_bytes = 1 << 20;
    CHECK(c.run() == DSA_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("topk.workspace: expected 256-byte aligned"));
  }
  {
    CTopk c;
    c.t.workspace = nullptr;
    c.t.workspace_bytes = 256;
    CHECK(c.run() == DSA_STATUS_INVALID_ARGUMENT);
    CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("topk.workspace"));
  }
  {
    CTopk c;
    c.o.ratio = 0;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "indexer_topk: ratio: expected >= 1, got 0");
  }
  {
    CTopk c;
    c.o.ks = tensor(8 * kTb, DSA_I32, {2, 256});
    c.o.ke = tensor(9 * kTb, DSA_I32, {2, 256});
    check_both(c, DSA_STATUS_UNSUPPORTED_CONFIG, "ks / ke");
  }
  // The structs' sizes and NULL arguments, for both entry points.
  {
    CTopk c;
    c.t.struct_size = 8;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "topk.struct_size: expected " + std::to_string(sizeof(dsa_topk_options)));
  }
  {
    CTopk c;
    c.o.struct_size = 8;
    check_both(c, DSA_STATUS_INVALID_ARGUMENT, "options.struct_size");
  }
  CTopk c;
  CHECK(dsa_indexer_topk(&c.q, &c.k, &c.w, &c.indices, &c.o, nullptr, nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("dsa_indexer_topk: topk: expected a dsa_topk_options"));
  CHECK(dsa_indexer_topk(&c.q, &c.k, &c.w, &c.indices, nullptr, &c.t, nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("options: expected a dsa_options"));
  CHECK(dsa_indexer_topk(&c.q, &c.k, &c.w, nullptr, &c.o, &c.t, nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("indices: expected non-null"));
  CHECK(dsa_indexer_topk_workspace_size(&c.q, &c.k, &c.w, &c.indices, &c.o, &c.t, nullptr) == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("out: expected non-null"));
}

TEST_CASE("c api topk: a valid call without a GPU is a driver error, not a crash", "[c_api][topk]") {
  CTopk c;
  const dsa_status s = c.run();
  // On a GPU machine the fake pointers are rejected as not device memory instead.
  CHECK((s == DSA_STATUS_DRIVER_ERROR || s == DSA_STATUS_INVALID_ARGUMENT));
  CHECK(std::string(dsa_last_error()).size() > 0);
  // The size query checks no pointer: on a GPU machine it answers, without one it needs the driver.
  std::size_t bytes = 0;
  const dsa_status z = c.size(&bytes);
  if (z == DSA_STATUS_OK) {
    CHECK(bytes > 0);
    CHECK(std::string(dsa_last_error()).empty());
  } else {
    CHECK(z == DSA_STATUS_DRIVER_ERROR);
  }
}

TEST_CASE("c api: window_columns is read from structs that have it", "[c_api][window_start]") {
  CCall c;
  CHECK(c.o.window_columns == DSA_WINDOW_COLUMNS_KEY);
  // window_start without ks / ke: refused, so the field was read ...
  c.o.window_columns = DSA_WINDOW_COLUMNS_START;
  CHECK(c.run() == DSA_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(std::string(dsa_last_error()), Catch::Contains("window_columns"));
  // ... and a caller of the header from before it (the struct ending at k_scale) gets key
  // columns: the call gets past validation to the driver, which this machine lacks
  c.o.struct_size = static_cast<uint32_t>(offsetof(dsa_options, window_columns));
  CHECK(c.run() != DSA_STATUS_OK);
  CHECK_THAT(std::string(dsa_last_error()), !Catch::Contains("window_columns") && !Catch::Contains("struct_size"));
}
