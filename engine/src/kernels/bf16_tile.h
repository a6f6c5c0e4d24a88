#pragma once
// The AVX-512 BF16 GEMM's shared pieces (kernels/bf16_gemm.cpp, kernels/bf16_conv_wgrad.cpp,
// kernels/bf16_amx_gemm.cpp): a's and b's packing along k's pairs (b's panels are the pairs an AMX
// tile reads too) and the register tile that runs `vdpbf16ps` over a packed b panel.
// Empty where the compiler takes no x86 target attributes (no DR_BF16_GEMM); every function
// carries the AVX-512 BF16 target, so only code that checked haveAvx512Bf16Gemm() may call it.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/avx512_bf16_target.h"
#include "kernels/bf16_gemm.h"

#ifdef DR_BF16_GEMM
namespace devicerace::detail::cpu {
namespace {

constexpr std::int64_t kRows = 8;          // rows of a tile: one broadcast pair each a step
constexpr std::int64_t kCols = 32;         // columns of a tile: two vectors of 16 sums
constexpr std::int64_t kPairs = 128;       // pairs of k a block: a b panel of 16 KB, an a tile of 4 KB
constexpr std::int64_t kTilesPerBlock = 8; // tiles of a that pass one b panel in turn

// One GEMM as the engine's kernels take it: c [m x n] = a' b', a and b bf16 bits as stored.
struct Problem {
    bool transA, transB;
    std::int64_t m, n, k;
    const std::uint16_t* a;
    std::int64_t lda;
    const std::uint16_t* b;
    std::int64_t ldb;
    float* c;
    std::int64_t ldc;
};

// The kernels' frame: no product (gemmWithoutProduct), else part(g, r0, r1, q0, q1) over c's
// blocks of `rowsPerBlock` rows and its panels of kCols columns, split by eachGemmPart.
template <class Part>
void runGemm(const Problem& g, std::int64_t rowsPerBlock, const Part& part) {
    if (gemmWithoutProduct(g.m, g.n, g.k, g.c, g.ldc)) {
        return;
    }
    eachGemmPart((g.m + rowsPerBlock - 1) / rowsPerBlock, (g.n + kCols - 1) / kCols,
                 [&](std::int64_t r0, std::int64_t r1, std::int64_t q0, std::int64_t q1) { part(g, r0, r1, q0, q1); });
}

inline std::uint32_t pairOf(std::uint16_t lo, std::uint16_t hi) {
    return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// Two rows of b, x and y (32 bf16 values each), as the 32 pairs (x[j], y[j]) of a panel's row.
DR_AVX512_BF16 inline void storePairs(__m512i x, __m512i y, std::uint32_t* panelRow) {
    alignas(64) static const std::uint16_t lo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static const std::uint16_t hi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                     24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    _mm512_storeu_si512(panelRow, _mm512_permutex2var_epi16(x, _mm512_load_si512(lo), y));
    _mm512_storeu_si512(panelRow + 16, _mm512_permutex2var_epi16(x, _mm512_load_si512(hi), y));
}

// a's rows [i0, i0 + rows) over k [k0, k0 + 2 pairs) into tile [pair][8 rows] (zero past m, k).
DR_AVX512_BF16 inline void packA(bool transA, const std::uint16_t* a, std::int64_t lda, std::int64_t k, std::int64_t k0,
                                 std::int64_t pairs, std::int64_t i0, std::int64_t rows, std::uint32_t* tile) {
    if (transA) {
        // a stored [k x m]: rows kk and kk + 1, 8 columns (c's rows) at once.
        const __mmask8 mask = static_cast<__mmask8>((1u << rows) - 1);
        for (std::int64_t p = 0; p < pairs; ++p) {
            const auto kk = k0 + 2 * p;
            const std::uint16_t* row = a + kk * lda + i0;
            const __m128i x = _mm_maskz_loadu_epi16(mask, row);
            const __m128i y = kk + 1 < k ? _mm_maskz_loadu_epi16(mask, row + lda) : _mm_setzero_si128();
            _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + p * kRows), _mm_unpacklo_epi16(x, y));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + p * kRows + 4), _mm_unpackhi_epi16(x, y));
        }
        return;
    }
    for (std::int64_t r = 0; r < kRows; ++r) {
        if (r >= rows) {
            for (std::int64_t p = 0; p < pairs; ++p) {
                tile[p * kRows + r] = 0;
            }
            continue;
        }
        const std::uint16_t* row = a + (i0 + r) * lda + k0;
        for (std::int64_t p = 0; p < pairs; ++p) {
            tile[p * kRows + r] = pairOf(row[2 * p], k0 + 2 * p + 1 < k ? row[2 * p + 1] : 0);
        }
    }
}

