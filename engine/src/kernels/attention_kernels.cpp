// Causal attention in register tiles (see attention_kernels.h). Each product is a row tile of
// up to 8 rows × 48 columns held in 24 vector accumulators (GCC's vector extensions: zmm in the
// avx512f clone), fed by one row of B and 8 broadcasts of A per step of the inner dimension;
// products 64 columns wide (heads of 64) take two tiles of 4 rows × 64 instead.
// Which rows and columns a tile covers follows the causal mask: the scores and their gradient stop
// at the tile's last row rounded up to 16 columns, p v and dS k run over the keys up to the tile's
// last row, and pᵀ dy and dSᵀ q over the queries from the tile's first key on.
#include "kernels/attention_kernels.h"
#include "kernels/kernel_inline.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace devicerace::detail::cpu {

namespace {

constexpr std::int64_t kRows = 8;   // rows of a tile, and of the causal blocks
constexpr std::int64_t kWidth = 16; // floats in a vector
constexpr int kMaxVectors = 3;      // vectors across a tile: 8 × 3 accumulators

using V16 = float __attribute__((vector_size(64)));
using V16u = float __attribute__((vector_size(64), aligned(4), may_alias));

DR_INLINE V16 loadV(const float* p) { return *reinterpret_cast<const V16u*>(p); }
DR_INLINE void storeV(float* p, V16 v) { *reinterpret_cast<V16u*>(p) = v; }

// C (MR × 16·NV, row stride ldc) = A B over kn steps: A(m, k) = a[m·sam + k·sak], B's row k
// at b + k·ldb.
template <int MR, int NV>
DR_INLINE void tile(std::int64_t kn, const float* __restrict a, std::int64_t sam, std::int64_t sak,
                    const float* __restrict b, std::int64_t ldb, float* __restrict c, std::int64_t ldc) {
    V16 acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
            acc[m][j] = V16{};
        }
    }
    for (std::int64_t k = 0; k < kn; ++k) {
        V16 row[NV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
            row[j] = loadV(b + k * ldb + j * kWidth);
        }
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) {
            const float x = a[m * sam + k * sak];
#pragma GCC unroll 4
            for (int j = 0; j < NV; ++j) {
                acc[m][j] += x * row[j];
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
            storeV(c + m * ldc + j * kWidth, acc[m][j]);
        }
    }
}

