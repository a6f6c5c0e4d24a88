#pragma once
// Causal self-attention of the fused transformer step (train/fused/gpt_step.h) in fp32, one head's
// matrices at a time: the scores, the causal softmax and the products in register tiles that stop
// at the diagonal, so the work above it (half of every product at long sequences) is never done
// and each head's scores stay in cache between the GEMM and the softmax. Parallel over heads on
// the lane's intra-op threads. Torch-free header.
//
// Layouts: q, k, v, y and their gradients are rows of tokens, batch · seq of them, each holding
// every head's headSize columns side by side (head h at columns h · headSize): the fused step
// reads q, k and v straight out of the qkv GEMM's output (row stride 3C) and writes y where the
// projection reads it (row stride C), dq, dk, dv where the qkv backward reads them, so the heads
// are never copied apart and back. p holds each head's probabilities (head b · heads + h), seq
// rows of attentionRowStride(seq) floats. Row i of p is written (and zero past column i) up to i
// rounded up to the tile of 8 rows and then to 16 columns; the rest of the row is never read.
#include <cstdint>
#include <string>
#include <vector>

namespace devicerace::detail::cpu {

/// The tiles' code for one ISA: AVX-512 (8-row tiles of zmm), AVX2 + FMA (4-row tiles of ymm),
/// or plain code for any CPU; `best` is the widest this CPU runs.
enum class TileIsa { best, avx512, avx2, generic };
/// The ISAs this CPU runs the tiles in, the widest first (`generic` always last).
std::vector<TileIsa> tileIsas();
std::string tileIsaName(TileIsa isa);

/// Whether the tiles pay on this CPU for heads of `headSize` floats: AVX-512 or AVX2 + FMA, and
/// heads of a multiple of 16 floats. DEVICERACE_CPU_ATTENTION=tiles or =bmm overrides the CPU
/// check (tests cover both).
bool tiledAttentionPays(std::int64_t headSize);
/// Floats between two rows of a head's probabilities: seq rounded up to 16.
std::int64_t attentionRowStride(std::int64_t seq);

/// The shape of one attention: rows of q, k, v (and dq, dk, dv) `qkvStride` floats apart, rows
/// of y (and dy) `yStride` floats apart.
struct AttentionShape {
    std::int64_t batch = 0, heads = 0, seq = 0, headSize = 0;
    std::int64_t qkvStride = 0, yStride = 0;
};

/// p = softmax(scale · q kᵀ) under the causal mask, y = p v, every head. headSize a multiple of 16.
/// An `isa` this CPU cannot run throws std::invalid_argument.
void causalAttentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v, float scale,
                            float* p, float* y, TileIsa isa = TileIsa::best);
/// dq, dk, dv (overwritten) of causalAttentionForward for the output gradient dy, from its q,
/// k, v and p.
void causalAttentionBackward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                             const float* p, const float* dy, float scale, float* dq, float* dk, float* dv,
                             TileIsa isa = TileIsa::best);

} // namespace devicerace::detail::cpu
