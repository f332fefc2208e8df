#include "ops/warmup.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <set>
#include <unordered_set>
#include <sstream>

#include "jit/cache_fs.hpp"
#include "dispatch/family.hpp"
#include "core/util.hpp"

namespace dsa_indexer::detail {
namespace {
// S_q, S_k (T_q, T_k) and the ratio: the public API's bound for each (validate.cpp).
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxManifestSms = 65535;
// A token as messages show it: at most 80 bytes of it (a line may hold megabytes), and a UTF-8
// byte order mark (invisible in a terminal) named.
std::string quoted_token(const std::string& tok) {
  constexpr std::size_t kShown = 80;
  const bool bom = tok.rfind("\xEF\xBB\xBF", 0) == 0;
  std::string t = bom ? tok.substr(3) : tok;
  std::string out = fmt::format("'{}'", t.size() > kShown ? t.substr(0, kShown) + "..." : t);
  if (t.size() > kShown) out += fmt::format(" ({} bytes)", t.size());
  if (bom) out = "a UTF-8 byte order mark before " + out + " (save the file without one)";
  return out;
}

}  // namespace

std::string read_manifest_file(const std::string& path) {
  std::string text;
  const std::string why = read_regular_file(path, kMaxManifestBytes, &text);
  if (!why.empty())
    fail_param<InvalidArgument>("manifest", path, fmt::format("a readable regular file of at most {} bytes", kMaxManifestBytes), why);
  return text;
}

bool parse_manifest_line(const std::string& text, int no, const std::string& file, ManifestProblem* out) {
  std::string line = text;
  if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
  std::istringstream toks(line);
  std::string tok;
  ManifestProblem p;
  p.file = file;
  p.line = no;
  bool any = false, have_sq = false, have_sk = false;
  auto bad = [&](const std::string& what, const std::string& expected) {
    fail_param<InvalidArgument>("manifest", fmt::format("{}:{}: {}", file, no, what), expected, quoted_token(tok));
  };
  std::set<std::string> seen;
  while (toks >> tok) {
    any = true;
    const auto eq = tok.find('=');
    if (eq == std::string::npos) bad("token", "key=value");
    const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    // A key given twice is an error, not "the last one wins": the line says two things.
    if (!seen.insert(k).second) bad(k, "each key once per line");
    // The ranges the public API accepts for the same value (validate.cpp): digits only, no
    // clamping, no wrap-around (strtoll saturates and a cast to int truncates).
    auto num = [&](int64_t lo, int64_t hi) {
      const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
      if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) bad(k, expected);
      errno = 0;
      const long long n = std::strtoll(v.c_str(), nullptr, 10);
      if (errno == ERANGE || n < lo || n > hi) bad(k, expected);
      return static_cast<int64_t>(n);
    };
    if (k == "op") {
      if (v == "scores") p.op = Operation::scores;
      else if (v == "topk") p.op = Operation::topk;
      else bad(k, "scores or topk");
    } else if (k == "k") {
      p.k = static_cast<int32_t>(num(1, kTopkMaxK));
    } else if (k == "layout") {
      if (v == "bshd") p.layout = Layout::bshd;
      else if (v == "thd_local" || v == "thd") p.layout = Layout::thd_local;
      else if (v == "thd_global") p.layout = Layout::thd_global;
      else bad(k, "bshd, thd_local or thd_global");
    } else if (k == "heads") {
      p.heads = static_cast<int>(num(1, kInt32Max));
      if (p.heads != 16 && p.heads != 32 && p.heads != 64) bad(k, "16, 32 or 64");
    } else if (k == "sq") {
      p.sq = num(1, kInt32Max);
      have_sq = true;
    } else if (k == "sk") {
      p.sk = num(1, kInt32Max);
      have_sk = true;
    } else if (k == "ratio") {
      p.ratio = num(1, kInt32Max);
    } else if (k == "batch") {
      p.batch = num(1, kInt32Max);
    } else if (k == "sms") {
      p.sms = static_cast<int32_t>(num(1, kMaxManifestSms));
    } else if (k == "w") {
      if (v == "bf16") p.w = DType::bf16;
      else if (v == "f32" || v == "fp32") p.w = DType::f32;
      else bad(k, "bf16 or f32");
    } else if (k == "in") {
      if (v == "bf16") p.qk = DType::bf16;
      else if (v == "e4m3") p.qk = DType::e4m3;
      else bad(k, "bf16 or e4m3 (the precision of q and k)");
    } else if (k == "lse") {
      if (v != "0" && v != "1") bad(k, "0 or 1");
      p.lse = v == "1";
    } else if (k == "columns") {
      if (v == "key") p.window_start = false;
      else if (v == "window_start") p.window_start = true;
      else bad(k, "key or window_start (explicit windows' output columns)");
    } else if (k == "windows") {
      if (v != "0" && v != "1") bad(k, "0 or 1 (explicit windows ks / ke; columns=window_start implies them)");
      p.windows = v == "1";
    } else if (k == "scale") {
      if (v == "any") p.scale = ManifestScale::any;
      else if (v == "1") p.scale = ManifestScale::one;
      else if (v == "both") p.scale = ManifestScale::both;
      else bad(k, "any, 1 or both");
    } else if (k == "family") {
      const Family* f = family_by_option(v);
      if (v == "auto") p.family = KernelFamily::automatic;
      else if (f) p.family = f->id();
      else bad(k, fmt::format("auto or one of {}", family_options()));
    } else {
      bad("key", "one of op, layout, heads, sq, sk, ratio, batch, sms, w, in, lse, columns, windows, scale, family, k");
    }
  }
  if (!any) return false;
  if (!have_sq || !have_sk) {
    tok = line;
    bad("line", "both sq= and sk=");
  }
  if (p.layout != Layout::bshd && p.batch != 1) {
    tok = "batch=" + std::to_string(p.batch);
    bad("batch", "1 on a THD line (a THD problem is one packed sequence)");
  }
  if (p.window_start && (p.layout != Layout::bshd || p.op != Operation::scores)) {
    tok = "columns=window_start";
    bad("columns", "key on a THD or op=topk line (window_start columns are BSHD scores')");
  }
  if (p.windows && (p.layout != Layout::bshd || p.op != Operation::scores)) {
    tok = "windows=1";
    bad("windows", "0 on a THD or op=topk line (explicit windows are BSHD scores' on a line)");
  }
  if (p.op != Operation::topk && seen.count("k")) {
    tok = "k=" + std::to_string(p.k);
    bad("k", "only on an op=topk line");
  }
  if (p.op == Operation::topk && p.layout == Layout::thd_global) {
    tok = "layout=thd_global";
    bad("layout", "bshd or thd_local on an op=topk line (global indices are a call option, not a variant)");
  }
  if (p.family != KernelFamily::automatic && family_for(p.family).operation() != p.op) {
    // A family serves one operation: say so here rather than at planning.
    tok = std::string("family=") + family_for(p.family).option();
    std::string same;
    for (const Family* f : families())
      if (f->operation() == p.op) same += std::string(same.empty() ? "" : ", ") + f->option();
    bad("family", fmt::format("auto or a family of operation {} ({})", operation_name(p.op), same));
  }
  *out = p;
  return true;
}

