#pragma once
// A bf16 convolution's weight gradient on the AVX-512 BF16 GEMM's tiles (kernels/bf16_tile.h),
// the im2col columns packed straight from x into the tiles' panels or, for stride-1 "same"
// layers, read in place from a pair-interleaved copy of x (no column buffer either way), fp32 sums
// written as the gradient (no bf16 rounding of it, no widening pass). What a bf16 lane's
// convolution node takes where timing found it faster than oneDNN's backward-weights kernel
// (kernels/conv_wgrad_node.cpp). Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// A 2-D convolution without groups or dilation, zero padding: x [n, h, w, c] -> y [n, oh, ow, oc],
/// a kh x kw kernel.
struct ConvGeometry {
    std::int64_t n, c, h, w, oc, kh, kw, ph, pw, sh, sw;
    std::int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
    std::int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
};

/// dw [oc x kh*kw*c] (fp32; the weight in channels_last order [oc][kh][kw][c]) = the sum over the
/// output pixels of dy's row (oc values) times x's patch under the kernel (kh*kw*c values, zero
/// in the padding); x [n, h, w, c] and dy [n, oh, ow, oc] bf16, channels_last contiguous.
/// Threads: the lane's intra-op ones, each over a range of the pixels into sums of its own, added
/// at the end (one inside a parallel region). Only where haveAvx512Bf16Gemm().
void convWeightGradBf16(const ConvGeometry& g, const Bf16* x, const Bf16* dy, float* dw);

} // namespace devicerace::detail::cpu
