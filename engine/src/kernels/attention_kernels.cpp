// Causal attention in register tiles (see attention_kernels.h). Each product is a row tile held
// in vector accumulators (GCC's vector extensions), fed by one row of B and a broadcast of A per
// row and step of the inner dimension. With AVX-512 a tile is up to 8 rows × 48 columns in 24 of
// the 32 zmm registers (products 64 columns wide, heads of 64, take two tiles of 4 rows × 64); with
// AVX2 and FMA up to 4 rows × 24 columns in 12 of the 16 ymm registers, the rest holding B's row
// and the broadcast. Each ISA's code is its own function (a target attribute), picked at run time.
// Which rows and columns a tile covers follows the causal mask: the scores and their gradient stop
// at the tile's last row rounded up to a whole vector, p v and dS k run over the keys up to the
// tile's last row, and pᵀ dy and dSᵀ q over the queries from the tile's first key on.
#include "kernels/attention_kernels.h"
#include "kernels/kernel_inline.h"
#include "kernels/vec_inline.h"

#include <ATen/Parallel.h>

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "devicerace/environment.h"

namespace devicerace::detail::cpu {

namespace {

constexpr std::int64_t kRows = 8;   // rows of the causal blocks
constexpr std::int64_t kAlign = 16; // rows of p round up to this (and heads are a multiple of it)
constexpr int kMaxVectors = 3;      // vectors across a tile
constexpr float kInfinity = std::numeric_limits<float>::infinity();

// C (MR × W·NV, row stride ldc) = A B over kn steps: A(m, k) = a[m·sam + k·sak], B's row k
// at b + k·ldb.
template <int W, int MR, int NV>
DR_INLINE void tile(std::int64_t kn, const float* __restrict a, std::int64_t sam, std::int64_t sak,
                    const float* __restrict b, std::int64_t ldb, float* __restrict c, std::int64_t ldc) {
    VecT<W> acc[MR][NV];
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
            acc[m][j] = VecT<W>{};
        }
    }
    for (std::int64_t k = 0; k < kn; ++k) {
        VecT<W> row[NV];
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
            row[j] = loadV<W>(b + k * ldb + j * W);
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
            storeV<W>(c + m * ldc + j * W, acc[m][j]);
        }
    }
}

