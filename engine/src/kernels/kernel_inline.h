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

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define DR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef DR_CLONES
#define DR_CLONES
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

} // namespace
} // namespace devicerace::detail::cpu
