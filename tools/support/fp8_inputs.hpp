#pragma once
// FP8 E4M3 inputs for the benchmark's FP8 rows (`dsa-indexer bench --in e4m3`) and the FP8 GEMM
// ceiling, made on the host: a codec, per-row quantization of a bf16 problem (one fp32 scale per
// 128-element (token, head) row of Q and per token of K, the "1x128" scheme of cuDNN-frontend's
// SM90 FP8 path and DeepGEMM's per-token KV scales) and the fp64 oracle of sampled rows on the
// dequantized inputs. Self-contained (namespace dsa_support::fp8in): it does not depend on the
// FP8 support of HostProblem. Large problems are drawn and quantized on every core.
#include <cstdint>
#include <vector>

#include "host_problem.hpp"

namespace dsa_support::fp8in {

inline constexpr float kE4m3Max = 448.0f;

// The E4M3 codec of HostProblem's FP8 support (host_problem.hpp): round to nearest even,
// magnitudes >= 448 and infinities saturate to +-448, NaN to +448 (never a NaN code); exact decode.
inline uint8_t encode(float f) { return e4m3_encode(f); }
inline float decode(uint8_t c) { return e4m3_decode(c); }

// Quantizes `rows` rows of 128 values (bf16 bits): scale[r] = max(amax_r, 1e-4) / 448 and
// codes = encode(x / scale[r]), so x ~ decode(code) * scale[r].
void quantize_rows_bf16(const uint16_t* x, int64_t rows, uint8_t* codes, float* scales);

// A problem's FP8 inputs: q8 (T_q, H, 128) with q_scale (T_q, H); k8 (T_k, 128) with k_scale (T_k).
struct Fp8Inputs {
  std::vector<uint8_t> q8, k8;
  std::vector<float> q_scale, k_scale;
};
Fp8Inputs quantize(const HostProblem& p);

// fill_random's contract (q, k ~ N(0,1) rounded to bf16, never zero; w signed N(0,1) in bf16,
// mirrored exactly to fp32) with a per-row generator, so that large problems fill on every core;
// the values depend on (seed, row) only, not on the number of threads.
void fill_random_rows(HostProblem& p, uint64_t seed);

// `n` E4M3 codes of N(0,1) draws (the GEMM ceiling's operands).
std::vector<uint8_t> random_codes(size_t n, uint64_t seed);

// `p` (drawn in bf16) as the FP8 problem of its quantization `f`: HostProblem's FP8 form, which
// its fp64 oracle (oracle_rows: the dequantized inputs, -inf outside each row's window) reads.
HostProblem as_fp8_problem(HostProblem p, Fp8Inputs f);
// fp64 scores of the selected rows on the dequantized inputs, in the contract's form
//   sm_scale * sum_h w[h] * relu(sum_d (q8 * q_scale)[h,d] * (k8 * k_scale)[j,d])
// (-inf outside each row's window, row_window's), rows x p.cols(): dsa_support::oracle_rows of
// as_fp8_problem(p, f).
std::vector<double> oracle_rows(const HostProblem& p, const Fp8Inputs& f, const std::vector<int64_t>& rows);

}  // namespace dsa_support::fp8in