template <int W, int MR>
DR_INLINE void tileColumns(std::int64_t cols, std::int64_t kn, const float* a, std::int64_t sam, std::int64_t sak,
                           const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    std::int64_t n = 0;
    if (W == 16 && cols == 4 * W) { // heads of 64: 4 × 4 tiles (an 8 × 1 one after 8 × 3 waits on its loads)
        constexpr int half = MR > 4 ? MR / 2 : MR;
        for (int m = 0; m < MR; m += half) {
            tile<W, half, 4>(kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
        }
        return;
    }
    // 3 vectors at a time; a last 3 + 1 goes as 2 + 2 (a one-vector tile's MR accumulators are too
    // few chains to keep both FMA units busy: heads of 32 on AVX2).
    const std::int64_t whole = cols % (kMaxVectors * W) == W && cols > W ? cols - (kMaxVectors + 1) * W : cols;
    for (; n + kMaxVectors * W <= whole; n += kMaxVectors * W) {
        tile<W, MR, kMaxVectors>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    }
    if (cols - n == 4 * W) {
        tile<W, MR, 2>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
        tile<W, MR, 2>(kn, a, sam, sak, b + n + 2 * W, ldb, c + n + 2 * W, ldc);
    } else if (cols - n == 2 * W) {
        tile<W, MR, 2>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    } else if (cols - n == W) {
        tile<W, MR, 1>(kn, a, sam, sak, b + n, ldb, c + n, ldc);
    }
}

// C (rows × cols, cols a multiple of W) = A B over kn steps, in tiles of TR rows, then halves.
template <int W, int TR>
DR_INLINE void product(std::int64_t rows, std::int64_t cols, std::int64_t kn, const float* a, std::int64_t sam,
                       std::int64_t sak, const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    std::int64_t m = 0;
    for (; m + TR <= rows; m += TR) {
        tileColumns<W, TR>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
    }
    if constexpr (TR > 4) {
        if (rows - m >= 4) {
            tileColumns<W, 4>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
            m += 4;
        }
    }
    if (rows - m >= 2) {
        tileColumns<W, 2>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
        m += 2;
    }
    if (rows - m == 1) {
        tileColumns<W, 1>(cols, kn, a + m * sam, sam, sak, b, ldb, c + m * ldc, ldc);
    }
}

// One stage of a W × W transpose in registers: rows r and r + B (r in an even block of B)
// swap their off-diagonal B × B blocks. Stages B = W/2, …, 2, 1 transpose the whole.
template <int W, int B, std::size_t... J>
DR_INLINE VecT<W> swapLow(VecT<W> a, VecT<W> b, std::index_sequence<J...>) {
    return __builtin_shufflevector(a, b, ((J / B) % 2 == 0 ? int(J) : W + int(J) - B)...);
}
template <int W, int B, std::size_t... J>
DR_INLINE VecT<W> swapHigh(VecT<W> a, VecT<W> b, std::index_sequence<J...>) {
    return __builtin_shufflevector(a, b, ((J / B) % 2 == 0 ? int(J) + B : W + int(J))...);
}
template <int W, int B>
DR_INLINE void transposeStages(VecT<W>* v) {
    constexpr auto lanes = std::make_index_sequence<W>{};
    for (int r = 0; r < W; ++r) {
        if ((r / B) % 2 == 0) {
            const VecT<W> a = v[r], b = v[r + B];
            v[r] = swapLow<W, B>(a, b, lanes);
            v[r + B] = swapHigh<W, B>(a, b, lanes);
        }
    }
    if constexpr (B > 1) {
        transposeStages<W, B / 2>(v);
    }
}

// out (cols × stride) = xᵀ for x (rows × cols, row stride ldx, cols a multiple of W), zero past `rows` in each
// row: W × W blocks transposed in registers, the rows past the last whole block one by one
// (element by element, strided reads or writes miss L1 on nearly every access).
template <int W>
DR_INLINE void transposeInto(const float* __restrict x, std::int64_t ldx, std::int64_t rows, std::int64_t cols,
                             std::int64_t stride, float* __restrict out) {
    std::int64_t r0 = 0;
    for (; r0 + W <= rows; r0 += W) {
        for (std::int64_t c0 = 0; c0 < cols; c0 += W) {
            VecT<W> v[W];
            for (int i = 0; i < W; ++i) {
                v[i] = loadV<W>(x + (r0 + i) * ldx + c0);
            }
            transposeStages<W, W / 2>(v);
            for (int i = 0; i < W; ++i) {
                storeV<W>(out + (c0 + i) * stride + r0, v[i]);
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

std::int64_t roundUp16(std::int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The causal softmax and its backward in W-wide vectors of the tiles' ISA (vec_inline.h).
// The rows are short (char-gpt's 64 keys), so the shared loops (kernel_inline.h's laneMax /
// laneSum: 64 partial sums on the stack, folded, then scalar tails) cost more than their exps
// (docs/ENGINEERING.md, "Fast paths and kernels"). Here a row's max and sum each
// stay in one register, lanes past the diagonal masked, and reduce across lanes by rotations.
//
// kernel_inline.h's causalSoftmaxRow for R rows at once (row r is query i + r, `stride` floats
// after row r - 1; keys 0..n-1, n > i + R - 1 and a multiple of W), in place: softmax(scale ·
// row[0..i + r]) on columns 0..i + r, 0 on the rest. The rows go in step so that their chains
// of dependent operations (the max and the sum across lanes, the division) overlap.
template <int W, int R>
DR_INLINE void softmaxRows(float* row, std::int64_t stride, std::int64_t i, std::int64_t n, float scale) {
    const VecT<W> lanes = iotaOf<W>(std::make_index_sequence<W>{});
    const std::int64_t end = (i + R - 1 + W) / W * W; // the vectors that hold the last row's columns
    VecT<W> best[R];
    float last[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        best[r] = splat<W>(-kInfinity);
        last[r] = static_cast<float>(i + r);
    }
    for (std::int64_t j = 0; j < end; j += W) {
        const VecT<W> key = lanes + static_cast<float>(j);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            // Two selects, not one on (key <= last) & (x > best): GCC 12 builds that combined
            // mask lane by lane (a vcomiss and a vpinsrd each), which made this loop 3/4 of
            // the forward at char-gpt's shape.
            const VecT<W> x = key <= last[r] ? loadV<W>(row + r * stride + j) : splat<W>(-kInfinity);
            best[r] = x > best[r] ? x : best[r];
        }
    }
    VecT<W> shift[R], sum[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        shift[r] = allMax<W>(best[r]) * scale;
        sum[r] = VecT<W>{};
    }
    // On to n, not end: the few exps past the diagonal cost less than the memset call GCC makes
    // of a loop that stores zeros.
    for (std::int64_t j = 0; j < n; j += W) {
        const VecT<W> key = lanes + static_cast<float>(j);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            VecT<W> e = expV<W>(loadV<W>(row + r * stride + j) * scale - shift[r]);
            e = key <= last[r] ? e : VecT<W>{};
            storeV<W>(row + r * stride + j, e);
            sum[r] += e;
        }
    }
    VecT<W> inv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        inv[r] = 1.0f / allSum<W>(sum[r]);
    }
    for (std::int64_t j = 0; j < end; j += W) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            storeV<W>(row + r * stride + j, loadV<W>(row + r * stride + j) * inv[r]);
        }
    }
}

// kernel_inline.h's causalSoftmaxGradRow for R rows at once (queries i..i + R - 1, rows `stride`
// floats apart): d = scale · p · (d - Σ p·d) in place over n columns (p is 0 past the diagonal,
// so the sums stop at the last row's vector).
template <int W, int R>
DR_INLINE void softmaxGradRows(const float* p, float* d, std::int64_t stride, std::int64_t i, std::int64_t n,
                               float scale) {
    const std::int64_t end = (i + R - 1 + W) / W * W;
    VecT<W> dot[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        dot[r] = VecT<W>{};
    }
    for (std::int64_t j = 0; j < end; j += W) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            dot[r] += loadV<W>(p + r * stride + j) * loadV<W>(d + r * stride + j);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        dot[r] = allSum<W>(dot[r]);
    }
    for (std::int64_t j = 0; j < n; j += W) { // p is 0 past the diagonal: zeros there (no memset call)
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const VecT<W> x = loadV<W>(d + r * stride + j);
            storeV<W>(d + r * stride + j, scale * loadV<W>(p + r * stride + j) * (x - dot[r]));
        }
    }
}

