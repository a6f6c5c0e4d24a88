// A bf16 convolution's weight gradient on the AVX-512 BF16 tiles (see bf16_conv_wgrad.h).
//
// As a GEMM: dw [oc x kh*kw*c] = dy^T [oc x pixels] . columns [pixels x kh*kw*c], k the output
// pixels. dy^T's tiles of 8 output channels are packed along the pixels' pairs as the GEMM packs a
// transposed a; a panel of 32 columns is packed straight from x: each pixel's 32 values are one to
// a few runs of contiguous channels (a tap's, or several taps' where c < 32), each one masked
// load at its place in the vector (a tap in the padding leaves zeros), two pixels' vectors then
// interleaved into pairs. A panel is packed once per block of 256 pixels and passed by every tile
// while it is in L1. The pixels are split over the threads, each with its own sums (dw is small:
// at most a few hundred kB), added at the end: no packing repeated by two threads. Stride-1
// "same" layers with even widths and channels in runs of 16 take a second path (pairedPart,
// below) that copies x once an image as pairs and reads every tap from that copy in place.
#include "kernels/bf16_conv_wgrad.h"

#include <ATen/Parallel.h>

#include <vector>

#include "kernels/bf16_tile.h" // defines DR_BF16_GEMM where the target attributes exist

namespace devicerace::detail::cpu {

#ifdef DR_BF16_GEMM

namespace {

// One run of a panel's columns: the channels [c0, c0 + len) of tap (i, j), at the panel's
// columns [offset, offset + len) (the bits of `mask`).
struct Run {
    std::int64_t i, j, c0, offset;
    __mmask32 mask;
};

// Where a panel's 32 columns come from: its runs; and where c is a multiple of 16, each half of
// the panel is 16 channels of one tap (`present` false past the last column).
struct PanelSource {
    std::vector<Run> runs;
    struct Half {
        std::int64_t i = 0, j = 0, c0 = 0;
        bool present = false;
        std::int64_t offset = 0; // from the patch's first value, (i * w + j) * c + c0
    } halves[2];
};

PanelSource sourceOf(const ConvGeometry& g, std::int64_t j0, std::int64_t cols) {
    PanelSource s;
    for (std::int64_t col = j0; col < j0 + cols;) {
        const std::int64_t tap = col / g.c, c = col % g.c;
        const std::int64_t len = std::min(g.c - c, j0 + cols - col);
        const std::uint32_t bits = len >= 32 ? ~0u : (1u << len) - 1u;
        s.runs.push_back({tap / g.kw, tap % g.kw, c, col - j0, static_cast<__mmask32>(bits << (col - j0))});
        col += len;
    }
    for (std::int64_t h = 0; h < 2; ++h) {
        const std::int64_t col = j0 + 16 * h, tap = col / g.c;
        const std::int64_t i = tap / g.kw, j = tap % g.kw;
        s.halves[h] = {i, j, col % g.c, 16 * h < cols, (i * g.w + j) * g.c + col % g.c};
    }
    return s;
}

// An output pixel as (image, row, column), stepped in the pixels' order.
struct Pixel {
    std::int64_t image, y, x;
    void next(std::int64_t oh, std::int64_t ow) {
        if (++x == ow) {
            x = 0;
            if (++y == oh) {
                y = 0;
                ++image;
            }
        }
    }
};

bool inside(const ConvGeometry& g, std::int64_t iy, std::int64_t ix) {
    return static_cast<std::uint64_t>(iy) < static_cast<std::uint64_t>(g.h) &&
           static_cast<std::uint64_t>(ix) < static_cast<std::uint64_t>(g.w);
}

// One pixel's values at a panel's 32 columns (zero past the panel's columns and in the padding).
DR_AVX512_BF16 inline __m512i patch(const std::uint16_t* x, const ConvGeometry& g, const Pixel& p,
                                    const PanelSource& s) {
    const std::int64_t y0 = p.y * g.sh - g.ph, x0 = p.x * g.sw - g.pw;
    const std::uint16_t* image = x + p.image * g.h * g.w * g.c;
    if (g.c % 16 == 0) {                                             // two halves of 16 channels: two plain loads
        const std::uint16_t* corner = image + (y0 * g.w + x0) * g.c; // the patch's first value (maybe padding)
        const bool interior = y0 >= 0 && x0 >= 0 && y0 + g.kh <= g.h && x0 + g.kw <= g.w;
        __m256i v[2];
        for (int h = 0; h < 2; ++h) {
            const auto& half = s.halves[h];
            v[h] = half.present && (interior || inside(g, y0 + half.i, x0 + half.j))
                       ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corner + half.offset))
                       : _mm256_setzero_si256();
        }
        return _mm512_inserti64x4(_mm512_castsi256_si512(v[0]), v[1], 1);
    }
    __m512i v = _mm512_setzero_si512();
    for (const Run& run : s.runs) {
        const std::int64_t iy = y0 + run.i, ix = x0 + run.j;
        if (inside(g, iy, ix)) {
            // The load starts `offset` values before the run so that it lands at its columns;
            // the masked-off values before it are never read (AVX-512 masked loads do not fault).
            const std::uint16_t* src = image + (iy * g.w + ix) * g.c + run.c0;
            v = _mm512_mask_loadu_epi16(v, run.mask, reinterpret_cast<const char*>(src) - 2 * run.offset);
        }
    }
    return v;
}

