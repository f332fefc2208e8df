#include <catch2/catch.hpp>

#include <set>

#include "dsa_indexer/errors.hpp"
#include "planner.hpp"
#include "problems.hpp"
#include "validate.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;

namespace {
Problem problem(int64_t B, int64_t sq, int64_t sk, int64_t H = 64) {
  Call c = bshd_call(B, sq, sk, H);
  return validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
}
DeviceInfo small_device() { return DeviceInfo{0, 8, 9, 0, 232448, "small Hopper (8 SMs)"}; }
}  // namespace

TEST_CASE("planner: generic geometry on H100 and H200", "[planner]") {
  for (DeviceInfo dev : {DeviceInfo::h100(), DeviceInfo::h200()}) {
    Plan p = make_plan(problem(1, 8192, 4096), dev, Family::generic);
    CHECK(p.spec.family == Family::generic);
    CHECK(p.tokens_per_tile == 8);
    CHECK(p.num_tiles == 1024);
    CHECK(p.grid[0] == 132);
    CHECK(p.block[0] == 384);
    CHECK(p.smem_bytes == static_cast<uint32_t>(GenericGeometry::smem_bytes(64, 5)));
    CHECK(p.smem_bytes <= 232448);
    CHECK(p.spec.shape_key() == "h64.wbf16.lse0.bshd.s5");
  }
  CHECK(make_plan(problem(1, 8192, 4096, 32), DeviceInfo::h200(), Family::generic).tokens_per_tile == 16);
  CHECK(make_plan(problem(1, 8192, 4096, 16), DeviceInfo::h200(), Family::generic).tokens_per_tile == 32);
}

TEST_CASE("planner: the spec does not depend on sequence lengths, batch or ratio", "[planner]") {
  const KernelSpec a = make_plan(problem(1, 8192, 4096), DeviceInfo::h200(), Family::generic).spec;
  const KernelSpec b = make_plan(problem(3, 17, 999), DeviceInfo::h200(), Family::generic).spec;
  CHECK(a == b);
  CHECK(a.shape_key() == b.shape_key());
}

TEST_CASE("planner: small grids and small devices", "[planner]") {
  Plan p = make_plan(problem(1, 5, 3), DeviceInfo::h200(), Family::generic);
  CHECK(p.num_tiles == 1);
  CHECK(p.grid[0] == 1);
  Plan s = make_plan(problem(2, 256, 128), small_device(), Family::generic);
  CHECK(s.num_tiles == 64);
  CHECK(s.grid[0] == 8);
}

TEST_CASE("planner: reversed-LPT order covers every tile once, longest first", "[planner]") {
  Plan p = make_plan(problem(3, 1000, 500), small_device(), Family::generic);
  REQUIRE(p.num_tiles == 3 * 125);
  std::set<int64_t> seen;
  for (int64_t c = 0; c < p.grid[0]; ++c) {
    auto order = cta_tile_order(p, c);
    REQUIRE_FALSE(order.empty());
    CHECK(order[0] == p.num_tiles - 1 - c);  // CTA c starts with the c-th most expensive tile
    for (size_t i = 1; i < order.size(); ++i) CHECK(order[i] == order[i - 1] - static_cast<int64_t>(p.grid[0]));
    for (auto t : order) CHECK(seen.insert(t).second);
  }
  CHECK(static_cast<int64_t>(seen.size()) == p.num_tiles);
  // tile t = tile_in_batch * B + b: the first wave holds the last tiles of every batch
  auto first = cta_tile_order(p, 0)[0];
  CHECK(first / 3 == p.tiles_per_batch - 1);
}

TEST_CASE("planner: rejects devices that are not Hopper or lack shared memory", "[planner]") {
  DeviceInfo a100{0, 108, 8, 0, 166912, "A100"};
  CHECK_THROWS_AS(make_plan(problem(1, 64, 64), a100, Family::generic), dsa_indexer::UnsupportedConfig);
  CHECK_THROWS_WITH(make_plan(problem(1, 64, 64), a100, Family::generic), Catch::Contains("compute capability") && Catch::Contains("8.0"));
  DeviceInfo tiny{0, 132, 9, 0, 101376, "Hopper with a small carve-out"};
  CHECK_THROWS_WITH(make_plan(problem(1, 64, 64), tiny, Family::generic), Catch::Contains("shared memory") && Catch::Contains("101376"));
}

TEST_CASE("planner: reference geometry", "[planner]") {
  Plan p = make_plan(problem(2, 100, 300), DeviceInfo::h200(), Family::reference);
  CHECK(p.grid[0] == 200);
  CHECK(p.grid[1] == 3);
  CHECK(p.block[0] == 128);
  CHECK(p.spec.shape_key() == "h64.wbf16.lse0.bshd");
}

TEST_CASE("dispatch: automatic and generic go generic, reference only when asked", "[planner]") {
  Problem p = problem(1, 64, 64);
  CHECK(choose_family(p, dsa_indexer::KernelFamily::automatic) == Family::generic);
  CHECK(choose_family(p, dsa_indexer::KernelFamily::generic) == Family::generic);
  CHECK(choose_family(p, dsa_indexer::KernelFamily::reference) == Family::reference);
}
