// A bf16 convolution's weight gradient on the AVX-512 BF16 tiles (see bf16_conv_wgrad.h).
//
// As a GEMM: dw [oc x kh*kw*c] = dy^T [oc x pixels] . columns [pixels x kh*kw*c], k the output
// pixels. dy^T's tiles of 8 output channels are packed along the pixels' pairs as the GEMM packs a
// transposed a; a panel of 32 columns is packed straight from x: each pixel's 32 values are one to
// a few runs of contiguous channels (a tap's, or several taps' where c < 32), each one masked
// load at its place in the vector (a tap in the padding leaves zeros), two pixels' vectors then
// interleaved into pairs. A panel is packed once per block of 256 pixels and passed by every tile
// while it is in L1. The pixels are split over the threads, each with its own sums (dw is small:
// at most a few hundred kB), added at the end: no packing repeated by two threads.
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
    Pixel at{kBegin / pixelsPerImage, kBegin % pixelsPerImage / ow, kBegin % ow};
    for (std::int64_t k0 = kBegin; k0 < kEnd; k0 += 2 * kPairs) {
        const auto pairs = std::min(kPairs, (kEnd - k0 + 1) / 2);
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
        for (std::int64_t s = 0; s < 2 * pairs; ++s) {
            at.next(oh, ow);
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
    // At least a few blocks of pixels a part, so that small layers stay on one thread.
    const std::int64_t parts = std::clamp<std::int64_t>(pixels / (8 * kPairs), 1, threads);
    // The first part's sums are dw; the others' go here, then are added to it.
    const std::int64_t size = g.oc * width;
    thread_local std::vector<float> others;
    others.resize(static_cast<std::size_t>((parts - 1) * size));
    float* more = others.data();
    at::parallel_for(0, parts, 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto p = begin; p < end; ++p) {
            const std::int64_t k0 = p * pixels / parts / 2 * 2;
            const std::int64_t k1 = p + 1 == parts ? pixels : (p + 1) * pixels / parts / 2 * 2;
            part(g, x16, dy16, k0, k1, sources, p == 0 ? dw : more + (p - 1) * size);
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
