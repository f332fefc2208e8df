#include "cli_topk.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>

#include "core/device_info.hpp"
#include "cuda/driver.hpp"
#include "dispatch/family.hpp"
#include "dsa_indexer/errors.hpp"
#include "dsa_indexer/topk.hpp"
#include "event_timing.hpp"
#include "families/sm90_topk_fused.hpp"
#include "families/sm90_topk_unfused.hpp"
#include "gpu_runner.hpp"
#include "host_problem.hpp"
#include "jit/runtime.hpp"
#include "ops/topk.hpp"

namespace dd = dsa_indexer::detail;
using namespace dsa_support;

namespace dsa_cli {
namespace {

struct TopkCase {
  std::string name;
  HostProblem p;
};

// BSHD, H 64, D 128, sm_scale 0.125. `end_at_sk`: q_causal_offsets S_k - S_q - 1 in every batch
// entry (issue 20's table: the rows of a prefill chunk at the end of a long context).
HostProblem topk_bshd(int64_t batch, int64_t sq, int64_t sk, int64_t ratio, bool end_at_sk) {
  HostProblem p;
  p.layout = Layout::bshd;
  p.heads = 64;
  p.batch = batch;
  p.s_q = sq;
  p.s_k = sk;
  p.ratio = ratio;
  p.sm_scale = 0.125f;
  if (end_at_sk) p.offsets.assign(static_cast<size_t>(batch), static_cast<int32_t>(sk - sq - 1));
  return p;
}

// THD, local columns, ratio 1: segments of s query and s key rows, causal inside each.
HostProblem topk_thd(const std::vector<int64_t>& segs) {
  HostProblem p;
  p.layout = Layout::thd_local;
  p.heads = 64;
  p.ratio = 1;
  p.sm_scale = 0.125f;
  p.cu_q = {0};
  p.cu_k = {0};
  for (int64_t s : segs) {
    p.cu_q.push_back(p.cu_q.back() + static_cast<int32_t>(s));
    p.cu_k.push_back(p.cu_k.back() + static_cast<int32_t>(s));
  }
  return p;
}

// The shapes of issue 20's table (and S_q 16384 / S_k 8192 ratio 2: rows of 4097..8192 keys), then B 4 and a THD packing (bench/peers.py topk_cases: the
// same list, same order; python/tests/test_bench_tools.py holds them equal).
std::vector<TopkCase> topk_bench_cases() {
  std::vector<TopkCase> cases;
  cases.push_back({"topk bshd S_q 8192 S_k 16384 r1", topk_bshd(1, 8192, 16384, 1, true)});
  cases.push_back({"topk bshd S_q 8192 S_k 65536 r1", topk_bshd(1, 8192, 65536, 1, true)});
  cases.push_back({"topk bshd S_q 4096 S_k 131072 r1", topk_bshd(1, 4096, 131072, 1, true)});
  cases.push_back({"topk bshd S_q 2048 S_k 262144 r1", topk_bshd(1, 2048, 262144, 1, true)});
  cases.push_back({"topk bshd S_q 16384 S_k 4096 r4", topk_bshd(1, 16384, 4096, 4, false)});
  cases.push_back({"topk bshd S_q 16384 S_k 8192 r2", topk_bshd(1, 16384, 8192, 2, false)});
  cases.push_back({"topk bshd B4 S_q 4096 S_k 16384 r1", topk_bshd(4, 4096, 16384, 1, true)});
  cases.push_back({"topk thd r1 3 ragged T_q 16384", topk_thd({5462, 8198, 2724})});
  return cases;
}

// The reference selection of one score row: the k best visible columns [lo, hi) by (score desc,
// column asc), in ascending column order, padded with -1 (the contract of indexer_topk).
std::vector<int32_t> reference_topk(const float* row, int64_t lo, int64_t hi, int k) {
  std::vector<int32_t> idx(static_cast<size_t>(std::max<int64_t>(hi - lo, 0)));
  std::iota(idx.begin(), idx.end(), static_cast<int32_t>(lo));
  auto better = [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; };
  if (idx.size() > static_cast<size_t>(k)) {
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
    idx.resize(static_cast<size_t>(k));
  }
  std::sort(idx.begin(), idx.end());
  idx.resize(static_cast<size_t>(k), -1);
  return idx;
}

void download_at(const DeviceBuffer& b, size_t offset, void* dst, size_t n) {
  dd::ScopedContext ctx(0);
  DSA_CU(cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(b.get()) + offset, n));
}

// One set's top-k operands: the indices output (B, S_q, k) / (T_q, k).
dsa_indexer::TensorDesc indices_desc(const HostProblem& p, const DeviceBuffer& b, int k) {
  using dsa_indexer::DType;
  using dsa_indexer::TensorDesc;
  return p.thd() ? TensorDesc::contiguous(b.get(), DType::i32, {p.rows(), k})
                 : TensorDesc::contiguous(b.get(), DType::i32, {p.batch, p.s_q, k});
}

dsa_indexer::IndexerOptions topk_options(const DeviceProblem& dp, dsa_indexer::KernelFamily family = dsa_indexer::KernelFamily::automatic) {
  dsa_indexer::IndexerOptions o = dp.opt;
  o.family = family;
  return o;
}

// Rows of set 0 checked against the reference selection of the scores indexer_forward wrote for
// the same inputs (`scores`: that set's score matrix, `indices` its top-k): every row of a
// small problem, else an even sample with the first and last rows.
struct Check {
  int64_t rows = 0, mismatches = 0;
  std::string first;
};
Check check_rows(const HostProblem& p, const DeviceBuffer& scores, const DeviceBuffer& indices, int k, int64_t max_rows) {
  Check c;
  const int64_t rows = p.rows(), cols = p.cols();
  std::vector<int64_t> pick;
  if (rows <= max_rows) {
    for (int64_t r = 0; r < rows; ++r) pick.push_back(r);
  } else {
    for (int64_t i = 0; i < max_rows; ++i) pick.push_back(i * (rows - 1) / (max_rows - 1));
  }
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<int32_t> got(static_cast<size_t>(k));
  for (int64_t r : pick) {
    download_at(scores, static_cast<size_t>(r * cols) * 4, row.data(), row.size() * 4);
    download_at(indices, static_cast<size_t>(r * k) * 4, got.data(), got.size() * 4);
    int64_t lo = 0, hi = 0;
    row_window(p, r, &lo, &hi);
    if (got != reference_topk(row.data(), lo, hi, k) && c.mismatches++ == 0)
      c.first = fmt::format("row {} (visible [{}, {})): first index {} ", r, lo, hi, got[0]);
    ++c.rows;
  }
  return c;
}

std::vector<DeviceProblem> upload_sets(HostProblem& p, uint64_t seed, int max_sets) {
  fill_random(p, seed);
  const double set_bytes = (p.q.size() + p.k.size() + p.w_bf16.size()) * 2.0 + double(p.q8.size() + p.k8.size()) +
                           p.rows() * static_cast<double>(p.cols()) * 4;
  const int nsets = std::min(max_sets, std::max(2, static_cast<int>(std::ceil(200e6 / set_bytes))));
  std::vector<DeviceProblem> sets;
  for (int i = 0; i < nsets; ++i) {
    HostProblem pi = p;
    if (i) fill_random(pi, seed + static_cast<uint64_t>(i));
    sets.push_back(upload(pi));
  }
  return sets;
}

Timed time_scores(std::vector<DeviceProblem>& sets, int reps) {
  dd::ScopedContext ctx(0);
  for (auto& s : sets) s.opt.family = dsa_indexer::KernelFamily::automatic;
  auto call = [&](int i) {
    auto& s = sets[static_cast<size_t>(i) % sets.size()];
    dsa_indexer::indexer_forward(s.tq, s.tk, s.tw, s.tout, s.opt, nullptr);
  };
  for (int i = 0; i < 3; ++i) call(i);
  return event_times(reps, nullptr, 1, call);
}

double mib(double bytes) { return bytes / double(1 << 20); }

}  // namespace