// The panel [pair][32 columns] of the pixels [k0, k0 + 2 pairs), stopping at kEnd, from `first`.
DR_AVX512_BF16 void packPatches(const std::uint16_t* x, const ConvGeometry& g, Pixel first, std::int64_t k0,
                                std::int64_t kEnd, std::int64_t pairs, const PanelSource& source,
                                std::uint32_t* panel) {
    const std::int64_t oh = g.oh(), ow = g.ow();
    Pixel p = first;
    for (std::int64_t q = 0; q < pairs; ++q) {
        const __m512i a = patch(x, g, p, source);
        p.next(oh, ow);
        const __m512i b = k0 + 2 * q + 1 < kEnd ? patch(x, g, p, source) : _mm512_setzero_si512();
        p.next(oh, ow);
        storePairs(a, b, panel + q * kCols);
    }
}

struct Buffers {
    std::vector<std::uint32_t> a, panel;
};
Buffers& buffers() {
    thread_local Buffers s;
    return s;
}

// dw's sums over the pixels [kBegin, kEnd) into c [oc x width], on the calling thread.
void part(const ConvGeometry& g, const std::uint16_t* x, const std::uint16_t* dy, std::int64_t kBegin,
          std::int64_t kEnd, const std::vector<PanelSource>& sources, float* c) {
    const std::int64_t width = g.kh * g.kw * g.c, oh = g.oh(), ow = g.ow();
    const std::int64_t tiles = (g.oc + kRows - 1) / kRows, panels = static_cast<std::int64_t>(sources.size());
    if (kBegin >= kEnd) {
        std::fill_n(c, g.oc * width, 0.0f);
        return;
    }
    auto& buf = buffers();
    buf.a.resize(static_cast<std::size_t>(tiles * kPairs * kRows));
    buf.panel.resize(static_cast<std::size_t>(kPairs * kCols));
    const std::int64_t pixelsPerImage = oh * ow;
    for (std::int64_t k0 = kBegin; k0 < kEnd; k0 += 2 * kPairs) {
        const auto pairs = std::min(kPairs, (kEnd - k0 + 1) / 2);
        const Pixel at{k0 / pixelsPerImage, k0 % pixelsPerImage / ow, k0 % ow}; // the block's first pixel
        const auto tileSize = pairs * kRows;
        for (std::int64_t t = 0; t < tiles; ++t) {
            packA(true, dy, g.oc, kEnd, k0, pairs, t * kRows, std::min(kRows, g.oc - t * kRows),
                  buf.a.data() + t * tileSize);
        }
        for (std::int64_t q = 0; q < panels; ++q) {
            const auto cols = std::min(kCols, width - q * kCols);
            packPatches(x, g, at, k0, kEnd, pairs, sources[static_cast<std::size_t>(q)], buf.panel.data());
            for (std::int64_t t = 0; t < tiles; ++t) {
                const auto rows = std::min(kRows, g.oc - t * kRows);
                kTiles[rows - 1](reinterpret_cast<const char*>(buf.a.data() + t * tileSize), 4, kRows * 4,
                                 buf.panel.data(), pairs, c + t * kRows * width + q * kCols, width, cols, k0 > kBegin);
            }
        }
    }
}

