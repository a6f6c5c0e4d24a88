#pragma once
// The bf16 leaves of the batch norm + residual add + ReLU passes and of the residual gradients' sum
// (kernels/norm_kernels.h) for CPUs
// with AVX-512 BF16, 16 channels a vector: bf16 widened by a shift and rounded back by one
// `vcvtneps2bf16` (the compilers' clones of the portable leaves round with integer arithmetic on
// 256-bit vectors, ~60 instructions for 16 values). Same arithmetic order as the portable leaves;
// the rounding differs only for denormals (flushed here, as the lanes flush them anyway) and NaN
// payloads. Only where haveAvx512Bf16Gemm() and (but for the sum) the channels are a multiple of 16.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu::avx512bf16 {

void moments(const Bf16* x, std::int64_t rows, std::int64_t channels, const float* shift, float* s1, float* s2);
void apply(const Bf16* x, const Bf16* res, Bf16* y, std::int64_t rows, std::int64_t channels, const float* m,
           const float* a, const float* b);
void gradSums(const Bf16* dy, const Bf16* y, const Bf16* x, std::int64_t rows, std::int64_t channels, const float* mean,
              float* sg, float* sgx);
void grad(const Bf16* dy, const Bf16* y, const Bf16* x, Bf16* dx, Bf16* dres, std::int64_t rows, std::int64_t channels,
          const float* a, const float* c0, const float* c1, const float* mean);
void sum(const Bf16* a, const Bf16* b, Bf16* out, std::int64_t n);

} // namespace devicerace::detail::cpu::avx512bf16
