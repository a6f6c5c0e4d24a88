#pragma once
// What the one-pass CPU loops share (cpu_kernels.cpp, pool_kernels.cpp): the per-ISA clone and
// inline attributes, float/bf16 loads and stores, and the hashed dropout mask. Internal to the
// kernels' .cpp files (everything is inline, in an unnamed namespace).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu_kernels.h"

// Not under ThreadSanitizer: GCC instruments the clones' ifunc resolvers, which the dynamic loader
// runs while relocating the engine, before TSan's runtime is up, and every TSan binary crashed at
// load (in libtsan, from _dl_relocate_object). TSan builds run the default clone alone.
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
// "avx2" leaves FMA out (GCC's avx2 target does not imply it): "arch=x86-64-v3" would fuse the
// AVX2 clones' multiplies and adds, but measured within noise on whole races (AMD EPYC),
// so the clones keep their rounding. The attention tiles, which need FMA, carry their own target.
// (Only the avx2 and default clones keep it: GCC's avx512f target has FMA, AVX-512F's own, and fuses
// — `objdump` of biasGeluF and layerNormBackwardRange avx512f clones: 71 and 34 vfmadd.)
// DR_CLONES_FMA: for a loop that FMA measurably speeds up on AVX2 CPUs (the GPT's bias + GELU:
// ~1.3x from FMA alone on an AMD EPYC).
#define DR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define DR_CLONES_FMA __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef DR_CLONES
#define DR_CLONES
#define DR_CLONES_FMA
#endif
#define DR_INLINE inline __attribute__((always_inline))