std::vector<ManifestProblem> parse_manifest(const std::string& text, const std::string& file) {
  std::vector<ManifestProblem> out;
  std::istringstream in(text);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ManifestProblem p;
    if (parse_manifest_line(line, ++no, file, &p)) out.push_back(p);
  }
  return out;
}

Problem manifest_problem(const ManifestProblem& m, float sm_scale) {
  Problem p;
  p.op = m.op;
  p.topk.k = m.k;
  p.layout = m.layout;
  p.heads = m.heads;
  p.head_dim = 128;
  p.w_dtype = m.w;
  p.qk_dtype = m.qk;
  p.has_lse = m.lse;
  p.ratio = m.ratio;
  p.sm_scale = sm_scale;
  p.batch = m.batch;
  p.s_q = p.t_q = m.sq;
  p.s_k = p.t_k = m.sk;
  p.rows = m.sq * m.batch;
  p.out_cols = m.sk;  // window_start: a width of sk columns (the variant does not depend on it)
  p.window_start = m.window_start;
  p.has_windows = m.window_start || m.windows;
  const int64_t H = m.heads, D = 128;
  const int64_t qs[3] = {m.sq * H * D, H * D, D}, ws[3] = {m.sq * H, H, 1};
  std::copy(qs, qs + 3, p.q_stride);
  std::copy(ws, ws + 3, p.w_stride);
  p.k_stride[0] = m.sk * D;
  p.k_stride[1] = D;
  p.out_stride[0] = m.sq * m.sk;
  p.out_stride[1] = m.sk;
  p.lse_stride[0] = m.sq;
  p.lse_stride[1] = 1;
  if (p.is_thd()) {  // one segment of sq query and sk key rows (lean THD keys ignore the packing)
    p.q_stride[0] = p.w_stride[0] = p.k_stride[0] = p.out_stride[0] = p.lse_stride[0] = 0;
    p.cu_q_host = {0, static_cast<int32_t>(m.sq)};
    p.cu_k_host = {0, static_cast<int32_t>(m.sk)};
  }
  return p;
}