std::vector<int> parse_topk_ks(const std::string& list) {
  std::vector<int> ks;
  std::stringstream ss(list);
  std::string v;
  while (std::getline(ss, v, ',')) {
    const bool digits = !v.empty() && v.size() <= 5 && v.find_first_not_of("0123456789") == std::string::npos;
    const int k = digits ? std::stoi(v) : 0;
    if (k < 1 || k > dsa_indexer::kTopkMaxK)
      throw dsa_indexer::InvalidArgument(
          fmt::format("--topk-k: expected a comma list of integers in [1, {}], got '{}'", dsa_indexer::kTopkMaxK, list));
    ks.push_back(k);
  }
  if (ks.empty()) throw dsa_indexer::InvalidArgument("--topk-k: expected a comma list of integers in [1, 2048], got ''");
  return ks;
}

std::string run_topk_bench(const TopkBenchOptions& o) {
  std::vector<TopkCase> cases = topk_bench_cases();
  if (o.quick) cases.resize(2);
  if (o.fp8)
    for (TopkCase& c : cases) {
      c.name += " e4m3";
      c.p.fp8 = true;  // q_scale (token, head) and k_scale (token) given: fill_random draws them
    }
  if (o.lse)
    for (TopkCase& c : cases) c.name += " lse";
  if (!o.match.empty())
    cases.erase(std::remove_if(cases.begin(), cases.end(), [&](const TopkCase& c) { return c.name.find(o.match) == std::string::npos; }),
                cases.end());
  const dd::DeviceInfo& dev = dd::device_info(0);
  const uint64_t budget = o.budget_mib << 20;
  dd::set_topk_unfused_blocking(budget, o.one_wave);
  dd::set_topk_fused_budget(budget);
  dd::set_topk_lean_window_blocks(o.lean_windows);
  dd::set_topk_fused_part(o.fused_part);
  dd::set_topk_lse_lanes(o.lse_lanes);
  dd::set_topk_select_short(o.select_short);
  dd::set_topk_select_medium(o.select_medium);
  dd::set_topk_select_regs(o.select_regs);
  dd::set_topk_select_regs_ctas(o.regs_ctas);
  dd::set_topk_select_regs_narrow(o.regs_narrow);
  dd::set_topk_select_narrow_long(o.narrow_long);
  dd::set_topk_select_regs_mid(o.regs_mid);
  // A line for each on/off option the command line set: "<what> <on text | off text>".
  auto say = [](const std::optional<bool>& set, const char* what, const char* on, const char* off) {
    if (set) fmt::print("\nbench --op topk: {} {}\n", what, *set ? on : off);
  };
  say(o.regs_mid, "selections of 4097 to 8192 cells", "by the narrow register rows (calls without softmax and lse: these rows)",
      "by the general kernel");
  say(o.narrow_long, "long rows (past 8192 cells) outside the register rows selected by",
      "256 threads (calls without softmax and lse: these rows)", "512 threads");
  say(o.regs_narrow, "register rows of at most 4096 cells",
      "by the 256-thread short-row kernel first (calls without softmax and lse: these rows)",
      "by the 512-thread kernel (no narrow register rows)");
  if (o.regs_ctas >= 0)
    fmt::print("\nbench --op topk: the register rows' first launch on {}\n",
               o.regs_ctas == 0 ? std::string("one CTA per row") : fmt::format("{} CTAs per SM", o.regs_ctas));
  say(o.select_regs, "long-row selections (512 threads) select",
      "their rows of at most 8192 cells from registers, the others by the general path (register rows, forced)",
      "every row by the general kernel (no register rows)");
  say(o.select_medium, "rows of 4097 to 8192 cells selected by", "the 8-word short-row kernel (the row in registers)",
      "the general kernel");
  say(o.select_short, "rows of at most 4096 cells selected by", "the short-row kernel (the row in registers)", "the general kernel");
  if (o.lse)
    fmt::print("\nbench --op topk: with the lse output (scores and top-k), BSHD lse {}\n",
               o.lse_lanes.value_or(dd::kTopkLseLanes) ? "in the fused sweep's lane order (both paths)" : "by the selection's two-pass sum (unfused only)");
  say(o.fused_part, "the fused sweep's appends after the cut", "in warp-private partitions (no atomic)",
      "by a shared atomic per warp and tile");
  say(o.lean_windows, "blocks with explicit windows (THD) on", "lean's row-windows variant", "generic");
  if (budget != 0 || o.one_wave)
    fmt::print("\nbench --op topk: block budget {} MiB (0: the library's){}\n", o.budget_mib,
               o.one_wave ? "; unfused blocks of one wave of rows at least (beyond the budget at long S_k)" : "");
  fmt::print("\nbench --op topk: indexer_topk, automatic (auto = the family it takes: topk_unfused = block scores into a "
             "bounded workspace, then the exact selection; topk_fused = the lean sweep's candidates, then their selection; "
             "indices only, caller-owned workspace) against the scores alone (automatic family) of the same shape; "
             "x = topk / scores time; unfused, fused = each family by name where its gates hold (xf = fused / scores); "
             "their indices must equal the automatic call's bitwise; select = our selection kernel alone over the whole "
             "score matrix (warm); memory = workspace + indices against the score matrix; check = sampled rows against a "
             "reference selection of our own scores\n");
  fmt::print("{:<36} {:>5} {:>13} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9} {:>6} {:>9}  {}\n",
             "shape", "k", "auto", "scores c", "scores w", "topk c", "topk w", "x c", "x w", "unfused c", "unfused w", "select", "topk MiB", "score MiB", "mem", "fused c", "fused w",
             "xf c", "fused MiB", "check");
  std::string json;
  for (auto& c : cases) {
    std::vector<DeviceProblem> sets = upload_sets(c.p, 42, 4);
    const int64_t rows = c.p.rows(), cols = c.p.cols();
    std::vector<DeviceBuffer> lse_out;  // --topk-lse: each set's lse, (B, S_q) or (T_q)
    if (o.lse)
      for (DeviceProblem& s : sets) {
        lse_out.emplace_back(static_cast<size_t>(rows) * 4);
        s.opt.lse = c.p.thd() ? dsa_indexer::TensorDesc::contiguous(lse_out.back().get(), dsa_indexer::DType::f32, {rows})
                              : dsa_indexer::TensorDesc::contiguous(lse_out.back().get(), dsa_indexer::DType::f32, {c.p.batch, c.p.s_q});
      }
    const Timed sc = time_scores(sets, o.reps);  // also leaves every set's score matrix written
    const Timed sw = graph_times(o.reps, 10, [&](CUstream st) {
      dsa_indexer::indexer_forward(sets[0].tq, sets[0].tk, sets[0].tw, sets[0].tout, sets[0].opt, st);
    });
    for (int k : o.ks) {
      std::vector<DeviceBuffer> ind;
      for (size_t i = 0; i < sets.size(); ++i) ind.emplace_back(static_cast<size_t>(rows * k) * 4);
      dsa_indexer::TopkOptions t;
      t.k = k;
      const dsa_indexer::IndexerOptions opt = topk_options(sets[0]);
      const size_t ws_bytes = dsa_indexer::indexer_topk_workspace_size(sets[0].tq, sets[0].tk, sets[0].tw, indices_desc(c.p, ind[0], k), opt, t);
      DeviceBuffer ws(ws_bytes);
      t.workspace = ws.get();
      t.workspace_bytes = ws_bytes;
      auto call = [&](size_t i, CUstream st) {
        dsa_indexer::indexer_topk(sets[i].tq, sets[i].tk, sets[i].tw, indices_desc(c.p, ind[i], k), topk_options(sets[i]), t, st);
      };
      Timed tc, tw, sel;
      {
        dd::ScopedContext ctx(0);
        for (int i = 0; i < 3; ++i) call(static_cast<size_t>(i) % sets.size(), nullptr);
        tc = event_times(o.reps, nullptr, 1, [&](int i) { call(static_cast<size_t>(i) % sets.size(), nullptr); });
      }
      tw = graph_times(o.reps, 10, [&](CUstream st) { call(0, st); });
      sync_device();
      const Check chk = check_rows(c.p, sets[0].out, ind[0], k, 64);

      // Our selection kernel alone over set 0's whole score matrix (every row's window), as the
      // family launches it after a block's scores; its indices must equal indexer_topk's.
      bool select_equal = false;
      {
        dd::ScopedContext ctx(0);
        const dd::Problem tp = dd::validate_topk(sets[0].tq, sets[0].tk, sets[0].tw, indices_desc(c.p, ind[0], k), opt, t, nullptr);
        const dd::Plan plan = dd::make_plan(tp, dev, dd::topk_unfused_family());
        auto kernel = dd::Runtime::get().kernel(plan.spec, 0);
        std::vector<dsa::TopkRow> tr(static_cast<size_t>(rows));
        int64_t fitting = 0;  // rows the register rows' policy counts (the family counts them from the problem)
        for (int64_t r = 0; r < rows; ++r) {
          int64_t lo = 0, hi = 0;
          row_window(c.p, r, &lo, &hi);
          tr[static_cast<size_t>(r)] = dsa::TopkRow{static_cast<int32_t>(lo), static_cast<int32_t>(hi), 0, 0};
          fitting += hi - lo <= dd::kTopkRegsCells;
        }
        DeviceBuffer rows_buf(tr.size() * sizeof(dsa::TopkRow)), sel_ind(static_cast<size_t>(rows * k) * 4);
        rows_buf.upload(tr.data(), tr.size() * sizeof(dsa::TopkRow));
        dsa::TopkSelectArgs sa{};
        sa.scores = static_cast<const float*>(sets[0].out.get());
        sa.ld = cols;
        sa.rows = static_cast<const dsa::TopkRow*>(rows_buf.get());
        sa.n_rows = rows;
        sa.k = k;
        sa.indices = static_cast<int32_t*>(sel_ind.get());
        sa.indices_ld = k;
        for (int i = 0; i < 3; ++i) dd::launch_topk_select(plan, *kernel, sa, cols, fitting, nullptr);
        sel = event_times(o.reps, nullptr, 1, [&](int) { dd::launch_topk_select(plan, *kernel, sa, cols, fitting, nullptr); });
        sync_device();
        std::vector<int32_t> a(static_cast<size_t>(rows * k)), b(a.size());
        ind[0].download(a.data(), a.size() * 4);
        sel_ind.download(b.data(), b.size() * 4);
        select_equal = a == b;
      }
      // Each path by name, where its gates hold: cold and warm, and its indices against the
      // automatic call's (set 0) bitwise; fused == unfused is the contract.
      struct Named {
        bool ran = false, equal = false;
        Timed cold, warm;
        size_t ws = 0;
      };
      auto run_named = [&](dsa_indexer::KernelFamily fam) {
        Named r;
        const dsa_indexer::IndexerOptions fo = topk_options(sets[0], fam);
        const dd::Problem tp = dd::validate_topk(sets[0].tq, sets[0].tk, sets[0].tw, indices_desc(c.p, ind[0], k), fo, t, nullptr);
        try {
          dd::choose_family(tp, dev, fam, false);
        } catch (const dsa_indexer::UnsupportedConfig&) {
          return r;
        }
        dsa_indexer::TopkOptions tf;
        tf.k = k;
        r.ws = dsa_indexer::indexer_topk_workspace_size(sets[0].tq, sets[0].tk, sets[0].tw, indices_desc(c.p, ind[0], k), fo, tf);
        DeviceBuffer wsf(r.ws), own_ind(static_cast<size_t>(rows * k) * 4);
        tf.workspace = wsf.get();
        tf.workspace_bytes = r.ws;
        auto fcall = [&](size_t i, CUstream st) {
          const DeviceBuffer& out = i == 0 ? own_ind : ind[i];
          dsa_indexer::indexer_topk(sets[i].tq, sets[i].tk, sets[i].tw, indices_desc(c.p, out, k), topk_options(sets[i], fam), tf, st);
        };
        {
          dd::ScopedContext ctx(0);
          for (int i = 0; i < 3; ++i) fcall(static_cast<size_t>(i) % sets.size(), nullptr);
          r.cold = event_times(o.reps, nullptr, 1, [&](int i) { fcall(static_cast<size_t>(i) % sets.size(), nullptr); });
        }
        r.warm = graph_times(o.reps, 10, [&](CUstream st) { fcall(0, st); });
        sync_device();
        std::vector<int32_t> a(static_cast<size_t>(rows * k)), b(a.size());
        ind[0].download(a.data(), a.size() * 4);
        own_ind.download(b.data(), b.size() * 4);
        r.equal = a == b;
        r.ran = true;
        return r;
      };
      const Named un = run_named(dsa_indexer::KernelFamily::topk_unfused);
      const Named fu = run_named(dsa_indexer::KernelFamily::topk_fused);
      std::string auto_family = "?";
      {
        const dd::Problem tp = dd::validate_topk(sets[0].tq, sets[0].tk, sets[0].tw, indices_desc(c.p, ind[0], k), opt, t, nullptr);
        auto_family = dd::choose_family(tp, dev, dsa_indexer::KernelFamily::automatic, false).option();
      }
      const double topk_bytes = double(ws_bytes) + double(rows) * k * 4, score_bytes = double(rows) * cols * 4;
      const double fused_bytes = double(fu.ws) + double(rows) * k * 4;
      const bool ok = chk.mismatches == 0 && select_equal && (!fu.ran || fu.equal) && (!un.ran || un.equal);
      const std::string verdict = ok ? fmt::format("ok ({} rows)", chk.rows)
                                     : fmt::format("FAILED: {} of {} rows differ{}{}{}{}", chk.mismatches, chk.rows,
                                                   select_equal ? "" : ", select alone != indexer_topk",
                                                   !fu.ran || fu.equal ? "" : ", fused != automatic",
                                                   !un.ran || un.equal ? "" : ", unfused != automatic",
                                                   chk.first.empty() ? "" : "; " + chk.first);
      auto named_us = [](const Named& n, const Timed& tm) { return n.ran ? fmt::format("{:.1f}", tm.median_us) : std::string("-"); };
      fmt::print("{:<36} {:>5} {:>13} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>6.2f} {:>6.2f} {:>9} {:>9} {:>9.1f} {:>9.0f} {:>9.0f} {:>6.3f} "
                 "{:>9} {:>9} {:>6} {:>9}  {}\n",
                 c.name, k, auto_family, sc.median_us, sw.median_us, tc.median_us, tw.median_us, tc.median_us / sc.median_us,
                 tw.median_us / sw.median_us, named_us(un, un.cold), named_us(un, un.warm), sel.median_us, mib(topk_bytes), mib(score_bytes), topk_bytes / score_bytes, named_us(fu, fu.cold),
                 named_us(fu, fu.warm), fu.ran ? fmt::format("{:.3f}", fu.cold.median_us / sc.median_us) : std::string("-"),
                 fu.ran ? fmt::format("{:.0f}", mib(fused_bytes)) : std::string("-"), verdict);
      std::fflush(stdout);
      json += fmt::format("{}    {{\"name\": \"{}\", \"k\": {}, \"rows\": {}, \"cols\": {}, \"scores_cold_us\": {:.2f}, \"scores_warm_us\": {:.2f}, "
                          "\"topk_cold_us\": {:.2f}, \"topk_cold_min_us\": {:.2f}, \"topk_warm_us\": {:.2f}, \"select_us\": {:.2f}, "
                          "\"workspace_bytes\": {}, \"indices_bytes\": {}, \"scores_bytes\": {}, \"checked_rows\": {}, "
                          "\"mismatched_rows\": {}, \"select_equal\": {}, \"fused_cold_us\": {}, \"fused_warm_us\": {}, "
                          "\"fused_workspace_bytes\": {}, \"fused_equal\": {}, \"auto_family\": \"{}\", \"unfused_cold_us\": {}, "
                          "\"unfused_warm_us\": {}, \"unfused_workspace_bytes\": {}}}",
                          json.empty() ? "" : ",\n", c.name, k, rows, cols, sc.median_us, sw.median_us, tc.median_us, tc.min_us,
                          tw.median_us, sel.median_us, ws_bytes, rows * k * 4, rows * cols * 4, chk.rows, chk.mismatches,
                          select_equal ? "true" : "false", fu.ran ? fmt::format("{:.2f}", fu.cold.median_us) : "null",
                          fu.ran ? fmt::format("{:.2f}", fu.warm.median_us) : "null", fu.ws,
                          fu.ran ? (fu.equal ? "true" : "false") : "null", auto_family,
                          un.ran ? fmt::format("{:.2f}", un.cold.median_us) : "null", un.ran ? fmt::format("{:.2f}", un.warm.median_us) : "null",
                          un.ws);
    }
  }
  return json;
}