namespace devicerace::detail::cpu {
namespace {

// Elements per task of a parallel loop: small loops stay on the calling thread (waking the
// other threads costs more than a pass over a few hundred kB).
constexpr std::int64_t kGrain = 1 << 16;

DR_INLINE float load(const float& v) { return v; }
DR_INLINE float load(const Bf16& v) {
    const std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
DR_INLINE void store(float& dst, float v) { dst = v; }
// Round to nearest even, NaN kept a NaN.
DR_INLINE void store(Bf16& dst, float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    dst.bits = v != v ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>(rounded);
}

DR_INLINE float load(const Bf16InF32& v) { return v.v; }
// store(Bf16&)'s rounding with the result widened again: the upper half of the rounded bits, NaN
// the bf16 NaN widened.
DR_INLINE void store(Bf16InF32& dst, float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    rounded = v != v ? 0x7FC00000u : rounded;
    std::memcpy(&dst.v, &rounded, sizeof rounded);
}

// Chris Wellons' lowbias32 finaliser, twice: indices that differ in one bit give unrelated bits.
DR_INLINE std::uint32_t mix32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
DR_INLINE std::uint32_t maskBits(std::uint64_t seed, std::uint32_t index) {
    return mix32(mix32(index ^ static_cast<std::uint32_t>(seed)) + static_cast<std::uint32_t>(seed >> 32));
}
DR_INLINE std::uint32_t keepThreshold(float p) {
    const double t = std::clamp(static_cast<double>(p), 0.0, 1.0) * 4294967296.0;
    return t >= 4294967295.0 ? std::numeric_limits<std::uint32_t>::max() : static_cast<std::uint32_t>(t);
}

// Σ term(i) for i < n in running partial sums: GCC keeps a float sum's order (no -ffast-math), so
// one accumulator is a serial chain of adds. 64 of them (four vectors of 16) while 64 terms remain,
// so one pass's adds do not wait on each other (one vector of 16 was a chain of 4-cycle adds: 10%
// of the attention's backward), then 16, then one by one; the partial sums fold in halves.
constexpr int kLanes = 16;
constexpr int kWideLanes = 4 * kLanes;
DR_INLINE float foldLanes(float* acc) {
#pragma GCC unroll 8
    for (int half = kWideLanes / 2; half >= 1; half /= 2) {
        for (int j = 0; j < half; ++j) {
            acc[j] += acc[j + half];
        }
    }
    return acc[0];
}
template <class F>
DR_INLINE float laneSum(std::int64_t n, const F& term) {
    // Started at -0.0f, not 0: x + -0.0f is x for every x, and a zero fill became a `rep stosq` of
    // 256 bytes (~30 cycles to start) on every call, which for the 128-wide rows of a layer norm or
    // a short softmax row was a large part of the row's time.
    float acc[kWideLanes];
    std::fill(acc, acc + kWideLanes, -0.0f);
    std::int64_t i = 0;
    for (; i + kWideLanes <= n; i += kWideLanes) {
        for (int j = 0; j < kWideLanes; ++j) {
            acc[j] += term(i + j);
        }
    }
    for (; i + kLanes <= n; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
            acc[j] += term(i + j);
        }
    }
    float sum = foldLanes(acc);
    for (; i < n; ++i) {
        sum += term(i);
    }
    return sum;
}
template <class F>
DR_INLINE float laneMax(std::int64_t n, const F& term) {
    float acc[kWideLanes];
    std::fill(acc, acc + kWideLanes, term(0));
    std::int64_t i = 0;
    for (; i + kWideLanes <= n; i += kWideLanes) {
        for (int j = 0; j < kWideLanes; ++j) {
            const float v = term(i + j);
            acc[j] = v > acc[j] ? v : acc[j];
        }
    }
    for (; i + kLanes <= n; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
            const float v = term(i + j);
            acc[j] = v > acc[j] ? v : acc[j];
        }
    }
#pragma GCC unroll 8
    for (int half = kWideLanes / 2; half >= 1; half /= 2) {
        for (int j = 0; j < half; ++j) {
            acc[j] = acc[j + half] > acc[j] ? acc[j + half] : acc[j];
        }
    }
    float best = acc[0];
    for (; i < n; ++i) {
        best = std::max(best, term(i));
    }
    return best;
}

// exp(x) / 2^n for n = round(x / ln2), by Cephes' degree-6 polynomial in r = x - n ln2 (ln2 in
// two parts). T: float, or a GCC vector of floats (vec_inline.h's expV), the same operations.
template <class T>
DR_INLINE T expOfReduced(T x, T n) {
    T r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    T p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}
// Cephes' expf: exp(x) = 2^n · exp(r), |r| ≤ ln2/2, exp(r) by a degree-6 polynomial. Written
// with selects and integer bit work only, so the loops around it vectorise. For x in [-87, 88],
// where 2^n stays a normal float, unclamped: for a caller that bounds x itself (GELU's normal).
DR_INLINE float expInRange(float x) {
    const float t = x * 1.44269504088896341f;
    // Round to the nearest integer by adding and removing 1.5 · 2^23 (|t| < 2^22); the build has
    // no -ffast-math, so the compiler keeps both.
    const float n = (t + 12582912.0f) - 12582912.0f;
    const float y = expOfReduced(x, n);
    const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) * (1 << 23);
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}
// exp(x) for any x, clamped to [-87, 88] first (sigmoid and tanh saturate long before).
DR_INLINE float expBody(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    return expInRange(x);
}

// Row i of causal attention's scores (keys 0..n-1, n ≥ i + 1 and a multiple of 16 where the row
// allows) in place: softmax(scale · row[0..i]) on columns 0..i, 0 on i+1..n-1 (whole vectors,
// selects past i).
DR_INLINE void causalSoftmaxRow(float* row, std::int64_t i, std::int64_t n, float scale) {
    const float best = laneMax(i + 1, [&](std::int64_t j) { return row[j]; }) * scale;
    for (std::int64_t j = 0; j < n; ++j) {
        const float e = expBody(row[j] * scale - best);
        row[j] = j <= i ? e : 0.0f;
    }
    const float inv = 1.0f / laneSum(n, [&](std::int64_t j) { return row[j]; });
    for (std::int64_t j = 0; j < n; ++j) {
        row[j] *= inv;
    }
}
// Its backward over the same n columns: d = scale · p · (d - Σ p·d) in place (p is 0 past i).
DR_INLINE void causalSoftmaxGradRow(const float* p, float* d, std::int64_t n, float scale) {
    const float dot = laneSum(n, [&](std::int64_t j) { return p[j] * d[j]; });
    for (std::int64_t j = 0; j < n; ++j) {
        d[j] = scale * p[j] * (d[j] - dot);
    }
}

} // namespace
} // namespace devicerace::detail::cpu