// --- stride 1, "same" padding, even width, c a multiple of 16: x read in place as pairs --------
//
// Every tap of such a layer reads x shifted: output pixels (x, x + 1) of a row read input columns
// (x + d, x + d + 1), d = j - pw. So x is copied once an image into two pair-interleaved
// arrays, pairs of columns (2q, 2q + 1) and (2q + 1, 2q + 2), each pair's channels as c 32-bit
// pairs, with zero rows and pairs as the padding; a tap's panel half (16 channels) is then a
// strided view of one of them, read by the tiles in place: c values a pixel copied twice instead
// of kh * kw * c gathered once per panel.

bool pairedFits(const ConvGeometry& g) {
    return g.sh == 1 && g.sw == 1 && g.kh % 2 == 1 && g.kw % 2 == 1 && g.ph == g.kh / 2 && g.pw == g.kw / 2 &&
           g.w % 2 == 0 && g.c % 16 == 0 && g.h >= 16;
}

// c's tile [R rows x 16 or 32 columns] (+)= a's R rows' pairs . b, over `rows` rows of
// `pairsPerRow` pairs: a [pair][8] (pairs in row order), b's two halves at b0 and b1 (16 pairs
// of columns each, b1 null for a 16-column tile), the next pair `pairStride` 32-bit words on,
// the next row `rowStride` on.
template <int R, bool Two>
DR_AVX512_BF16 void tileRows(const std::uint32_t* a, const std::uint32_t* b0, const std::uint32_t* b1,
                             std::int64_t rowStride, std::int64_t pairStride, std::int64_t rows,
                             std::int64_t pairsPerRow, float* c, std::int64_t ldc, bool accumulate) {
    __m512 acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        acc[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = Two && accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (std::int64_t y = 0; y < rows; ++y) {
        const std::uint32_t* p0 = b0 + y * rowStride;
        const std::uint32_t* p1 = Two ? b1 + y * rowStride : nullptr;
        const std::uint32_t* ay = a + y * pairsPerRow * kRows;
        for (std::int64_t q = 0; q < pairsPerRow; ++q) {
            const auto v0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p0 + q * pairStride));
            const auto v1 = Two ? reinterpret_cast<__m512bh>(_mm512_loadu_si512(p1 + q * pairStride)) : v0;
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const auto av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(ay[q * kRows + r])));
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, v0);
                if (Two) {
                    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, v1);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        _mm512_storeu_ps(c + r * ldc, acc[r][0]);
        if (Two) {
            _mm512_storeu_ps(c + r * ldc + 16, acc[r][1]);
        }
    }
}

using TileRowsFn = void (*)(const std::uint32_t*, const std::uint32_t*, const std::uint32_t*, std::int64_t,
                            std::int64_t, std::int64_t, std::int64_t, float*, std::int64_t, bool);
constexpr TileRowsFn kTileRows[2][kRows] = {
    {tileRows<1, false>, tileRows<2, false>, tileRows<3, false>, tileRows<4, false>, tileRows<5, false>,
     tileRows<6, false>, tileRows<7, false>, tileRows<8, false>},
    {tileRows<1, true>, tileRows<2, true>, tileRows<3, true>, tileRows<4, true>, tileRows<5, true>, tileRows<6, true>,
     tileRows<7, true>, tileRows<8, true>}};