int run_topk_demo() {
  const dd::DeviceInfo& dev = dd::device_info(0);
  // DeepSeek-V4-like: the indexer over 4x-compressed keys (ratio 4), H 64, k 512.
  HostProblem p = topk_bshd(1, 8192, 2048, 4, false);
  const int k = 512;
  fmt::print("demo --op topk: {} ({} SMs); problem {}, k {}\n", dev.name, dev.sm_count, p.describe(), k);
  std::vector<DeviceProblem> sets = upload_sets(p, 20261202, 3);
  DeviceProblem& dp = sets[0];
  const int64_t rows = p.rows(), cols = p.cols();
  DeviceBuffer ind(static_cast<size_t>(rows * k) * 4), val(static_cast<size_t>(rows * k) * 4);
  ind.fill_u32(kPoison);
  val.fill_u32(kPoison);
  dsa_indexer::TopkOptions t;
  t.k = k;
  t.values = dsa_indexer::TensorDesc::contiguous(val.get(), dsa_indexer::DType::f32, {1, p.s_q, k});
  const auto t0 = std::chrono::steady_clock::now();
  dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, indices_desc(p, ind, k), topk_options(dp), t, nullptr);
  sync_device();
  const double first_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const GpuResult scores = run(p, dp, dsa_indexer::KernelFamily::automatic);
  std::vector<int32_t> got(static_cast<size_t>(rows * k));
  std::vector<float> got_val(got.size());
  ind.download(got.data(), got.size() * 4);
  val.download(got_val.data(), got_val.size() * 4);
  int64_t bad_rows = 0, bad_values = 0;
  std::string first;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t lo = 0, hi = 0;
    row_window(p, r, &lo, &hi);
    const float* row = &scores.scores[static_cast<size_t>(r * cols)];
    const auto ref = reference_topk(row, lo, hi, k);
    if (!std::equal(ref.begin(), ref.end(), got.begin() + r * k) && bad_rows++ == 0)
      first = fmt::format("row {}: index {} expected {}", r, got[static_cast<size_t>(r * k)], ref[0]);
    for (int s = 0; s < k; ++s) {
      const int32_t c = ref[static_cast<size_t>(s)];
      const float want = c < 0 ? -INFINITY : row[c];
      if (std::memcmp(&want, &got_val[static_cast<size_t>(r * k + s)], 4) != 0) ++bad_values;
    }
  }
  // The same bits run to run.
  DeviceBuffer ind2(static_cast<size_t>(rows * k) * 4);
  dsa_indexer::TopkOptions t2;
  t2.k = k;
  dsa_indexer::indexer_topk(dp.tq, dp.tk, dp.tw, indices_desc(p, ind2, k), topk_options(dp), t2, nullptr);
  sync_device();
  std::vector<int32_t> again(got.size());
  ind2.download(again.data(), again.size() * 4);
  const bool same = again == got;
  const bool ok = bad_rows == 0 && bad_values == 0 && same;
  fmt::print("demo --op topk: first call (compiles or cache loads + run) {:.3f} s\n", first_s);
  fmt::print("demo --op topk: all {} rows vs a reference selection of our own scores: {} rows differ, {} values not bitwise "
             "the scores'; run to run {} -> {}\n", rows, bad_rows, bad_values, same ? "bitwise identical" : "DIFFERENT", ok ? "VERIFIED" : "FAILED");
  if (!first.empty()) fmt::print("demo --op topk: first problem: {}\n", first);
  const Timed ts = time_scores(sets, 30);
  const size_t ws_bytes = dsa_indexer::indexer_topk_workspace_size(dp.tq, dp.tk, dp.tw, indices_desc(p, ind2, k), topk_options(dp), t2);
  DeviceBuffer ws(ws_bytes);
  t2.workspace = ws.get();
  t2.workspace_bytes = ws_bytes;
  Timed tt;
  {
    dd::ScopedContext ctx(0);
    auto call = [&](int i) {
      auto& s = sets[static_cast<size_t>(i) % sets.size()];
      dsa_indexer::indexer_topk(s.tq, s.tk, s.tw, indices_desc(p, ind2, k), topk_options(s), t2, nullptr);
    };
    for (int i = 0; i < 3; ++i) call(i);
    tt = event_times(30, nullptr, 1, call);
  }
  fmt::print("demo --op topk: median over 30 runs ({} rotating input sets): scores alone {:.1f} us, top-k {:.1f} us ({:.2f}x); "
             "memory: workspace {:.1f} MiB + indices {:.1f} MiB against a score matrix of {:.1f} MiB\n",
             sets.size(), ts.median_us, tt.median_us, tt.median_us / ts.median_us, mib(double(ws_bytes)), mib(double(rows) * k * 4),
             mib(double(rows) * cols * 4));
  return ok ? 0 : 1;
}

}  // namespace dsa_cli
