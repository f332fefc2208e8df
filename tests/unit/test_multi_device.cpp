#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "families/sm90_indexer_generic.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "families/sm90_indexer_reference.hpp"
#include "golden_specs.hpp"
#include "core/lru_cache.hpp"
#include "problems.hpp"
#include "jit/runtime.hpp"
#include "ops/validate.hpp"

using namespace dsa_indexer::detail;
using namespace dsa_test;

namespace {
KernelSpec a_generic_spec() { return generic_spec(64, dsa_indexer::DType::bf16, false, Layout::bshd); }
}  // namespace

TEST_CASE("multi-device: in-memory keys are per device, disk keys are not", "[multi_device]") {
  const KernelSpec s = a_generic_spec();
  CHECK(memory_key(s, 0) != memory_key(s, 1));
  CHECK(memory_key(s, 1) == memory_key(s, 1));
  CHECK(memory_key(s, 0).find("dev0/") == 0);
  // The cubin depends only on the arch, so both devices share one disk entry.
  CHECK(prepare(s).disk_key == prepare(s).disk_key);
}

TEST_CASE("multi-device: the hand-built memory key is dev/family/shape key/arch", "[multi_device]") {
  // memory_key and shape_key are built without fmt for speed; they must stay the documented
  // text, one key per variant.
  std::set<std::string> seen;
  for (const Family* f : {&reference_family(), &generic_family()})
    for (const dsa_test::SpecCase& c : dsa_test::grid_specs(*f))
      for (int dev : {0, 3, 12}) {
        std::string shape = fmt::format("h{}.w{}.lse{}.{}", c.heads, dsa_indexer::dtype_name(c.w), c.lse ? 1 : 0,
                                        layout_name(c.layout));
        if (f == &generic_family()) shape += ".s5";
        CHECK(c.spec.shape_key() == shape);
        const std::string want = fmt::format("dev{}/{}/{}/{}", dev, f->name(), shape, c.spec.arch);
        CHECK(memory_key(c.spec, dev) == want);
        seen.insert(want);
      }
  CHECK(seen.size() == 2u * 3 * 2 * 2 * 3 * 3);
  const KernelSpec lean = lean_spec(8192, 4096, dsa_indexer::DType::f32, true);
  CHECK(lean.shape_key() == "bshd.sq8192.sk4096.wf32.scale1.s5");
  CHECK(memory_key(lean, 2) == "dev2/sm90_indexer_lean/bshd.sq8192.sk4096.wf32.scale1.s5/sm_90a");
  CHECK(lean_spec(8192, 4096, dsa_indexer::DType::bf16, false).shape_key() == "bshd.sq8192.sk4096.wbf16.scaleany.s5");
}

TEST_CASE("multi-device: plans follow each device's SM count", "[multi_device]") {
  Call c = bshd_call(1, 8192, 4096);
  Problem p = validate(c.q, c.k, c.w, c.out, c.opt, nullptr);
  DeviceInfo big{0, 132, 9, 0, 232448, "fake H200"};
  DeviceInfo cut{1, 114, 9, 0, 232448, "fake H100 PCIe"};
  Plan a = make_plan(p, big, generic_family()), b = make_plan(p, cut, generic_family());
  CHECK(a.launches[0].grid[0] == 132);
  CHECK(b.launches[0].grid[0] == 114);
  CHECK(a.spec == b.spec);
  CHECK(generic_cta_tiles(a, 0) != generic_cta_tiles(b, 0));
  // lean too: the grid follows the device, the compiled variant does not
  Plan la = make_plan(p, big, lean_family()), lb = make_plan(p, cut, lean_family());
  CHECK(la.launches[0].grid[0] == 132);
  CHECK(lb.launches[0].grid[0] == 114);
  CHECK(la.spec == lb.spec);
}

TEST_CASE("multi-device: one production per (device, variant) under concurrent callers", "[multi_device]") {
  // Fake devices: the produced value records the device it was made for; a value must never be
  // handed to a caller asking for another device.
  LruCache<std::shared_ptr<int>> cache(16);
  std::mutex mu;
  std::map<std::string, int> made;
  std::atomic<int> wrong{0};
  std::vector<std::thread> th;
  const KernelSpec s = a_generic_spec();
  for (int t = 0; t < 8; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const int dev = (t + i) % 2;
        auto v = cache.get_or_create(memory_key(s, dev), [&, dev] {
          std::lock_guard<std::mutex> lk(mu);
          ++made[memory_key(s, dev)];
          return std::make_shared<int>(dev);
        });
        if (*v != dev) wrong.fetch_add(1);
      }
    });
  for (auto& x : th) x.join();
  CHECK(wrong.load() == 0);
  REQUIRE(made.size() == 2);
  for (const auto& [k, n] : made) CHECK(n == 1);
}