// One image's x [h x w x c] as pairs: out[(r * rowPairs + q) * c + ch] holds columns (2(q - margin)
// + shift, + 1) of input row r - ph, channel ch (zero outside x). The two pixels of a pair are
// adjacent in x: with 16 channels one load holds both and one permutation pairs them.
DR_AVX512_BF16 void pairRows(const std::uint16_t* x, const ConvGeometry& g, std::int64_t shift, std::int64_t margin,
                             std::uint32_t* out) {
    alignas(64) static const std::uint16_t pairs16[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx16 = _mm512_load_si512(pairs16);
    const std::int64_t rowPairs = g.w / 2 + 2 * margin, rowValues = rowPairs * g.c;
    for (std::int64_t r = 0; r < g.h + 2 * g.ph; ++r) {
        std::uint32_t* row = out + r * rowValues;
        const std::int64_t y = r - g.ph;
        if (y < 0 || y >= g.h) {
            std::memset(row, 0, static_cast<std::size_t>(rowValues) * sizeof(std::uint32_t));
            continue;
        }
        const std::uint16_t* in = x + y * g.w * g.c;
        // x was written long before (the forward): ask for the row after next while this one is paired.
        if (y + 2 < g.h) {
            const char* ahead = reinterpret_cast<const char*>(in + 2 * g.w * g.c);
            for (std::int64_t b = 0; b < g.w * g.c * 2; b += 64) {
                _mm_prefetch(ahead + b, _MM_HINT_T0);
            }
        }
        for (std::int64_t q = 0; q < rowPairs; ++q) {
            std::uint32_t* dst = row + q * g.c;
            const std::int64_t x0 = 2 * (q - margin) + shift; // the pair's first column
            if (x0 + 1 < 0 || x0 >= g.w) {
                std::memset(dst, 0, static_cast<std::size_t>(g.c) * sizeof(std::uint32_t));
                continue;
            }
            const bool in0 = x0 >= 0, in1 = x0 + 1 < g.w;
            if (g.c == 16) {
                const __mmask32 mask = (in0 ? 0x0000FFFFu : 0u) | (in1 ? 0xFFFF0000u : 0u);
                const __m512i v = _mm512_maskz_loadu_epi16(mask, in + x0 * 16);
                _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(idx16, v));
                continue;
            }
            for (std::int64_t c0 = 0; c0 < g.c; c0 += 32) {
                const std::int64_t n = std::min<std::int64_t>(32, g.c - c0);
                const __mmask32 mask = n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
                const __m512i v0 = in0 ? _mm512_maskz_loadu_epi16(mask, in + x0 * g.c + c0) : _mm512_setzero_si512();
                const __m512i v1 =
                    in1 ? _mm512_maskz_loadu_epi16(mask, in + (x0 + 1) * g.c + c0) : _mm512_setzero_si512();
                if (n > 16) {
                    storePairs(v0, v1, dst + c0);
                } else { // the last 16 channels: the low half of the pairs
                    alignas(64) std::uint32_t both[32];
                    storePairs(v0, v1, both);
                    std::memcpy(dst + c0, both, 16 * sizeof(std::uint32_t));
                }
            }
        }
    }
}

struct PairedBuffers {
    std::vector<std::uint32_t> even, odd, a;
};
PairedBuffers& pairedBuffers() {
    thread_local PairedBuffers s;
    return s;
}

