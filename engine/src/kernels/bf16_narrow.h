#pragma once
// fp32 narrowed to bf16 by AVX-512 BF16's own conversion (`vcvtne2ps2bf16`: 32 values an
// instruction) where the CPU has it, in place of the integer rounding the cloned loops vectorise
// (kernel_inline.h's store: ~10 instructions for 8 values). Both round to nearest even; the
// instruction also reads denormal inputs as zero, as a lane's flushed arithmetic does. Used by the
// fused transformer step's loops that write a bf16 copy for a GEMM (gpt_kernels.cpp): on an AMX
// Xeon those copies were most of what its bf16 loops cost beyond fp32's. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// Whether this process narrows by the instruction (the CPU has AVX-512 BF16, and the build the
/// target attributes); DEVICERACE_BF16_NARROW=0 keeps the integer rounding (an A/B switch).
bool haveBf16NarrowInstruction();

/// dst[i] = bf16(src[i]), i < n. One thread.
void narrowToBf16(const float* src, Bf16* dst, std::int64_t n);

/// Columns [c0, c1) of x (rows × cols, row-major): out[c] = the column's sum over every row, and
/// copy = bf16(x) for those columns, in one pass. One thread. Only where
/// haveBf16NarrowInstruction().
void columnSumsNarrowing(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1,
                         float* out, Bf16* copy);

} // namespace devicerace::detail::cpu
