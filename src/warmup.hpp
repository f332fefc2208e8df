#pragma once
// Offline warmup: a manifest of problem shapes -> the kernel variants they imply -> compiled
// into the disk cache, with no GPU.
//
// Manifest: one problem per line as key=value tokens; '#' starts a comment.
//   layout=bshd|thd_local|thd_global  heads=16|32|64  sq=<S_q or T_q>  sk=<S_k or T_k>
//   ratio=<n>  w=bf16|f32  lse=0|1  scale=any|1|both  family=auto|<a family's name>
// scale: the sm_scale variants to warm where a family compiles them apart (lean): `any` (any
// value but 1, the default), `1`, or both.
#include <functional>
#include <string>
#include <vector>

#include "planner.hpp"
#include "runtime.hpp"

namespace dsa_indexer::detail {

enum class ManifestScale { any, one, both };

struct ManifestProblem {
  int line = 0;
  Layout layout = Layout::bshd;
  int heads = 64;
  int64_t sq = 0, sk = 0, ratio = 1;
  DType w = DType::bf16;
  bool lse = false;
  ManifestScale scale = ManifestScale::any;
  KernelFamily family = KernelFamily::automatic;
};

// The text of a manifest file: a regular file (or a link to one) of at most kMaxManifestBytes.
// Throws InvalidArgument naming the path for anything else (a directory, a FIFO, /dev/zero).
inline constexpr std::size_t kMaxManifestBytes = std::size_t(16) << 20;
std::string read_manifest_file(const std::string& path);

// Throws InvalidArgument naming the file, the line and the token for a malformed line.
std::vector<ManifestProblem> parse_manifest(const std::string& text, const std::string& file);

// The distinct kernel variants the problems imply on `profile`, in first-seen order.
std::vector<KernelSpec> manifest_specs(const std::vector<ManifestProblem>& problems, const DeviceInfo& profile);

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
