#pragma once
// Explicit vectors for the kernels' hand-vectorised loops (attention_kernels.cpp, gpt_kernels.cpp):
// GCC's vector extensions of W = 16 or 8 floats, loads and stores at any alignment, reductions
// across lanes by rotations, Cephes' exp lane by lane, and bf16 stores. A W-wide type compiles
// for any target: in a function built for AVX-512 a V16 is one zmm register, for AVX2 two ymm,
// otherwise four xmm. Internal to the kernels' .cpp files (everything inline, in an unnamed
// namespace), as kernel_inline.h. A file that uses it builds with -Wno-psabi: GCC warns that a
// vector argument or return changes the ABI wherever the caller's target lacks AVX (a
// target_clones body's default clone), though every helper here is inlined and no such call is made.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/kernel_inline.h"

namespace devicerace::detail::cpu {
namespace {

// W floats in a vector: 16 (zmm) or 8 (ymm), with the same lanes as int32, uint32 and uint16.
// Spelled out for each W: GCC drops vector_size on a type that depends on a template parameter.
using V16 = float __attribute__((vector_size(64)));
using V8 = float __attribute__((vector_size(32)));
template <int W>
struct Vec;
template <>
struct Vec<16> {
    using T = V16;
    using U = float __attribute__((vector_size(64), aligned(4), may_alias)); // any alignment
    using I32 = std::int32_t __attribute__((vector_size(64)));
    using U32 = std::uint32_t __attribute__((vector_size(64)));
    using U16 = std::uint16_t __attribute__((vector_size(32)));
};
template <>
struct Vec<8> {
    using T = V8;
    using U = float __attribute__((vector_size(32), aligned(4), may_alias));
    using I32 = std::int32_t __attribute__((vector_size(32)));
    using U32 = std::uint32_t __attribute__((vector_size(32)));
    using U16 = std::uint16_t __attribute__((vector_size(16)));
};
template <int W>
using VecT = typename Vec<W>::T;

template <int W>
DR_INLINE VecT<W> loadV(const float* p) {
    return *reinterpret_cast<const typename Vec<W>::U*>(p);
}
template <int W>
DR_INLINE void storeV(float* p, VecT<W> v) {
    *reinterpret_cast<typename Vec<W>::U*>(p) = v;
}

template <int W>
DR_INLINE VecT<W> splat(float x) {
    return VecT<W>{} + x;
}
template <int W, std::size_t... J>
DR_INLINE VecT<W> iotaOf(std::index_sequence<J...>) {
    return VecT<W>{static_cast<float>(J)...};
}
template <int W, int S, std::size_t... J>
DR_INLINE VecT<W> rotate(VecT<W> v, std::index_sequence<J...>) {
    return __builtin_shufflevector(v, v, static_cast<int>((J + S) % W)...);
}
// Every lane: the max (or sum) of all of v's lanes.
template <int W, int S = W / 2>
DR_INLINE VecT<W> allMax(VecT<W> v) {
    const VecT<W> r = rotate<W, S>(v, std::make_index_sequence<W>{});
    v = r > v ? r : v;
    if constexpr (S > 1) {
        return allMax<W, S / 2>(v);
    } else {
        return v;
    }
}
template <int W, int S = W / 2>
DR_INLINE VecT<W> allSum(VecT<W> v) {
    v += rotate<W, S>(v, std::make_index_sequence<W>{});
    if constexpr (S > 1) {
        return allSum<W, S / 2>(v);
    } else {
        return v;
    }
}

// kernel_inline.h's expBody (Cephes' expf), lane by lane.
template <int W>
DR_INLINE VecT<W> expV(VecT<W> x) {
    x = x < -87.0f ? splat<W>(-87.0f) : x;
    x = x > 88.0f ? splat<W>(88.0f) : x;
    const VecT<W> t = x * 1.44269504088896341f;
    const VecT<W> n = (t + 12582912.0f) - 12582912.0f;
    const VecT<W> y = expOfReduced(x, n);
    const auto bits = (__builtin_convertvector(n, typename Vec<W>::I32) + 127) << 23;
    return y * __builtin_bit_cast(VecT<W>, bits);
}

// bf16 of each lane (round to nearest even, NaN kept a NaN: kernel_inline.h's store) into W
// consecutive Bf16 values.
template <int W>
DR_INLINE void storeV(Bf16* p, VecT<W> v) {
    using U32 = typename Vec<W>::U32;
    const U32 u = __builtin_bit_cast(U32, v);
    U32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    rounded = v != v ? U32{} + 0x7FC0u : rounded;
    const auto half = __builtin_convertvector(rounded, typename Vec<W>::U16);
    std::memcpy(p, &half, sizeof half);
}

// The same rounding kept in fp32 storage (kernel_inline.h's store(Bf16InF32&)).
template <int W>
DR_INLINE void storeV(Bf16InF32* p, VecT<W> v) {
    using U32 = typename Vec<W>::U32;
    const U32 u = __builtin_bit_cast(U32, v);
    U32 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    rounded = v != v ? U32{} + 0x7FC00000u : rounded;
    storeV<W>(reinterpret_cast<float*>(p), __builtin_bit_cast(VecT<W>, rounded));
}

} // namespace
} // namespace devicerace::detail::cpu
