#pragma once
// Causal self-attention of the fused transformer step (train/gpt_step.h) in fp32, one head's
// matrices at a time: the scores, the causal softmax and the products in register tiles that stop
// at the diagonal, so the work above it (half of every product at long sequences) is never done
// and each head's scores stay in cache between the GEMM and the softmax. Parallel over heads on
// the lane's intra-op threads. Torch-free header.
//
// Layouts: q, k, v, y and their gradients are `mats` matrices of seq × headSize floats (the
// step's heads-split layout); p holds each head's probabilities, seq rows of
// attentionRowStride(seq) floats. Row i of p is written (and zero past column i) up to i rounded
// up to the tile of 8 rows and then to 16 columns; the rest of the row is never read.
#include <cstdint>

namespace devicerace::detail::cpu {

/// Whether the tiles pay on this CPU for heads of `headSize` floats: AVX-512 (the tiles hold 24
/// of its 32 vector registers; on narrower vectors they spill) and heads of whole 16-float
/// vectors. DEVICERACE_CPU_ATTENTION=tiles or =bmm overrides the CPU check (tests cover both).
bool tiledAttentionPays(std::int64_t headSize);
/// Floats between two rows of a head's probabilities: seq rounded up to 16.
std::int64_t attentionRowStride(std::int64_t seq);

/// p = softmax(scale · q kᵀ) under the causal mask, y = p v. headSize a multiple of 16.
void causalAttentionForward(const float* q, const float* k, const float* v, std::int64_t mats, std::int64_t seq,
                            std::int64_t headSize, float scale, float* p, float* y);
/// dq, dk, dv (overwritten) of causalAttentionForward for the output gradient dy, from its q,
/// k, v and p.
void causalAttentionBackward(const float* q, const float* k, const float* v, const float* p, const float* dy,
                             std::int64_t mats, std::int64_t seq, std::int64_t headSize, float scale, float* dq,
                             float* dk, float* dv);

} // namespace devicerace::detail::cpu
