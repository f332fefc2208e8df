#pragma once
// A forward problem held in host memory, random inputs for it, and the CPU fp64 oracle.
#include <cstdint>
#include <string>
#include <vector>

#include "dsa_indexer/indexer.hpp"
#include "core/problem.hpp"

namespace dsa_support {

using dsa_indexer::detail::Layout;

struct HostProblem {
  Layout layout = Layout::bshd;
  int heads = 64;
  int64_t batch = 1;          // BSHD B; THD: derived from cu_q
  int64_t s_q = 0, s_k = 0;   // BSHD
  std::vector<int32_t> cu_q, cu_k;  // THD
  int64_t max_q = -1, max_k = -1;   // THD (defaults: the longest segments)
  int64_t ratio = 1;
  float sm_scale = 1.0f;
  std::vector<int32_t> offsets;     // empty: not given
  std::vector<int32_t> ks, ke;      // empty: not given (rows of the output)
  bool w_f32 = false;
  bool lse = false;

  std::vector<uint16_t> q, k;       // bf16 bits
  std::vector<uint16_t> w_bf16;
  std::vector<float> w_f32v;

  bool thd() const { return layout != Layout::bshd; }
  int64_t n_seg() const { return thd() ? static_cast<int64_t>(cu_q.size()) - 1 : batch; }
  int64_t t_q() const { return thd() ? cu_q.back() : batch * s_q; }
  int64_t t_k() const { return thd() ? cu_k.back() : batch * s_k; }
  int64_t rows() const { return t_q(); }
  int64_t cols() const;  // S_k | max_seqlen_k | T_k
  void finalize_thd_defaults();
  std::string describe() const;
};

// Fills q, k, w with fresh random values (never zero: q, k ~ N(0,1) rounded to bf16 with
// zeros replaced, w ~ N(0,1) signed) sized for the problem. W is drawn in bf16 and mirrored
// exactly to fp32, so bf16-W and fp32-W runs must agree bitwise.
void fill_random(HostProblem& p, uint64_t seed);

// Visible window [lo, hi) of output row r in its column space, per the contract.
void row_window(const HostProblem& p, int64_t r, int64_t* lo, int64_t* hi);

// fp64 scores (rows x cols, -inf outside windows) and lse (rows).
std::vector<double> oracle_scores(const HostProblem& p);
std::vector<double> oracle_lse(const HostProblem& p, const std::vector<double>& scores);
// fp64 scores of selected rows only (for large shapes).
std::vector<double> oracle_rows(const HostProblem& p, const std::vector<int64_t>& rows);

int64_t visible_pairs(const HostProblem& p);

struct Comparison {
  double rel_l2 = 0.0;        // over cells finite in the reference
  int64_t pattern_mismatch = 0;  // isneginf(got) != isneginf(ref)
  int64_t non_finite = 0;     // NaN or +inf in got (poison left or bad math)
  int64_t cells = 0;
  std::string first_problem;
  bool ok(double tol) const { return pattern_mismatch == 0 && non_finite == 0 && rel_l2 <= tol; }
};
Comparison compare(const float* got, const double* ref, int64_t n, int64_t cols);

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

}  // namespace dsa_support