namespace {
// The problem a manifest line describes, as validate() would produce it for contiguous,
// aligned operands with the line's B (1 unless given; the device pointers are never
// dereferenced by planning).

// The score variants the launch of `p` by `family` runs (Family::inner_problems), as the
// dispatcher picks them with and without the escape hatch.
// A fast-path family's inner problems have only fast-path families (the fused top-k's sweep):
// with the hatch set the call never reaches them.
template <class Add>
void add_inner_specs(const Family& family, const Problem& p, const DeviceInfo& dev, Add&& add) {
  for (const Problem& s : family.inner_problems(p, dev))
    for (bool hatch : {false, true}) {
      if (hatch && family.fast_path()) continue;
      add(make_plan(s, dev, choose_family(s, dev, family.inner_family(s), hatch), PlanPurpose::spec_only).spec);
    }
}
}  // namespace

std::vector<KernelSpec> call_specs(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec) {
  std::vector<KernelSpec> specs = {spec};
  add_inner_specs(family_of(spec), p, dev, [&](const KernelSpec& s) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  });
  return specs;
}

std::vector<KernelSpec> manifest_specs(const std::vector<ManifestProblem>& problems, const DeviceInfo& profile) {
  std::vector<KernelSpec> specs;
  std::unordered_set<std::string> seen;  // variant keys: a find() over specs made 100,000 lines quadratic
  auto add = [&](const KernelSpec& s) {
    if (seen.insert(s.variant_key()).second) specs.push_back(s);
  };
  for (const auto& m : problems) try {
    std::vector<float> scales;
    if (m.scale != ManifestScale::one) scales.push_back(0.125f);
    if (m.scale != ManifestScale::any) scales.push_back(1.0f);
    DeviceInfo dev = profile;
    if (m.sms > 0) dev.sm_count = m.sms;
    for (float sc : scales) {
      const Problem p = manifest_problem(m, sc);
      // An automatic line warms what the dispatcher picks and what it picks with the escape
      // hatch set, so that neither setting meets a compile.
      const Family& f = choose_family(p, dev, m.family, false);
      add(make_plan(p, dev, f, PlanPurpose::spec_only).spec);
      add_inner_specs(f, p, dev, add);
      if (m.family == KernelFamily::automatic) {
        const Family& h = choose_family(p, dev, m.family, true);
        add(make_plan(p, dev, h, PlanPurpose::spec_only).spec);
        if (&h != &f) add_inner_specs(h, p, dev, add);
      }
    }
  } catch (const UnsupportedConfig& e) {
    // The dispatcher names the entry point a call came through; a manifest line came through none.
    std::string msg = e.what();
    for (const char* entry : {"indexer_forward: ", "indexer_topk: "})
      if (msg.rfind(entry, 0) == 0) msg.erase(0, std::strlen(entry));
    throw UnsupportedConfig(fmt::format("manifest {}:{}: {}", m.file.empty() ? "(text)" : m.file, m.line, msg));
  }
  return specs;
}

