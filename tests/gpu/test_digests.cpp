// The output bits of fixed problems, family by family: a SHA-256 per case over every output
// byte (scores and lse; top-k indices, values and softmax) on the same fresh random inputs
// (fixed seeds). Two uses:
// - run to run: every case runs twice and must give the same digest (always checked);
// - across versions: a restructure must leave every existing kernel's results bitwise
//   unchanged. DSA_TEST_DIGESTS_OUT=FILE writes "name digest" lines; a file of such lines given
//   by DSA_TEST_DIGESTS_EXPECT (or tests/gpu/golden_digests.txt under the working directory or
//   two levels up, where CTest runs) is held line by line: every case it names must match.
//   tools/gpu_session.sh records the file of the build before a change and checks the new build
//   against it in the same device call.
// The digests do not depend on the device's SM count (no case's bits do: the split variant's
// lse, which merges chunks by count, is left out).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/sha256.hpp"
#include "families/sm90_indexer_lean.hpp"
#include "gpu_cases.hpp"
#include "gpu_runner.hpp"
#include "topk_run.hpp"

using namespace dsa_gpu_test;
namespace ds = dsa_support;

namespace {

struct DigestCase {
  std::string name;
  std::function<std::string()> digest;  // runs the case once
};

template <class T>
void hash_vec(dsa_indexer::detail::Sha256& h, const std::vector<T>& v) {
  h.field(std::to_string(v.size()));
  if (!v.empty()) h.update(v.data(), v.size() * sizeof(T));
}

DigestCase scores_case(std::string name, HostProblem p, KernelFamily family, uint64_t seed, int consumers = 2) {
  return {std::move(name), [p, family, seed, consumers]() mutable {
            ds::fill_random(p, seed);
            auto dp = ds::upload(p);
            // lean's consumer warpgroups for this case, the process-wide setting restored after
            struct Consumers {
              int saved = dsa_indexer::detail::lean_consumers();
              explicit Consumers(int c) { dsa_indexer::detail::set_lean_consumers(c); }
              ~Consumers() { dsa_indexer::detail::set_lean_consumers(saved); }
            } scoped(consumers);
            const ds::GpuResult r = ds::run(p, dp, family);
            dsa_indexer::detail::Sha256 h;
            hash_vec(h, r.scores);
            hash_vec(h, r.lse);
            return h.hex_digest();
          }};
}

DigestCase topk_case(std::string name, HostProblem p, KernelFamily family, int k, bool sorted, uint64_t seed) {
  return {std::move(name), [p, family, k, sorted, seed]() mutable {
            ds::fill_random(p, seed);
            auto dp = ds::upload(p);
            const TopkOut r = run_topk(p, dp, k, {family, sorted});
            dsa_indexer::detail::Sha256 h;
            hash_vec(h, r.indices);
            hash_vec(h, r.values);
            hash_vec(h, r.softmax);
            return h.hex_digest();
          }};
}

HostProblem with(HostProblem p, const std::function<void(HostProblem&)>& f) {
  f(p);
  return p;
}

std::vector<DigestCase> digest_cases() {
  using F = KernelFamily;
  std::vector<DigestCase> c;
  const HostProblem head = with(bshd(1, 2048, 3000, 64, 2), [](HostProblem& p) { p.sm_scale = 0.125f; });
  const HostProblem h32 = bshd(1, 132 * 16, 3000, 32, 2), h16 = bshd(1, 132 * 32, 3000, 16, 2);
  const HostProblem wf32 = with(head, [](HostProblem& p) { p.w_f32 = true; });
  const HostProblem lse = with(head, [](HostProblem& p) { p.lse = true; });
  const HostProblem ragged = bshd(1, 1056, 127, 64, 1);
  const HostProblem split = with(bshd(1, 512, 16384, 64, 1), [](HostProblem& p) { p.offsets = {16384 - 512}; });
  const HostProblem thd_l = thd({4000, 17, 3000}, {2000, 40, 3000}, 64, 2, Layout::thd_local);
  const HostProblem thd_g = thd({5000, 3000}, {2500, 1500}, 64, 1, Layout::thd_global);
  auto fp8 = [](HostProblem p) {
    p.fp8 = true;
    return p;
  };
  for (F f : {F::lean, F::generic}) {
    const std::string fam = f == F::lean ? "lean" : "generic";
    c.push_back(scores_case(fam + " bf16 H64 S_q 2048 S_k 3000 r2", head, f, 90001));
    c.push_back(scores_case(fam + " bf16 H64 sm_scale 1", with(head, [](HostProblem& p) { p.sm_scale = 1.0f; }), f, 90002));
    c.push_back(scores_case(fam + " fp32 W H64", wf32, f, 90003));
    c.push_back(scores_case(fam + " bf16 H32", h32, f, 90004));
    c.push_back(scores_case(fam + " bf16 H16", h16, f, 90005));
    c.push_back(scores_case(fam + " bf16 H64 lse", lse, f, 90006));
    c.push_back(scores_case(fam + " bf16 ragged S_k 127", ragged, f, 90007));
    c.push_back(scores_case(fam + " bf16 S_q 512 S_k 16384 (lean: split)", split, f, 90008));
    c.push_back(scores_case(fam + " THD local", thd_l, f, 90009));
    c.push_back(scores_case(fam + " THD global", thd_g, f, 90010));
    c.push_back(scores_case(fam + " FP8 H64", fp8(head), f, 90011));
    c.push_back(scores_case(fam + " FP8 fp32 W", fp8(wf32), f, 90012));
    c.push_back(scores_case(fam + " FP8 H32", fp8(h32), f, 90013));
    c.push_back(scores_case(fam + " FP8 H16", fp8(h16), f, 90014));
    c.push_back(scores_case(fam + " FP8 lse", fp8(lse), f, 90015));
    c.push_back(scores_case(fam + " FP8 S_q 512 S_k 16384 (lean: split)", fp8(split), f, 90016));
  }
  for (int64_t h : {64, 32, 16}) {
    const HostProblem p = h == 64 ? head : h == 32 ? h32 : h16;
    c.push_back(scores_case(fmt::format("lean4 bf16 H{}", h), p, F::lean, 90020 + static_cast<uint64_t>(h), 4));
  }
  const HostProblem tk = with(bshd(1, 2048, 16384, 64, 1), [](HostProblem& p) {
    p.offsets = {16384 - 2048};
    p.sm_scale = 0.125f;
  });
  for (F f : {F::topk_unfused, F::topk_fused})
    for (int k : {2048, 512})
      for (bool sorted : {false, true})
        c.push_back(topk_case(fmt::format("{} k {} {}", f == F::topk_fused ? "topk_fused" : "topk_unfused", k,
                                          sorted ? "by score" : "by index"),
                              tk, f, k, sorted, 90100 + static_cast<uint64_t>(k)));
  return c;
}

std::map<std::string, std::string> read_digests(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) continue;
    m[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return m;
}

std::string golden_path() {
  if (const char* e = std::getenv("DSA_TEST_DIGESTS_EXPECT"); e != nullptr && *e != '\0') return e;
  for (const char* p : {"tests/gpu/golden_digests.txt", "../../tests/gpu/golden_digests.txt"})
    if (std::ifstream(p).good()) return p;
  return {};
}

}  // namespace

TEST_CASE("digests: fixed problems give the same bits run to run and as the recorded build", "[digests]") {
  const std::string expect_path = golden_path();
  const std::map<std::string, std::string> expect = expect_path.empty() ? std::map<std::string, std::string>{}
                                                                         : read_digests(expect_path);
  if (expect_path.empty()) WARN("no recorded digests (DSA_TEST_DIGESTS_EXPECT): run to run only");
  else REQUIRE(!expect.empty());
  std::ostringstream out;
  size_t matched = 0;
  for (DigestCase& dc : digest_cases()) {
    INFO(dc.name);
    const std::string a = dc.digest(), b = dc.digest();
    CHECK(a == b);
    out << dc.name << '\t' << a << '\n';
    if (auto it = expect.find(dc.name); it != expect.end()) {
      CHECK(a == it->second);
      ++matched;
    }
  }
  if (!expect_path.empty()) {
    INFO(expect_path);
    CHECK(matched == expect.size());  // every recorded case is still a case
  }
  if (const char* o = std::getenv("DSA_TEST_DIGESTS_OUT"); o != nullptr && *o != '\0') {
    std::ofstream f(o);
    f << out.str();
    REQUIRE(f.good());
  }
}
