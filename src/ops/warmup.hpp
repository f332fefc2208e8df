#pragma once
// Offline warmup: a manifest of problem shapes -> the kernel variants they imply -> compiled
// into the disk cache, with no GPU.
//
// Manifest: one problem per line as key=value tokens; '#' starts a comment.
//   [op=scores|topk]  layout=bshd|thd_local|thd_global  heads=16|32|64  sq=<S_q or T_q>
//   sk=<S_k or T_k>  ratio=<n>  w=bf16|f32  lse=0|1  scale=any|1|both
//   family=auto|<a family of the line's operation>  batch=<B>  sms=<SM count>  [k=<1..2048>]
// op: the operation (default scores, what every line without it means). A top-k line (BSHD or
// THD local; k only there, default 2048, a value no variant depends on today) implies its
// top-k family's variant AND the score variants its launch runs: the score problem of each
// distinct block (Family::inner_problems), as the dispatcher picks them with and without the
// escape hatch, whichever the line's family.
// scale: the sm_scale variants to warm where a family compiles them apart (lean): `any` (any
// value but 1, the default), `1`, or both. batch (BSHD only, default 1) and sms (default: the
// planning profile's) are what a gate may read besides the shape (lean's grid saturation, S_q/8
// x B >= SMs); recorded lines (DSA_INDEXER_RECORD_MANIFEST) write them where they differ from
// the defaults, so that a line implies exactly the variant the call used.
#include <functional>
#include <string>
#include <vector>

#include "core/operation.hpp"
#include "dispatch/planner.hpp"
#include "dsa_indexer/topk.hpp"
#include "jit/runtime.hpp"

namespace dsa_indexer::detail {

enum class ManifestScale { any, one, both };

struct ManifestProblem {
  std::string file;  // as messages name it, with the line
  int line = 0;
  Operation op = Operation::scores;
  int32_t k = kTopkMaxK;  // op=topk only
  Layout layout = Layout::bshd;
  int heads = 64;
  int64_t sq = 0, sk = 0, ratio = 1;
  int64_t batch = 1;
  int32_t sms = 0;  // 0: the planning profile's SM count
  DType w = DType::bf16;
  DType qk = DType::bf16;  // in=e4m3: FP8 q and k
  bool lse = false;
  bool window_start = false;  // columns=window_start: explicit windows, columns from their start (BSHD, scores)
  bool windows = false;       // windows=1: explicit windows (ks / ke) with key columns (BSHD, scores)
  ManifestScale scale = ManifestScale::any;
  KernelFamily family = KernelFamily::automatic;
};

// The text of a manifest file: a regular file (or a link to one) of at most kMaxManifestBytes.
// Throws InvalidArgument naming the path for anything else (a directory, a FIFO, /dev/zero).
inline constexpr std::size_t kMaxManifestBytes = std::size_t(16) << 20;
std::string read_manifest_file(const std::string& path);

// Throws InvalidArgument naming the file, the line and the token for a malformed line.
std::vector<ManifestProblem> parse_manifest(const std::string& text, const std::string& file);
// One line (numbered `line` in messages): false for a blank or comment-only line, else fills
// `out`; throws as parse_manifest does.
bool parse_manifest_line(const std::string& text, int line, const std::string& file, ManifestProblem* out);

// The distinct kernel variants the problems imply on `profile`, in first-seen order (linear: a
// hash set of variant keys). A problem the profile cannot plan throws its UnsupportedConfig with
// "manifest FILE:LINE:" in place of the entry point's name.
std::vector<KernelSpec> manifest_specs(const std::vector<ManifestProblem>& problems, const DeviceInfo& profile);
// The problem one manifest line stands for, with this sm_scale (what manifest_specs plans).
Problem manifest_problem(const ManifestProblem& m, float sm_scale);

// The manifest line of one variant a call used: `spec` planned for `p` on `dev`, as a line that
// parse_manifest + manifest_specs on `profile` map back to exactly call_specs(p, dev, spec)
// (checked here), with the variant's key as a trailing comment. Empty when no line can say it
// (a gate reading something a line does not carry); never throws for a validated problem.
std::string manifest_line(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec, const DeviceInfo& profile);
// What a call that used `spec` needs warmed: {spec} for a family that launches only its own
// kernels; after it, for the unfused top-k, the score variants of its blocks (the dispatcher's
// pick with and without the escape hatch), as a top-k line implies them.
std::vector<KernelSpec> call_specs(const Problem& p, const DeviceInfo& dev, const KernelSpec& spec);

struct WarmupSummary {
  int compiled = 0;
  int cached = 0;
  int failed = 0;
  double seconds = 0.0;
  std::vector<std::string> failures;
};

using WarmupProgress = std::function<void(int index, int total, const KernelSpec& spec, const std::string& status)>;
WarmupSummary warmup(Runtime& rt, const std::vector<KernelSpec>& specs, const WarmupProgress& progress);

}  // namespace dsa_indexer::detail