// The columns a row tile ending at row r1 (exclusive) computes and writes: its last key rounded
// up to a whole vector (W floats). p's rows stay 16 apart (attentionRowStride); a tile's columns past
// its n are never read: the products read p and dS up to the tile's last row, and pᵀ and dSᵀ
// only the columns of key rows at or above each query row's tile.
template <int W>
DR_INLINE std::int64_t tileColumnsEnd(std::int64_t r1, std::int64_t stride) {
    return std::min(stride, (r1 + W - 1) / W * W);
}

std::vector<float>& scratch() {
    thread_local std::vector<float> buffer;
    return buffer;
}

// Where head m (= b · heads + h) starts in rows `ld` floats apart.
DR_INLINE std::int64_t headOffset(const AttentionShape& s, std::int64_t m, std::int64_t ld) {
    return (m / s.heads) * s.seq * ld + (m % s.heads) * s.headSize;
}

// The arguments of one ISA's forward or backward over heads h0..h1.
struct ForwardArgs {
    const AttentionShape& s;
    const float *q, *k, *v;
    float scale;
    float *p, *y;
};
struct BackwardArgs {
    const AttentionShape& s;
    const float *q, *k, *v, *p, *dy;
    float scale;
    float *dq, *dk, *dv;
};

// W floats a vector, tiles of TR rows.
template <int W, int TR>
DR_INLINE void forwardHeads(const ForwardArgs& f, std::int64_t h0, std::int64_t h1) {
    const AttentionShape& s = f.s;
    const std::int64_t seq = s.seq, d = s.headSize, ld = s.qkvStride, ldy = s.yStride, stride = roundUp16(seq);
    auto& kt = scratch();
    kt.resize(static_cast<std::size_t>(d * stride));
    for (std::int64_t h = h0; h < h1; ++h) {
        const std::int64_t in = headOffset(s, h, ld);
        const float* qh = f.q + in;
        const float* vh = f.v + in;
        float* ph = f.p + h * seq * stride;
        float* yh = f.y + headOffset(s, h, ldy);
        transposeInto<W>(f.k + in, ld, seq, d, stride, kt.data());
        for (std::int64_t r0 = 0; r0 < seq; r0 += kRows) {
            const std::int64_t r1 = std::min(seq, r0 + kRows), n = tileColumnsEnd<W>(r1, stride);
            product<W, TR>(r1 - r0, n, d, qh + r0 * ld, ld, 1, kt.data(), stride, ph + r0 * stride, stride);
            std::int64_t i = r0;
            for (; i + 4 <= r1; i += 4) {
                softmaxRows<W, 4>(ph + i * stride, stride, i, n, f.scale);
            }
            for (; i + 2 <= r1; i += 2) {
                softmaxRows<W, 2>(ph + i * stride, stride, i, n, f.scale);
            }
            if (i < r1) {
                softmaxRows<W, 1>(ph + i * stride, stride, i, n, f.scale);
            }
            product<W, TR>(r1 - r0, d, r1, ph + r0 * stride, stride, 1, vh, ld, yh + r0 * ldy, ldy);
        }
    }
}

