// The CPU top-k oracle on constructed rows: ties, NaN, infinities, signed zeros, short and
// empty rows, both output orders.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "../support/topk_reference.hpp"

using dsa_test::topk_reference;

namespace {
const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

bool same_bits(float a, float b) { return dsa_test::topk_bits(a) == dsa_test::topk_bits(b); }
}  // namespace

TEST_CASE("topk reference: the key orders floats, NaN on top, +0 above -0", "[topk]") {
  using dsa_test::topk_key;
  const std::vector<float> ascending = {-kInf, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, 3e38f, kInf};
  for (size_t i = 1; i < ascending.size(); ++i) CHECK(topk_key(ascending[i - 1]) < topk_key(ascending[i]));
  CHECK(topk_key(kNan) == 0xffffffffu);
  CHECK(topk_key(-kNan) == 0xffffffffu);
  CHECK(topk_key(dsa_test::topk_from_bits(0x7f800001u)) == 0xffffffffu);
  for (float x : ascending) CHECK(same_bits(dsa_test::topk_key_value(topk_key(x)), x));
  CHECK(dsa_test::topk_bits(dsa_test::topk_key_value(0xffffffffu)) == 0x7fffffffu);
}

TEST_CASE("topk reference: ties at the k-th place go to the smaller column", "[topk]") {
  const std::vector<float> row = {1.0f, 5.0f, 3.0f, 5.0f, 3.0f, 3.0f, 0.5f};
  auto r = topk_reference(row.data(), 0, 7, 0, 3, false);
  CHECK(r.indices == std::vector<int32_t>{1, 2, 3});
  CHECK(r.values == std::vector<float>{5.0f, 3.0f, 5.0f});
  r = topk_reference(row.data(), 0, 7, 0, 4, true);
  CHECK(r.indices == std::vector<int32_t>{1, 3, 2, 4});
  // a window and a bias: columns [2, 6), index = column + 100
  r = topk_reference(row.data(), 2, 6, 100, 2, false);
  CHECK(r.indices == std::vector<int32_t>{102, 103});
  // all equal: the first k columns
  const std::vector<float> flat(10, 2.5f);
  r = topk_reference(flat.data(), 0, 10, 0, 4, true);
  CHECK(r.indices == std::vector<int32_t>{0, 1, 2, 3});
  for (float s : r.softmax) CHECK(s == Approx(0.25f).epsilon(1e-6));
}

TEST_CASE("topk reference: short and empty rows are padded", "[topk]") {
  const std::vector<float> row = {2.0f, -1.0f};
  auto r = topk_reference(row.data(), 0, 2, 7, 4, true);
  CHECK(r.indices == std::vector<int32_t>{7, 8, -1, -1});
  CHECK(r.values[2] == -kInf);
  CHECK(r.softmax[3] == 0.0f);
  const double e = std::exp(-3.0);
  CHECK(r.softmax[0] == Approx(1.0 / (1.0 + e)).epsilon(1e-7));
  CHECK(r.lse == Approx(2.0 + std::log1p(e)).epsilon(1e-7));
  r = topk_reference(row.data(), 1, 1, 0, 2, false);
  CHECK(r.indices == std::vector<int32_t>{-1, -1});
  CHECK(r.lse == -kInf);
}

TEST_CASE("topk reference: NaN ranks first, -inf is selectable, softmax and lse policies", "[topk]") {
  const std::vector<float> row = {1.0f, -kNan, kInf, 3.0f, kNan, -kInf};
  auto r = topk_reference(row.data(), 0, 6, 0, 3, true);
  CHECK(r.indices == std::vector<int32_t>{1, 4, 2});
  CHECK(dsa_test::topk_bits(r.values[0]) == 0x7fffffffu);
  CHECK(r.values[2] == kInf);
  for (float s : r.softmax) CHECK(std::isnan(s));
  CHECK(std::isnan(r.lse));
  // +inf on top: softmax NaN, lse +inf
  const std::vector<float> infrow = {kInf, 0.0f};
  r = topk_reference(infrow.data(), 0, 2, 0, 1, false);
  CHECK(std::isnan(r.softmax[0]));
  CHECK(r.lse == kInf);
  // all -inf: selected, softmax 0, lse -inf
  const std::vector<float> ninf(5, -kInf);
  r = topk_reference(ninf.data(), 0, 5, 0, 3, false);
  CHECK(r.indices == std::vector<int32_t>{0, 1, 2});
  CHECK(r.values[1] == -kInf);
  CHECK(r.softmax == std::vector<float>{0.0f, 0.0f, 0.0f});
  CHECK(r.lse == -kInf);
  // finite max with -inf among the selected: those slots are 0
  const std::vector<float> mixed = {-kInf, 0.0f, -kInf};
  r = topk_reference(mixed.data(), 0, 3, 0, 2, false);
  CHECK(r.indices == std::vector<int32_t>{0, 1});
  CHECK(r.softmax == std::vector<float>{0.0f, 1.0f});
}

TEST_CASE("topk reference: +0.0 ranks above -0.0", "[topk]") {
  const std::vector<float> row = {-0.0f, 0.0f, -0.0f};
  auto r = topk_reference(row.data(), 0, 3, 0, 1, false);
  CHECK(r.indices == std::vector<int32_t>{1});
  r = topk_reference(row.data(), 0, 3, 0, 2, true);
  CHECK(r.indices == std::vector<int32_t>{1, 0});
  CHECK(std::signbit(r.values[1]));
}
