#pragma once
// MKL's bf16 x bf16 -> fp32 GEMM (cblas_gemm_bf16bf16f32), one of the routes a fused step's bf16
// GEMM may take (kernels/bf16_routes.h), and MKL's thread-local thread count: reached through the
// symbols the LibTorch wheel's libtorch_cpu.so exports (its MKL is linked in statically). Looked
// up at run time, not linked: a LibTorch built without MKL (aarch64, a source build) simply lacks
// them. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this process has MKL's bf16 GEMM (found once, then cached).
bool haveMklBf16Gemm();

/// Row-major c[m x n] = a' b' + beta * c, a' = a or a^T ([m x k] as stored, or [k x m]), the
/// same for b' ([k x n] or [n x k]); leading dimensions as stored. Threads: MKL's, set by the
/// lane's intra-op count (a region's worker holds a SerialMkl). Only when haveMklBf16Gemm().
void gemmBf16F32(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

/// While it lives, MKL runs the calling thread's GEMMs on that thread alone (its thread-local
/// count, MKL_Set_Num_Threads_Local, set to 1; the thread's previous setting back after). For
/// each worker of a parallel region that calls a GEMM: this process's OpenMP allows nested
/// regions, and MKL called inside one partitions a product for the lane's thread count, splitting
/// the sums of a product of few rows (on an Emerald Rapids Xeon: up to 56 rows of 784 columns), so
/// a row's bits would follow how many rows its worker has. Nothing where MKL is not in this process.
class SerialMkl {
public:
    SerialMkl();
    ~SerialMkl();
    SerialMkl(const SerialMkl&) = delete;
    SerialMkl& operator=(const SerialMkl&) = delete;

private:
    int m_previous = 0;
    bool m_set = false;
};

} // namespace devicerace::detail::cpu