template <int W, int TR>
DR_INLINE void backwardHeads(const BackwardArgs& g, std::int64_t h0, std::int64_t h1) {
    const AttentionShape& s = g.s;
    const std::int64_t seq = s.seq, d = s.headSize, ld = s.qkvStride, ldy = s.yStride, stride = roundUp16(seq);
    auto& buffer = scratch();
    buffer.resize(static_cast<std::size_t>(d * stride + seq * stride));
    float* vt = buffer.data();
    float* ds = vt + d * stride;
    for (std::int64_t h = h0; h < h1; ++h) {
        const std::int64_t in = headOffset(s, h, ld);
        const float* qh = g.q + in;
        const float* kh = g.k + in;
        const float* ph = g.p + h * seq * stride;
        const float* dyh = g.dy + headOffset(s, h, ldy);
        transposeInto<W>(g.v + in, ld, seq, d, stride, vt);
        for (std::int64_t r0 = 0; r0 < seq; r0 += kRows) {
            const std::int64_t r1 = std::min(seq, r0 + kRows), n = tileColumnsEnd<W>(r1, stride);
            product<W, TR>(r1 - r0, n, d, dyh + r0 * ldy, ldy, 1, vt, stride, ds + r0 * stride, stride);
            std::int64_t i = r0;
            for (; i + 4 <= r1; i += 4) {
                softmaxGradRows<W, 4>(ph + i * stride, ds + i * stride, stride, i, n, g.scale);
            }
            for (; i < r1; ++i) {
                softmaxGradRows<W, 1>(ph + i * stride, ds + i * stride, stride, i, n, g.scale);
            }
            product<W, TR>(r1 - r0, d, r1, ds + r0 * stride, stride, 1, kh, ld, g.dq + in + r0 * ld, ld);
        }
        // Key rows j0..: the queries from j0 on see them (p and dS are zero above the diagonal
        // within the tile, as far as the tile's rows were written).
        for (std::int64_t j0 = 0; j0 < seq; j0 += kRows) {
            const std::int64_t j1 = std::min(seq, j0 + kRows);
            product<W, TR>(j1 - j0, d, seq - j0, ph + j0 * stride + j0, 1, stride, dyh + j0 * ldy, ldy,
                           g.dv + in + j0 * ld, ld);
            product<W, TR>(j1 - j0, d, seq - j0, ds + j0 * stride + j0, 1, stride, qh + j0 * ld, ld,
                           g.dk + in + j0 * ld, ld);
        }
    }
}

// Each ISA's code: AVX-512 tiles of 8 rows of zmm, AVX2 + FMA tiles of 4 rows of ymm (8 × 3 ymm
// accumulators would not fit its 16 registers), and the same code for any other CPU.
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target)
#define DR_TILE_ISAS 1
__attribute__((target("avx512f"))) void forwardAvx512(const ForwardArgs& f, std::int64_t h0, std::int64_t h1) {
    forwardHeads<16, 8>(f, h0, h1);
}
__attribute__((target("avx512f"))) void backwardAvx512(const BackwardArgs& g, std::int64_t h0, std::int64_t h1) {
    backwardHeads<16, 8>(g, h0, h1);
}
__attribute__((target("arch=x86-64-v3"))) void forwardAvx2(const ForwardArgs& f, std::int64_t h0, std::int64_t h1) {
    forwardHeads<8, 4>(f, h0, h1);
}
__attribute__((target("arch=x86-64-v3"))) void backwardAvx2(const BackwardArgs& g, std::int64_t h0, std::int64_t h1) {
    backwardHeads<8, 4>(g, h0, h1);
}
#endif
#endif
// The generic tiles take AVX2's shape (8-float vectors fit NEON's 32 registers too), or
// AVX-512's when built with DEVICERACE_GENERIC_TILES_AS_AVX512: tests/sanitizers/sanitize_kernels.sh
// does, so that code's logic (not its instructions) runs on CPUs without AVX-512, against AVX2's.
#ifdef DEVICERACE_GENERIC_TILES_AS_AVX512
constexpr int kGenericWidth = 16, kGenericRows = 8;
#else
constexpr int kGenericWidth = 8, kGenericRows = 4;
#endif
void forwardGeneric(const ForwardArgs& f, std::int64_t h0, std::int64_t h1) {
    forwardHeads<kGenericWidth, kGenericRows>(f, h0, h1);
}
void backwardGeneric(const BackwardArgs& g, std::int64_t h0, std::int64_t h1) {
    backwardHeads<kGenericWidth, kGenericRows>(g, h0, h1);
}

