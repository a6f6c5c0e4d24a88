// The AVX-512 BF16 leaves of the batch norm passes (see norm_bf16_avx512.h).
#include "kernels/norm_bf16_avx512.h"

#include "kernels/avx512_bf16_target.h"

namespace devicerace::detail::cpu::avx512bf16 {

#ifdef DR_BF16_GEMM

namespace {

DR_AVX512_BF16 inline __m512 load16(const Bf16* p) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

DR_AVX512_BF16 inline __m512 load16(const Bf16* p, __mmask16 m) { // the values past m read as zero
    const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

DR_AVX512_BF16 inline void store16(Bf16* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

// g = (y > 0 ? dy : 0)
DR_AVX512_BF16 inline __m512 reluGrad(const Bf16* dy, const Bf16* y) {
    const __mmask16 on = _mm512_cmp_ps_mask(load16(y), _mm512_setzero_ps(), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(on, load16(dy));
}

} // namespace

DR_AVX512_BF16 void moments(const Bf16* x, std::int64_t rows, std::int64_t channels, const float* shift, float* s1,
                            float* s2) {
    for (std::int64_t c = 0; c < channels; c += 16) {
        const __m512 k = _mm512_loadu_ps(shift + c);
        __m512 a1 = _mm512_loadu_ps(s1 + c), a2 = _mm512_loadu_ps(s2 + c);
        for (std::int64_t r = 0; r < rows; ++r) {
            const __m512 v = _mm512_sub_ps(load16(x + r * channels + c), k);
            a1 = _mm512_add_ps(a1, v);
            a2 = _mm512_fmadd_ps(v, v, a2);
        }
        _mm512_storeu_ps(s1 + c, a1);
        _mm512_storeu_ps(s2 + c, a2);
    }
}

DR_AVX512_BF16 void apply(const Bf16* x, const Bf16* res, Bf16* y, std::int64_t rows, std::int64_t channels,
                          const float* m, const float* a, const float* b) {
    for (std::int64_t c = 0; c < channels; c += 16) {
        const __m512 mc = _mm512_loadu_ps(m + c), ac = _mm512_loadu_ps(a + c), bc = _mm512_loadu_ps(b + c);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t o = r * channels + c;
            __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(load16(x + o), mc), ac, bc);
            if (res) {
                v = _mm512_add_ps(v, load16(res + o));
            }
            store16(y + o, _mm512_max_ps(v, _mm512_setzero_ps()));
        }
    }
}

DR_AVX512_BF16 void gradSums(const Bf16* dy, const Bf16* y, const Bf16* x, std::int64_t rows, std::int64_t channels,
                             const float* mean, float* sg, float* sgx) {
    for (std::int64_t c = 0; c < channels; c += 16) {
        const __m512 mc = _mm512_loadu_ps(mean + c);
        __m512 a1 = _mm512_loadu_ps(sg + c), a2 = _mm512_loadu_ps(sgx + c);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t o = r * channels + c;
            const __m512 g = reluGrad(dy + o, y + o);
            a1 = _mm512_add_ps(a1, g);
            a2 = _mm512_fmadd_ps(g, _mm512_sub_ps(load16(x + o), mc), a2);
        }
        _mm512_storeu_ps(sg + c, a1);
        _mm512_storeu_ps(sgx + c, a2);
    }
}

DR_AVX512_BF16 void grad(const Bf16* dy, const Bf16* y, const Bf16* x, Bf16* dx, Bf16* dres, std::int64_t rows,
                         std::int64_t channels, const float* a, const float* c0, const float* c1, const float* mean) {
    for (std::int64_t c = 0; c < channels; c += 16) {
        const __m512 ac = _mm512_loadu_ps(a + c), k0 = _mm512_loadu_ps(c0 + c), k1 = _mm512_loadu_ps(c1 + c);
        const __m512 mc = _mm512_loadu_ps(mean + c);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t o = r * channels + c;
            const __m512 g = reluGrad(dy + o, y + o);
            store16(dx + o, _mm512_fmadd_ps(k1, _mm512_sub_ps(load16(x + o), mc), _mm512_fmadd_ps(ac, g, k0)));
            if (dres) {
                store16(dres + o, g);
            }
        }
    }
}

DR_AVX512_BF16 void sum(const Bf16* a, const Bf16* b, Bf16* out, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        store16(out + i, _mm512_add_ps(load16(a + i), load16(b + i)));
    }
    if (i < n) { // the tail, masked
        const auto m = static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_add_ps(load16(a + i, m), load16(b + i, m)));
        _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<__m256i>(v));
    }
}

#else

void moments(const Bf16*, std::int64_t, std::int64_t, const float*, float*, float*) {}
void apply(const Bf16*, const Bf16*, Bf16*, std::int64_t, std::int64_t, const float*, const float*, const float*) {}
void gradSums(const Bf16*, const Bf16*, const Bf16*, std::int64_t, std::int64_t, const float*, float*, float*) {}
void grad(const Bf16*, const Bf16*, const Bf16*, Bf16*, Bf16*, std::int64_t, std::int64_t, const float*, const float*,
          const float*, const float*) {}
void sum(const Bf16*, const Bf16*, Bf16*, std::int64_t) {}

#endif

} // namespace devicerace::detail::cpu::avx512bf16
