// The top-k selection templates (score rows: sm90_topk_select; candidate lists:
// sm90_topk_candidates) compile under NVRTC with the embedded templates only (no include path),
// for every block size a launch may pick, without spills, local memory or warnings.
#include <catch2/catch.hpp>

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "dsa_indexer/errors.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "sm90_topk_candidates_args.cuh"
#include "sm90_topk_select_args.cuh"

using namespace dsa_indexer::detail;

namespace {
const std::vector<std::string> kTopkKernels = {"dsa::sm90_topk_select<256>", "dsa::sm90_topk_select<512>",
                                               "dsa::sm90_topk_select<1024>", "dsa::sm90_topk_select_short<256>",
                                               "dsa::sm90_topk_select_short<256, 8>", "dsa::sm90_topk_select<256, true>",
                                               "dsa::sm90_topk_select<512, true>"};
const std::vector<std::string> kTopkCandKernels = {"dsa::sm90_topk_candidates<256>", "dsa::sm90_topk_candidates<512>"};

// Compiles `kernels` from `header` and checks the cubin, the names and the ptxas report.
void check_compiles(const std::string& header, const std::vector<std::string>& kernels, const std::string& lowered) {
  CompileRequest req{"topk_compile.cu", "#include \"" + header + "\"\n", kernels, compile_options("sm_90a"), nullptr};
  CompileOutput out;
  try {
    out = nvrtc_compile(req);
  } catch (const dsa_indexer::CompileError& e) {
    FAIL(e.what());
  }
  INFO(out.log);
  CHECK(out.cubin.compare(0, 4, "\x7f" "ELF") == 0);
  REQUIRE(out.lowered_names.size() == kernels.size());
  for (const auto& l : out.lowered_names) CHECK(l.find(lowered) != std::string::npos);
  CHECK(out.log.find("warning") == std::string::npos);
  // ptxas -v: one "Function properties" report per kernel, each with no stack and no spills.
  std::istringstream lines(out.log);
  std::string line;
  int reports = 0;
  while (std::getline(lines, line)) {
    if (line.find("bytes stack frame") == std::string::npos) continue;
    ++reports;
    INFO(line);
    CHECK(line.find(" 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads") != std::string::npos);
  }
  CHECK(reports == static_cast<int>(kernels.size()));
}
}  // namespace

TEST_CASE("topk select: every block size compiles to sm_90a without spills or stack", "[topk]") {
  check_compiles("sm90_topk_select.cuh", kTopkKernels, "sm90_topk_select");
}

TEST_CASE("topk candidates: every block size compiles to sm_90a without spills or stack", "[topk]") {
  check_compiles("sm90_topk_candidates.cuh", kTopkCandKernels, "sm90_topk_candidates");
}

TEST_CASE("topk select: the launch arguments have the layout the template reads", "[topk]") {
  // The host fills dsa::TopkSelectArgs and the kernel reads it by value: fixed-width members only.
  CHECK(sizeof(dsa::TopkRow) == 16);
  CHECK(sizeof(dsa::TopkSelectArgs) == 112);
  CHECK(dsa::kTopkCandCap >= dsa::kTopkMaxK);
  CHECK(dsa::kTopkSampleWords * 4 <= dsa::kTopkCandCap);
  CHECK(dsa::kTopkFixedSmemBytes == (dsa::kTopkBins + 2 * dsa::kTopkCandCap + 2 * dsa::kTopkMaxK) * 4);
  CHECK(dsa::kTopkShortSmemBytes == (3 * dsa::kTopkBins + 2 * dsa::kTopkMaxK) * 4);
  CHECK(dsa::kTopkShortSmemBytes <= 48 * 1024);  // no opt-in attribute needed
}

TEST_CASE("topk candidates: the launch arguments have the layout the template reads", "[topk]") {
  // The host fills dsa::TopkCandArgs and the kernel reads it by value: fixed-width members only.
  CHECK(sizeof(dsa::TopkCandArgs) == 104);
  CHECK(offsetof(dsa::TopkCandArgs, k) == 40);
  CHECK(offsetof(dsa::TopkCandArgs, indices) == 48);
  CHECK(offsetof(dsa::TopkCandArgs, softmax_ld) == 88);
  CHECK(offsetof(dsa::TopkCandArgs, width) == 96);
  // The column bitmap of the widest fused block fits the default staging area (2 words a
  // bitmap word, 8 bytes a composite), so the fused path never sorts to column order.
  CHECK((dsa::kTopkCandSmemBytes - dsa::kTopkCandFixedSmemBytes) / 8 >= (int64_t{1} << 18) / 32);
  CHECK(dsa::kTopkCandMaxLd == 8192);
  CHECK(dsa::kTopkCandFixedSmemBytes == (dsa::kTopkBins + 2 * dsa::kTopkMaxK) * 4);
  CHECK(dsa::kTopkCandSmemBytes == dsa::kTopkCandFixedSmemBytes + dsa::kTopkCandMaxLd * 8);
}
