#pragma once
// DeviceRace's own bf16 GEMM on AMX (Intel Xeon from Sapphire Rapids on): bf16 inputs, fp32 sums
// written into the caller's rows. AMX multiplies tiles of 16 rows x 32 bf16 by 16 pairs x 16
// columns into 16 x 16 fp32 sums, an instruction each; MKL's bf16 GEMM uses the same units but
// runs at ~35-50% of their peak at a transformer step's small shapes (K = 128-512, one thread
// each). One of the routes a fused step's bf16 GEMM may take (kernels/bf16_routes.h), taken only
// at the shapes where it is timed fastest. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this process runs the kernel: the CPU has AMX-BF16 and AMX-TILE (CPUID), AVX-512 BF16
/// for the packing, and Linux grants the process AMX's tile data (arch_prctl
/// ARCH_REQ_XCOMP_PERM, asked once).
bool haveAmxBf16Gemm();

/// Row-major c[m x n] = a' b', a' = a [m x k] or a^T (a stored [k x m]), b' = b [k x n] or b^T
/// (b stored [n x k]), leading dimensions as stored. Threads: the lane's intra-op ones, each over
/// a range of c's 32-row blocks or of its 32-column panels; one inside a parallel region. Only
/// where haveAmxBf16Gemm().
void gemmBf16Amx(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float* c, std::int64_t ldc);

} // namespace devicerace::detail::cpu