template <int MR>
DR_INLINE void tileColumns(std::int64_t cols, std::int64_t kn, const float* a, std::int64_t sam, std::int64_t sak,
                           const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    std::int64_t n = 0;
    if (cols == 4 * kWidth) { // heads of 64: 4 × 4 tiles (an 8 × 1 one after 8 × 3 waits on its loads)
        constexpr int half = MR > 4 ? MR / 2 : MR;
        for (int m = 0; m < MR; m += half) {
            tile<half, 4>(kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
        }
        return;
    }
    for (; n + kMaxVectors * kWidth <= cols; n += kMaxVectors * kWidth) {
        tile<MR, kMaxVectors>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    }
    if (cols - n == 2 * kWidth) {
        tile<MR, 2>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    } else if (cols - n == kWidth) {
        tile<MR, 1>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    }
}

// C (rows × cols, cols a multiple of 16) = A B over kn steps, in tiles of 8, 4, 2 and 1 rows.
DR_INLINE void product(std::int64_t rows, std::int64_t cols, std::int64_t kn, const float* a, std::int64_t sam,
                       std::int64_t sak, const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    std::int64_t m = 0;
    for (; m + 8 <= rows; m += 8) {
        tileColumns<8>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
    }
    if (rows - m >= 4) {
        tileColumns<4>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
        m += 4;
    }
    if (rows - m >= 2) {
        tileColumns<2>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
        m += 2;
    }
    if (rows - m == 1) {
        tileColumns<1>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
    }
}

// One stage of a 16 × 16 transpose in registers: rows r and r + B (r in an even block of B)
// swap their off-diagonal B × B blocks. Stages B = 8, 4, 2, 1 transpose the whole.
template <int B, std::size_t... J>
DR_INLINE V16 swapLow(V16 a, V16 b, std::index_sequence<J...>) {
    return __builtin_shufflevector(a, b, ((J / B) % 2 == 0 ? int(J) : 16 + int(J) - B)...);
}
template <int B, std::size_t... J>
DR_INLINE V16 swapHigh(V16 a, V16 b, std::index_sequence<J...>) {
    return __builtin_shufflevector(a, b, ((J / B) % 2 == 0 ? int(J) + B : 16 + int(J))...);
}
template <int B>
DR_INLINE void transposeStage(V16* v) {
    constexpr auto lanes = std::make_index_sequence<16>{};
    for (int r = 0; r < 16; ++r) {
        if ((r / B) % 2 == 0) {
            const V16 a = v[r], b = v[r + B];
            v[r] = swapLow<B>(a, b, lanes);
            v[r + B] = swapHigh<B>(a, b, lanes);
        }
    }
}

// out (cols × stride) = xᵀ for x (rows × cols, row stride ldx, cols a multiple of 16), zero past `rows` in each
// row: 16 × 16 blocks transposed in registers, the rows past the last whole block one by one
// (element by element, strided reads or writes missed L1 on nearly every access: 13% of the
// forward).
DR_INLINE void transposeInto(const float* __restrict x, std::int64_t ldx, std::int64_t rows, std::int64_t cols,
                             std::int64_t stride, float* __restrict out) {
    std::int64_t r0 = 0;
    for (; r0 + kWidth <= rows; r0 += kWidth) {
        for (std::int64_t c0 = 0; c0 < cols; c0 += kWidth) {
            V16 v[16];
            for (int i = 0; i < 16; ++i) {
                v[i] = loadV(x + (r0 + i) * ldx + c0);
            }
            transposeStage<8>(v);
            transposeStage<4>(v);
            transposeStage<2>(v);
            transposeStage<1>(v);
            for (int i = 0; i < 16; ++i) {
                storeV(out + (c0 + i) * stride + r0, v[i]);
            }
        }
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        for (std::int64_t r = r0; r < rows; ++r) {
            out[c * stride + r] = x[r * ldx + c];
        }
        std::fill(out + c * stride + rows, out + (c + 1) * stride, 0.0f);
    }
}

std::int64_t roundUp16(std::int64_t n) { return (n + kWidth - 1) / kWidth * kWidth; }

// The columns a row tile ending at row r1 (exclusive) computes and writes: its last key rounded
// up to a whole vector.
DR_INLINE std::int64_t tileColumnsEnd(std::int64_t r1, std::int64_t stride) { return std::min(stride, roundUp16(r1)); }

std::vector<float>& scratch() {
    thread_local std::vector<float> buffer;
    return buffer;
}

// Where head m (= b · heads + h) starts in rows `ld` floats apart.
DR_INLINE std::int64_t headOffset(const AttentionShape& s, std::int64_t m, std::int64_t ld) {
    return (m / s.heads) * s.seq * ld + (m % s.heads) * s.headSize;
}

DR_CLONES void forwardHeads(const AttentionShape& s, const float* __restrict q, const float* __restrict k,
                            const float* __restrict v, std::int64_t h0, std::int64_t h1, float scale,
                            float* __restrict p, float* __restrict y) {
    const std::int64_t seq = s.seq, d = s.headSize, ld = s.qkvStride, ldy = s.yStride, stride = roundUp16(seq);
    auto& kt = scratch();
    kt.resize(static_cast<std::size_t>(d * stride));
    for (std::int64_t h = h0; h < h1; ++h) {
        const std::int64_t in = headOffset(s, h, ld);
        const float* qh = q + in;
        const float* vh = v + in;
        float* ph = p + h * seq * stride;
        float* yh = y + headOffset(s, h, ldy);
        transposeInto(k + in, ld, seq, d, stride, kt.data());
        for (std::int64_t r0 = 0; r0 < seq; r0 += kRows) {
            const std::int64_t r1 = std::min(seq, r0 + kRows), n = tileColumnsEnd(r1, stride);
            product(r1 - r0, n, d, qh + r0 * ld, ld, 1, kt.data(), stride, ph + r0 * stride, stride);
            for (std::int64_t i = r0; i < r1; ++i) {
                causalSoftmaxRow(ph + i * stride, i, n, scale);
            }
            product(r1 - r0, d, r1, ph + r0 * stride, stride, 1, vh, ld, yh + r0 * ldy, ldy);
        }
    }
}

DR_CLONES void backwardHeads(const AttentionShape& s, const float* __restrict q, const float* __restrict k,
                             const float* __restrict v, const float* __restrict p, const float* __restrict dy,
                             std::int64_t h0, std::int64_t h1, float scale, float* __restrict dq, float* __restrict dk,
                             float* __restrict dv) {
    const std::int64_t seq = s.seq, d = s.headSize, ld = s.qkvStride, ldy = s.yStride, stride = roundUp16(seq);
    auto& buffer = scratch();
    buffer.resize(static_cast<std::size_t>(d * stride + seq * stride));
    float* vt = buffer.data();
    float* ds = vt + d * stride;
    for (std::int64_t h = h0; h < h1; ++h) {
        const std::int64_t in = headOffset(s, h, ld);
        const float* qh = q + in;
        const float* kh = k + in;
        const float* ph = p + h * seq * stride;
        const float* dyh = dy + headOffset(s, h, ldy);
        transposeInto(v + in, ld, seq, d, stride, vt);
        for (std::int64_t r0 = 0; r0 < seq; r0 += kRows) {
            const std::int64_t r1 = std::min(seq, r0 + kRows), n = tileColumnsEnd(r1, stride);
            product(r1 - r0, n, d, dyh + r0 * ldy, ldy, 1, vt, stride, ds + r0 * stride, stride);
            for (std::int64_t i = r0; i < r1; ++i) {
                causalSoftmaxGradRow(ph + i * stride, ds + i * stride, n, scale);
            }
            product(r1 - r0, d, r1, ds + r0 * stride, stride, 1, kh, ld, dq + in + r0 * ld, ld);
        }
        // Key rows j0..: the queries from j0 on see them (p and dS are zero above the diagonal
        // within the tile, as far as the tile's rows were written).
        for (std::int64_t j0 = 0; j0 < seq; j0 += kRows) {
            const std::int64_t j1 = std::min(seq, j0 + kRows);
            product(j1 - j0, d, seq - j0, ph + j0 * stride + j0, 1, stride, dyh + j0 * ldy, ldy, dv + in + j0 * ld, ld);
            product(j1 - j0, d, seq - j0, ds + j0 * stride + j0, 1, stride, qh + j0 * ld, ld, dk + in + j0 * ld, ld);
        }
    }
}

void checkShape(const AttentionShape& s) {
    if (s.headSize <= 0 || s.headSize % kWidth != 0) {
        throw std::invalid_argument("causal attention tiles need heads of a multiple of 16 floats");
    }
    if (s.batch < 0 || s.heads <= 0 || s.seq < 0 || s.qkvStride < s.heads * s.headSize ||
        s.yStride < s.heads * s.headSize) {
        throw std::invalid_argument("causal attention tiles: rows narrower than their heads");
    }
}

} // namespace

bool tiledAttentionPays(std::int64_t headSize) {
    if (headSize <= 0 || headSize % kWidth != 0) {
        return false;
    }
    const char* env = std::getenv("DEVICERACE_CPU_ATTENTION");
    if (env && *env) {
        return std::string_view(env) != "bmm";
    }
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

std::int64_t attentionRowStride(std::int64_t seq) { return roundUp16(seq); }

void causalAttentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v, float scale,
                            float* p, float* y) {
    checkShape(shape);
    at::parallel_for(0, shape.batch * shape.heads, 1,
                     [&](std::int64_t b, std::int64_t e) { forwardHeads(shape, q, k, v, b, e, scale, p, y); });
}

void causalAttentionBackward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                             const float* p, const float* dy, float scale, float* dq, float* dk, float* dv) {
    checkShape(shape);
    at::parallel_for(0, shape.batch * shape.heads, 1, [&](std::int64_t b, std::int64_t e) {
        backwardHeads(shape, q, k, v, p, dy, b, e, scale, dq, dk, dv);
    });
}

} // namespace devicerace::detail::cpu