bool supports(TileIsa isa) {
    switch (isa) {
    case TileIsa::generic: return true;
#ifdef DR_TILE_ISAS
    case TileIsa::avx512: return __builtin_cpu_supports("avx512f");
    // All of x86-64-v3: its target attribute lets the compiler use BMI2, LZCNT and MOVBE too,
    // and a hypervisor may hide one of them while AVX2 and FMA show.
    case TileIsa::avx2: return __builtin_cpu_supports("x86-64-v3");
#endif
    default: return false;
    }
}

TileIsa resolve(TileIsa isa) {
    if (isa == TileIsa::best) {
        return tileIsas().front();
    }
    if (!supports(isa)) {
        throw std::invalid_argument("causal attention tiles: this CPU cannot run the " + tileIsaName(isa) + " tiles");
    }
    return isa;
}

void checkShape(const AttentionShape& s) {
    if (s.headSize <= 0 || s.headSize % kAlign != 0) {
        throw std::invalid_argument("causal attention tiles need heads of a multiple of 16 floats");
    }
    if (s.batch < 0 || s.heads <= 0 || s.seq < 0 || s.qkvStride < s.heads * s.headSize ||
        s.yStride < s.heads * s.headSize) {
        throw std::invalid_argument("causal attention tiles: rows narrower than their heads");
    }
}

} // namespace

std::vector<TileIsa> tileIsas() {
    std::vector<TileIsa> out;
    for (TileIsa isa : {TileIsa::avx512, TileIsa::avx2, TileIsa::generic}) {
        if (supports(isa)) {
            out.push_back(isa);
        }
    }
    return out;
}

std::string tileIsaName(TileIsa isa) {
    switch (isa) {
    case TileIsa::avx512: return "AVX-512";
    case TileIsa::avx2: return "AVX2 + FMA";
    case TileIsa::generic: return "generic";
    default: return "best";
    }
}

bool tiledAttentionPays(std::int64_t headSize) {
    if (headSize <= 0 || headSize % kAlign != 0) {
        return false;
    }
    const char* env = devicerace::environmentSwitch("DEVICERACE_CPU_ATTENTION");
    if (env && *env) {
        return std::string_view(env) != "bmm";
    }
    const TileIsa isa = tileIsas().front();
    return isa == TileIsa::avx512 || isa == TileIsa::avx2;
}

std::int64_t attentionRowStride(std::int64_t seq) { return roundUp16(seq); }

namespace {
// Runs one ISA's code (the one `isa` resolves to) over every head, in parallel.
template <class Args>
void overHeads(const AttentionShape& shape, TileIsa isa, const Args& args,
               void (*avx512)(const Args&, std::int64_t, std::int64_t),
               void (*avx2)(const Args&, std::int64_t, std::int64_t),
               void (*generic)(const Args&, std::int64_t, std::int64_t)) {
    checkShape(shape);
    const TileIsa use = resolve(isa);
    auto* run = use == TileIsa::avx512 ? avx512 : use == TileIsa::avx2 ? avx2 : generic;
    at::parallel_for(0, shape.batch * shape.heads, 1, [&](std::int64_t b, std::int64_t e) { run(args, b, e); });
}
#ifndef DR_TILE_ISAS
// Never picked: supports() says no to both without the target attribute.
constexpr auto forwardAvx512 = forwardGeneric, forwardAvx2 = forwardGeneric;
constexpr auto backwardAvx512 = backwardGeneric, backwardAvx2 = backwardGeneric;
#endif
} // namespace

void causalAttentionForward(const AttentionShape& shape, const float* q, const float* k, const float* v, float scale,
                            float* p, float* y, TileIsa isa) {
    overHeads(shape, isa, ForwardArgs{shape, q, k, v, scale, p, y}, forwardAvx512, forwardAvx2, forwardGeneric);
}

void causalAttentionBackward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                             const float* p, const float* dy, float scale, float* dq, float* dk, float* dv,
                             TileIsa isa) {
    overHeads(shape, isa, BackwardArgs{shape, q, k, v, p, dy, scale, dq, dk, dv}, backwardAvx512, backwardAvx2,
              backwardGeneric);
}

} // namespace devicerace::detail::cpu
