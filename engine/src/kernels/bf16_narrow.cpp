// fp32 narrowed to bf16 by AVX-512 BF16's conversion (see bf16_narrow.h). Only the functions with
// the AVX-512 BF16 target use its instructions; the others run anywhere.
#include "kernels/bf16_narrow.h"

#include <algorithm>
#include <string_view>

#include "devicerace/environment.h"
#include "kernels/bf16_gemm.h"
#include "kernels/avx512_bf16_target.h"
#include "kernels/kernel_inline.h"

namespace devicerace::detail::cpu {

namespace {

#ifdef DR_BF16_GEMM

DR_AVX512_BF16 void narrowAvx512(const float* src, Bf16* dst, std::int64_t n) {
    std::int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, reinterpret_cast<const __m512i&>(v));
    }
    for (; i < n; i += 16) {
        const auto left = std::min<std::int64_t>(16, n - i);
        const __mmask16 mask = static_cast<__mmask16>((1u << left) - 1u);
        const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, src + i));
        _mm256_mask_storeu_epi16(dst + i, mask, reinterpret_cast<const __m256i&>(v));
    }
}

// Up to 64 columns [c0, c1): four vectors of sums kept in registers over every row.
DR_AVX512_BF16 void columnSumsAvx512(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0,
                                     std::int64_t c1, float* out, Bf16* copy) {
    for (std::int64_t b0 = c0; b0 < c1; b0 += 64) {
        const auto width = std::min<std::int64_t>(64, c1 - b0);
        __mmask16 masks[4];
        __m512 sums[4];
        for (int q = 0; q < 4; ++q) {
            const auto left = std::clamp<std::int64_t>(width - 16 * q, 0, 16);
            masks[q] = static_cast<__mmask16>((1u << left) - 1u);
            sums[q] = _mm512_setzero_ps();
        }
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * cols + b0;
            Bf16* cr = copy + r * cols + b0;
            for (int q = 0; q < 4; ++q) {
                const __m512 v = _mm512_maskz_loadu_ps(masks[q], xr + 16 * q);
                sums[q] = _mm512_add_ps(sums[q], v);
                const __m256bh h = _mm512_cvtneps_pbh(v);
                _mm256_mask_storeu_epi16(cr + 16 * q, masks[q], reinterpret_cast<const __m256i&>(h));
            }
        }
        for (int q = 0; q < 4; ++q) {
            _mm512_mask_storeu_ps(out + b0 + 16 * q, masks[q], sums[q]);
        }
    }
}

#endif

void narrowGeneric(const float* src, Bf16* dst, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        store(dst[i], src[i]);
    }
}

} // namespace

bool haveBf16NarrowInstruction() {
#ifdef DR_BF16_GEMM
    static const bool have = [] {
        const char* off = environmentSwitch("DEVICERACE_BF16_NARROW");
        return haveAvx512Bf16Gemm() && !(off && std::string_view(off) == "0");
    }();
    return have;
#else
    return false;
#endif
}

void narrowToBf16(const float* src, Bf16* dst, std::int64_t n) {
#ifdef DR_BF16_GEMM
    if (haveBf16NarrowInstruction()) {
        narrowAvx512(src, dst, n);
        return;
    }
#endif
    narrowGeneric(src, dst, n);
}

void columnSumsNarrowing(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1,
                         float* out, Bf16* copy) {
#ifdef DR_BF16_GEMM
    if (haveBf16NarrowInstruction()) {
        columnSumsAvx512(x, rows, cols, c0, c1, out, copy);
    }
#else
    (void)x, (void)rows, (void)cols, (void)c0, (void)c1, (void)out, (void)copy;
#endif
}

} // namespace devicerace::detail::cpu
