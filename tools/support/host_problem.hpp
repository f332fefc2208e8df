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
  // BSHD explicit windows only: > 0 asks for WindowColumns::window_start with scores of this
  // width (column c of row r is key ks[r] + c); 0: columns are keys.
  int64_t window_width = 0;
  bool w_f32 = false;
  bool lse = false;

  // FP8 E4M3 inputs (issue 22): q8 / k8 hold the e4m3 codes of q and k (q and k stay empty),
  // with optional fp32 per-row scales, q_scale (T_q x H) and k_scale (T_k) in token order
  // (BSHD: b * S + s); empty: not given (1). fill_random draws q_scale when fp8_q_scale and
  // k_scale when fp8_k_scale. k_scale_unit_dim: its descriptor is (B, S_k, 1) / THD (T_k, 1),
  // else (B, S_k) / THD (T_k,).
  bool fp8 = false;
  bool fp8_q_scale = true, fp8_k_scale = true;
  bool k_scale_unit_dim = true;

  std::vector<uint16_t> q, k;       // bf16 bits
  std::vector<uint16_t> w_bf16;
  std::vector<float> w_f32v;
  std::vector<uint8_t> q8, k8;      // e4m3 codes (fp8 only)
  std::vector<float> q_scale, k_scale;  // fp8 only; empty: not given

  bool thd() const { return layout != Layout::bshd; }
  int64_t n_seg() const { return thd() ? static_cast<int64_t>(cu_q.size()) - 1 : batch; }
  int64_t t_q() const { return thd() ? cu_q.back() : batch * s_q; }
  int64_t t_k() const { return thd() ? cu_k.back() : batch * s_k; }
  int64_t rows() const { return t_q(); }
  int64_t cols() const;  // S_k | max_seqlen_k | T_k | window_width
  void finalize_thd_defaults();
  std::string describe() const;
};

// Fills q, k, w with fresh random values (never zero: q, k ~ N(0,1) rounded to bf16 with
// zeros replaced, w ~ N(0,1) signed) sized for the problem. W is drawn in bf16 and mirrored
// exactly to fp32, so bf16-W and fp32-W runs must agree bitwise.
// fp8: q8, k8 are the e4m3 codes of N(0,1) * kFp8Spread (the whole E4M3 range: subnormals near
// zero, a few saturated at +-448; never a zero code), W as for bf16, and the scales asked for
// are 2^U(-3,3) * (1 + U(0,1)) / kFp8Spread (positive, varied; dequantized inputs ~ N(0,1)
// times 1/8 .. 16).
void fill_random(HostProblem& p, uint64_t seed);
inline constexpr float kFp8Spread = 96.0f;

// Visible window [lo, hi) of output row r in its column space, per the contract.
void row_window(const HostProblem& p, int64_t r, int64_t* lo, int64_t* hi);

// fp64 scores (rows x cols, -inf outside windows) and lse (rows).
std::vector<double> oracle_scores(const HostProblem& p);
std::vector<double> oracle_lse(const HostProblem& p, const std::vector<double>& scores);
// fp64 scores of selected rows only (for large shapes).
std::vector<double> oracle_rows(const HostProblem& p, const std::vector<int64_t>& rows);
// The same, with each cell's magnitude, |sm_scale| * sum_h |w[h]| * sum_d |q[h,d] * k[j,d]| on the
// (dequantized) inputs, 0 outside the window: what the rounding errors of the products' sums
// scale with, where the score itself may be near zero (dots cancelling inside, relu, signed
// weights). The FP8 tests hold cases of a few cells to their error relative to it.
std::vector<double> oracle_scores(const HostProblem& p, std::vector<double>* magnitudes);
std::vector<double> oracle_rows(const HostProblem& p, const std::vector<int64_t>& rows, std::vector<double>* magnitudes);

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

// FP8 E4M3 (float8_e4m3fn: bias 7, 3 mantissa bits, no infinities, 0x7f / 0xff NaN, max 448).
// encode: round to nearest, ties to even; magnitudes above 448 (and +-inf) saturate to +-448;
// NaN encodes as 0x7e (+448): it never produces a NaN code. decode: exact (subnormals
// m * 2^-9), NaN for 0x7f / 0xff.
uint8_t e4m3_encode(float f);
float e4m3_decode(uint8_t c);
inline bool e4m3_is_nan(uint8_t c) { return (c & 0x7f) == 0x7f; }

}  // namespace dsa_support