std::string manifest_line(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec, const DeviceInfo& profile) {
  if (!spec.family) return std::string();
  const bool thd = p.layout != Layout::bshd;
  // The problem as the dispatcher saw it, with the family named so that the line implies this
  // variant only. Values that decide no spec are still the call's (a reader sees the shape);
  // an empty dimension becomes 1, which the verification below proves changes nothing.
  // A top-k line says op=topk first (a scores line says nothing: the default) and its k last.
  // THD: one segment of all the packed rows and keys, which implies the same variants wherever
  // the blocks' score variants do not depend on the packing (checked below, like the rest).
  const bool topk = p.op == Operation::topk;
  std::string line = fmt::format("{}layout={} heads={} sq={} sk={} ratio={} w={} lse={}", topk ? "op=topk " : "",
                                 layout_name(p.layout), p.heads, std::max<int64_t>(1, thd ? p.t_q : p.s_q),
                                 std::max<int64_t>(1, thd ? p.t_k : p.s_k), std::max<int64_t>(1, p.ratio),
                                 p.w_dtype == DType::f32 ? "f32" : "bf16", p.has_lse ? 1 : 0);
  if (p.qk_dtype == DType::e4m3) line += " in=e4m3";
  if (p.window_start) line += " columns=window_start";
  else if (p.has_windows && !thd && !topk) line += " windows=1";
  if (p.sm_scale == 1.0f) line += " scale=1";
  if (!thd && p.batch != 1) line += fmt::format(" batch={}", std::max<int64_t>(1, p.batch));
  if (dev.sm_count != profile.sm_count) line += fmt::format(" sms={}", dev.sm_count);
  line += fmt::format(" family={}", family_of(spec).option());
  if (topk) line += fmt::format(" k={}", p.topk.k);
  try {
    if (manifest_specs(parse_manifest(line, "recorded line"), profile) == call_specs(p, dev, spec))
      return line + "  # " + spec.variant_key();
  } catch (const Error&) {
    // a value outside the manifest's ranges, or a gate the profile does not pass: not expressible
  }
  return std::string();
}

WarmupSummary warmup(Runtime& rt, const std::vector<KernelSpec>& specs, const WarmupProgress& progress) {
  WarmupSummary s;
  const auto t0 = std::chrono::steady_clock::now();
  int i = 0;
  for (const auto& spec : specs) {
    ++i;
    std::string status;
    try {
      const std::string key = prepare(spec).disk_key;
      if (rt.disk().load(key)) {
        ++s.cached;
        status = "already cached";
      } else {
        const auto c0 = std::chrono::steady_clock::now();
        bool from_disk = false;
        rt.entry(spec, &from_disk);
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
        if (!rt.disk().load(key)) {
          ++s.failed;
          const std::string dir_problem = rt.disk().directory_problem();
          status = fmt::format("compiled in {:.2f} s but not stored: {}", sec,
                               !dir_problem.empty() ? dir_problem
                                                    : "the entry is not there after the store, though the cache directory "
                                                      "is usable (removed by a concurrent `cache clear`, or something "
                                                      "other than a file at its path; `dsa-indexer cache verify` shows it)");
          s.failures.push_back(fmt::format("{}: {}", spec.shape_key(), status));
        } else {
          ++s.compiled;
          status = fmt::format("compiled in {:.2f} s", sec);
        }
      }
    } catch (const std::exception& e) {
      ++s.failed;
      status = fmt::format("FAILED: {}", e.what());
      s.failures.push_back(fmt::format("{}: {}", spec.shape_key(), e.what()));
    }
    if (progress) progress(i, static_cast<int>(specs.size()), spec, status);
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace dsa_indexer::detail