// dw's sums over the images [n0, n1) into c [oc x width], on the calling thread.
void pairedPart(const ConvGeometry& g, const std::uint16_t* x, const std::uint16_t* dy, std::int64_t n0,
                std::int64_t n1, float* c) {
    const std::int64_t width = g.kh * g.kw * g.c, tiles = (g.oc + kRows - 1) / kRows;
    if (n0 >= n1) {
        std::fill_n(c, g.oc * width, 0.0f);
        return;
    }
    const std::int64_t margin = g.pw / 2 + 1, rowPairs = g.w / 2 + 2 * margin;
    const std::int64_t pairsPerRow = g.w / 2, imagePairs = g.h * pairsPerRow;
    auto& buf = pairedBuffers();
    const auto arraySize = static_cast<std::size_t>((g.h + 2 * g.ph) * rowPairs * g.c);
    buf.even.resize(arraySize);
    buf.odd.resize(arraySize);
    buf.a.resize(static_cast<std::size_t>(tiles * imagePairs * kRows));
    for (std::int64_t image = n0; image < n1; ++image) {
        const std::uint16_t* xi = x + image * g.h * g.w * g.c;
        pairRows(xi, g, 0, margin, buf.even.data());
        pairRows(xi, g, 1, margin, buf.odd.data());
        for (std::int64_t t = 0; t < tiles; ++t) {
            packA(true, dy + image * g.h * g.w * g.oc, g.oc, g.h * g.w, 0, imagePairs, t * kRows,
                  std::min(kRows, g.oc - t * kRows), buf.a.data() + t * imagePairs * kRows);
        }
        // A panel half's first pair: tap (i, j), channels from c0; column shift d = j - pw.
        const auto half = [&](std::int64_t col) {
            const std::int64_t tap = col / g.c, c0 = col % g.c, i = tap / g.kw, d = tap % g.kw - g.pw;
            const bool odd = (d % 2) != 0;
            const std::int64_t q = margin + (odd ? (d - 1) / 2 : d / 2);
            return (odd ? buf.odd.data() : buf.even.data()) + (i * rowPairs + q) * g.c + c0;
        };
        for (std::int64_t j0 = 0; j0 < width; j0 += kCols) {
            const bool two = width - j0 > 16;
            const std::uint32_t* b0 = half(j0);
            const std::uint32_t* b1 = two ? half(j0 + 16) : nullptr;
            for (std::int64_t t = 0; t < tiles; ++t) {
                const auto rows = std::min(kRows, g.oc - t * kRows);
                kTileRows[two][rows - 1](buf.a.data() + t * imagePairs * kRows, b0, b1, rowPairs * g.c, g.c, g.h,
                                         pairsPerRow, c + t * kRows * width + j0, width, image > n0);
            }
        }
    }
}

} // namespace

void convWeightGradBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy, float* dw) {
    const std::int64_t width = g.kh * g.kw * g.c, pixels = g.n * g.oh() * g.ow();
    if (g.oc <= 0 || width <= 0) {
        return;
    }
    std::vector<PanelSource> sources;
    for (std::int64_t j0 = 0; j0 < width; j0 += kCols) {
        sources.push_back(sourceOf(g, j0, std::min(kCols, width - j0)));
    }
    const auto* x16 = reinterpret_cast<const std::uint16_t*>(x);
    const auto* dy16 = reinterpret_cast<const std::uint16_t*>(dy);
    const std::int64_t threads = at::in_parallel_region() ? 1 : std::max(1, at::get_num_threads());
    const bool paired = pairedFits(g);
    // At least a few blocks of pixels a part, so that small layers stay on one thread; whole
    // images where x is read as pairs.
    const std::int64_t parts = paired ? std::clamp<std::int64_t>(g.n, 1, threads)
                                      : std::clamp<std::int64_t>(pixels / (8 * kPairs), 1, threads);
    // The first part's sums are dw; the others' go here, then are added to it.
    const std::int64_t size = g.oc * width;
    thread_local std::vector<float> others;
    others.resize(static_cast<std::size_t>((parts - 1) * size));
    float* more = others.data();
    at::parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto p = begin; p < end; ++p) {
            float* c = p == 0 ? dw : more + (p - 1) * size;
            if (paired) {
                pairedPart(g, x16, dy16, p * g.n / parts, (p + 1) * g.n / parts, c);
                continue;
            }
            const std::int64_t k0 = p * pixels / parts / 2 * 2;
            const std::int64_t k1 = p + 1 == parts ? pixels : (p + 1) * pixels / parts / 2 * 2;
            part(g, x16, dy16, k0, k1, sources, c);
        }
    });
    for (std::int64_t p = 1; p < parts; ++p) {
        const float* s = more + (p - 1) * size;
        for (std::int64_t i = 0; i < size; ++i) {
            dw[i] += s[i];
        }
    }
}

#else

void convWeightGradBf16(const ConvGeometry&, const Bf16*, const Bf16*, float*) {}

#endif

} // namespace devicerace::detail::cpu
