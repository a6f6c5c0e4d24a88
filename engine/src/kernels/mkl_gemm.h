#pragma once
// MKL's bf16 x bf16 -> fp32 GEMM (cblas_gemm_bf16bf16f32), reached through the symbol the
// LibTorch wheel's libtorch_cpu.so exports (its MKL is linked in statically). LibTorch's own
// bf16 matmul goes through oneDNN, which rounds its result to bf16 and costs ~20 us of fixed
// overhead a call; on an AMX Xeon this one runs the fused dense step's small GEMMs 1.2-4x
// faster and keeps the fp32 sums (docs/NOTES.md, stop 50). Looked up at run time, not linked:
// a LibTorch built without MKL (aarch64, a source build) simply lacks it. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this process has MKL's bf16 GEMM (found once, then cached).
bool haveMklBf16Gemm();

/// Whether a fused step should send its bf16 GEMMs here: the symbol is present and the CPU has
/// AMX, where it was measured faster than oneDNN's route (stop 50: 1.2-4x at fashion-mlp's
/// shapes). DEVICERACE_MKL_BF16=1 or 0 decides instead (tests, benchmarks). Reads /proc/cpuinfo: call it
/// once per step's construction.
bool mklBf16Preferred();

/// Row-major c[m x n] = a' b' + beta * c, a' = a or a^T ([m x k] as stored, or [k x m]), the
/// same for b' ([k x n] or [n x k]); leading dimensions as stored. Threads: MKL's, set by the
/// lane's intra-op count; one inside a parallel region. Only when haveMklBf16Gemm().
void gemmBf16F32(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, const Bf16* a,
                 std::int64_t lda, const Bf16* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

} // namespace devicerace::detail::cpu
