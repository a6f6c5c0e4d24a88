#pragma once
// One-pass CPU loops of the fused transformer step (train/fused/gpt_step.h): layer norm, GELU, causal
// softmax, the attention heads' layouts, the embeddings and the token cross-entropy, forward and
// backward. Cloned per ISA like cpu_kernels.h; arithmetic in float, outputs float or bf16 where a
// GEMM reads them (bf16 or, for a GEMM run in fp32, bf16 values in fp32 storage: Bf16InF32). "Parallel": over rows on
// the lane's intra-op threads; "one thread": on the caller's. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// out = (x - mean) / sqrt(var + 1e-5) * gamma + beta per row of `cols` (torch's LayerNorm: the
/// biased variance); each row's mean and 1/sqrt(var + eps) kept for the backward. Parallel.
void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   float* out, float* mean, float* rstd);
void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   Bf16* out, float* mean, float* rstd);
void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   Bf16InF32* out, float* mean, float* rstd);
/// dx += the input gradient of layerNormRows for the output gradient dy. Parallel.
void layerNormBackwardRows(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                           std::int64_t rows, std::int64_t cols, float* dx);
/// dgamma = column sums of dy · xhat, dbeta = column sums of dy (overwritten). One thread.
void layerNormParamGrads(const float* dy, const float* x, const float* mean, const float* rstd, std::int64_t rows,
                         std::int64_t cols, float* dgamma, float* dbeta);

/// out = x + dropout(y + bias) (rows×cols, one bias per column; dropout: the hashed mask of
/// element (firstRow + r)·cols + c under `seed`, as laneDropout draws it, kept values × 1/(1-p);
/// p = 0: none; firstRow: where these rows start in the whole batch). Parallel.
void addRowsBias(const float* x, const float* y, const float* bias, std::int64_t rows, std::int64_t cols, float* out,
                 float p = 0, std::uint64_t seed = 0, std::int64_t firstRow = 0);
/// x += bias in place (rows×cols, one bias per column). Parallel.
void addBias(float* x, const float* bias, std::int64_t rows, std::int64_t cols);
/// out = dropout(in) over n values with the same masks, value i's that of element first + i (out
/// may be in). Parallel.
void dropoutValues(const float* in, std::int64_t n, float p, std::uint64_t seed, float* out, std::int64_t first = 0);
/// out = column sums of x (rows×cols, overwritten); with `copy`, also copy = bf16(x) in the same
/// pass (a gradient that is both a bias's and a bf16 GEMM's input). Parallel over columns.
void columnSums(const float* x, std::int64_t rows, std::int64_t cols, float* out, Bf16* copy = nullptr);
void columnSums(const float* x, std::int64_t rows, std::int64_t cols, float* out, Bf16InF32* copy);

/// v = x + bias: out = gelu(v), the exact erf form (torch's default GELU), and x = gelu'(v), what
/// the backward needs (so it costs no exp). Parallel.
void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, float* out);
void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, Bf16* out);
void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, Bf16InF32* out);
/// d *= slope over n values (biasGelu's x), in place. Parallel.
void geluBackward(float* d, const float* slope, std::int64_t n);
/// gelu(x) and gelu'(x) of one value (tests).
float geluValue(float x);
float geluSlope(float x);

/// Attention's head layout. `src`: batch × seq rows of leading dimension `ld` whose first
/// heads × head columns are the heads side by side (plus `bias` per column when set) ->
/// `dst`: [batch · heads, seq, head], each head's matrix contiguous. Parallel.
void splitHeads(const float* src, std::int64_t ld, const float* bias, std::int64_t batch, std::int64_t seq,
                std::int64_t heads, std::int64_t head, float* dst);
/// The way back: [batch · heads, seq, head] -> rows of leading dimension `ld`. Parallel.
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                float* dst, std::int64_t ld);
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                Bf16* dst, std::int64_t ld);
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                Bf16InF32* dst, std::int64_t ld);

/// In place on `mats` seq×seq score matrices: row i becomes softmax(scale · s[i][0..i]) on
/// columns 0..i and 0 after them (causal attention's weights). Parallel.
void causalSoftmax(float* s, std::int64_t mats, std::int64_t seq, float scale);
/// In place on the weights' gradient dp: dp[i][j] = scale · p[i][j] · (dp[i][j] - Σ_k p[i][k]
/// dp[i][k]), the scores' gradient (0 above the diagonal). Parallel.
void causalSoftmaxBackward(const float* p, float* dp, std::int64_t mats, std::int64_t seq, float scale);

/// out[b·seq + t] = wte[tokens[b·stride + t]] + wpe[t] (rows of `cols`). False (nothing
/// guaranteed written) when a token is outside [0, vocabulary). Parallel.
bool embedTokens(const float* wte, std::int64_t vocabulary, const float* wpe, const std::int64_t* tokens,
                 std::int64_t stride, std::int64_t batch, std::int64_t seq, std::int64_t cols, float* out);
/// dwte[tokens[...]] += dh rows (accumulated); dwpe rows 0..seq-1 = Σ over the batch of dh
/// (overwritten). One thread.
void embedTokensBackward(const float* dh, const std::int64_t* tokens, std::int64_t stride, std::int64_t batch,
                         std::int64_t seq, std::int64_t cols, float* dwte, float* dwpe);

/// Softmax cross-entropy of rows×classes float logits against `labels` (contiguous), and
/// dlogits = (softmax - onehot) / meanOver. Parallel.
CrossEntropy tokenCrossEntropy(const float* logits, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                               float* dlogits, std::int64_t meanOver);

} // namespace devicerace::detail::cpu
