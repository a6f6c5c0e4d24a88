#pragma once
// DeviceRace's own bf16 GEMM for CPUs with AVX-512 BF16 (`vdpbf16ps`): bf16 inputs, fp32 sums
// written straight into the caller's rows, so no rounding of the result, no widening pass and no
// library call's fixed cost. One of the routes a fused step's bf16 GEMM may take
// (kernels/bf16_routes.h), taken only at the shapes where it is timed fastest. Torch-free header.
#include <cstdint>
#include <functional>

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

/// The engine's GEMM kernels' shared frame (this one and the AMX kernel's): whether there is no
/// product to run (m or n ≤ 0: nothing written; k ≤ 0: c's m x n zeros written).
bool gemmWithoutProduct(std::int64_t m, std::int64_t n, std::int64_t k, float* c, std::int64_t ldc);
/// c's `rowBlocks` x `panels` split over the lane's intra-op threads (one inside a parallel region)
/// by ranges of row blocks or of panels, whichever splits more evenly: part(r0, r1, q0, q1) for
/// each thread's range, in one parallel region.
void eachGemmPart(std::int64_t rowBlocks, std::int64_t panels,
                  const std::function<void(std::int64_t, std::int64_t, std::int64_t, std::int64_t)>& part);

} // namespace devicerace::detail::cpu
