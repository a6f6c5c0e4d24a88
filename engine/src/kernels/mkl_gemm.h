#pragma once
// MKL's bf16 x bf16 -> fp32 GEMM (cblas_gemm_bf16bf16f32), reached through the symbol the
// LibTorch wheel's libtorch_cpu.so exports (its MKL is linked in statically): bf16 inputs with
// fp32 sums, one of the routes a fused step's bf16 GEMM may take (kernels/bf16_routes.h).
// Looked up at run time, not linked: a LibTorch built without MKL (aarch64, a source build)
// simply lacks it. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this process has MKL's bf16 GEMM (found once, then cached).
bool haveMklBf16Gemm();

/// Row-major c[m x n] = a' b' + beta * c, a' = a or a^T ([m x k] as stored, or [k x m]), the
/// same for b' ([k x n] or [n x k]); leading dimensions as stored. Threads: MKL's, set by the
/// lane's intra-op count; one inside a parallel region. Only when haveMklBf16Gemm().
void gemmBf16F32(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

} // namespace devicerace::detail::cpu
