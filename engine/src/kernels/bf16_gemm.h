#pragma once
// DeviceRace's own bf16 GEMM for CPUs with AVX-512 BF16 (`vdpbf16ps`): bf16 inputs, fp32 sums
// written straight into the caller's rows, so no rounding of the result, no widening pass and no
// library call's fixed cost. One of the routes a fused step's bf16 GEMM may take
// (kernels/bf16_routes.h), taken only at the shapes where it is timed fastest. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this CPU runs the kernel (AVX-512 F, BW, VL and BF16).
bool haveAvx512Bf16Gemm();

/// Row-major c[m x n] = a' b', a' = a [m x k] or a^T (a stored [k x m]), b' = b [k x n] or b^T
/// (b stored [n x k]), leading dimensions as stored. Threads: the lane's intra-op ones, each over
/// a range of c's 8-row tiles or of its 32-column panels; one inside a parallel region. Only
/// where haveAvx512Bf16Gemm().
void gemmBf16Avx512(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                    std::int64_t lda, const Bf16* b, std::int64_t ldb, float* c, std::int64_t ldc);

} // namespace devicerace::detail::cpu