// r[i][j] -> r[j][i] for 16 x 16 32-bit words: pairs, then quads within each 128-bit lane, then
// the lanes across registers.
DR_AVX512_BF16 inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    __m512i u[16];
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
        u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
        u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
        u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
    }
    // u[4g + q]'s lane l holds column 4l + q of rows 4g..4g+3.
    for (int q = 0; q < 4; ++q) {
        const __m512i x0 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x44);
        const __m512i x1 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xEE);
        const __m512i x2 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x44);
        const __m512i x3 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xEE);
        r[q] = _mm512_shuffle_i32x4(x0, x2, 0x88);
        r[4 + q] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
        r[8 + q] = _mm512_shuffle_i32x4(x1, x3, 0x88);
        r[12 + q] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
    }
}

// b's columns [j0, j0 + cols) over k [k0, k0 + 2 pairs) into panel [pair][32 columns].
DR_AVX512_BF16 inline void packB(bool transB, const std::uint16_t* b, std::int64_t ldb, std::int64_t k, std::int64_t k0,
                                 std::int64_t pairs, std::int64_t j0, std::int64_t cols, std::uint32_t* panel) {
    if (!transB) {
        // b stored [k x n]: rows kk and kk + 1 interleaved, 32 columns at once.
        const __mmask32 mask = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
        for (std::int64_t p = 0; p < pairs; ++p) {
            const auto kk = k0 + 2 * p;
            const std::uint16_t* row = b + kk * ldb + j0;
            const __m512i x = _mm512_maskz_loadu_epi16(mask, row);
            const __m512i y = kk + 1 < k ? _mm512_maskz_loadu_epi16(mask, row + ldb) : _mm512_setzero_si512();
            storePairs(x, y, panel + p * kCols);
        }
        return;
    }
    // b stored [n x k]: each column's pairs are contiguous in its row; 16 columns x 16 pairs at a
    // time transposed (as 32-bit words) into the panel.
    for (std::int64_t jb = 0; jb < kCols; jb += 16) {
        for (std::int64_t p0 = 0; p0 < pairs; p0 += 16) {
            const auto count = std::min<std::int64_t>(16, pairs - p0);
            const auto valid = std::min<std::int64_t>(32, k - (k0 + 2 * p0)); // bf16 values in a row's segment
            const __mmask32 mask = valid >= 32 ? ~__mmask32{0} : (__mmask32{1} << valid) - 1;
            __m512i r[16];
            for (std::int64_t i = 0; i < 16; ++i) {
                r[i] = jb + i < cols ? _mm512_maskz_loadu_epi16(mask, b + (j0 + jb + i) * ldb + k0 + 2 * p0)
                                     : _mm512_setzero_si512();
            }
            transpose16(r);
            for (std::int64_t c = 0; c < count; ++c) {
                _mm512_storeu_si512(panel + (p0 + c) * kCols + jb, r[c]);
            }
        }
    }
}

// c's tile [R rows x cols] (+)= a's R rows' pairs . b's panel. a's pair p of row r is at
// a + r * rowBytes + p * pairBytes.
template <int R>
DR_AVX512_BF16 void tile(const char* a, std::int64_t rowBytes, std::int64_t pairBytes, const std::uint32_t* b,
                         std::int64_t pairs, float* c, std::int64_t ldc, std::int64_t cols, bool accumulate) {
    const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32  ? __mmask16(0xFFFF)
                         : cols > 16 ? static_cast<__mmask16>((1u << (cols - 16)) - 1)
                                     : __mmask16(0);
    __m512 acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        acc[r][0] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (std::int64_t p = 0; p < pairs; ++p) {
        const auto b0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * kCols));
        const auto b1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + p * kCols + 16));
        const char* ap = a + p * pairBytes;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            std::int32_t v;
            std::memcpy(&v, ap + r * rowBytes, sizeof v);
            const auto av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
    }
}

using TileFn = void (*)(const char*, std::int64_t, std::int64_t, const std::uint32_t*, std::int64_t, float*,
                        std::int64_t, std::int64_t, bool);
constexpr TileFn kTiles[kRows] = {tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>, tile<7>, tile<8>};

} // namespace
} // namespace devicerace::detail::cpu
#endif
