#pragma once
// ReLU, 2x2 max pooling (stride 2, floor) and dropout in one pass each way, for the CPU's
// convolution stacks (fashion-cnn, cifar-vgg): relu then pool is pool then relu, so a pass reads
// the convolution's output once and writes the quarter-size result, and backward writes each
// input gradient once. Same values as relu_, max_pool2d and the lanes' hashed dropout in
// sequence (the first maximum of a window in row order wins, as in ATen). Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// An NCHW tensor's shape, stored contiguous (NCHW) or channels_last (NHWC), and the layout of
/// the pooled output: an NHWC input's may be NCHW (flattened next: the flatten is then free).
struct PoolShape {
    std::int64_t images, channels, height, width;
    bool nhwc;
    bool outNhwc; // only with nhwc
};

/// The slot a window's gradient goes to: 0-3 (row-major in the window), or kNoGradient where the
/// output is 0 (every input <= 0) or dropped.
inline constexpr std::uint8_t kNoGradient = 0xFF;

/// out = dropout(maxpool2(relu(x))), images x channels x height/2 x width/2 (layout: outNhwc); the
/// dropout mask is NCHW-indexed over the output (as laneDropout's) and kept values are scaled by
/// `scale` (1/(1-p) in the tensor's precision); p = 0: no dropout. `slot`: one byte per output.
void reluMaxPool2(const float* x, float* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                  std::uint64_t seed);
void reluMaxPool2(const Bf16* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                  std::uint64_t seed);

/// The bf16 output of an fp32 `x` read as its values rounded to bf16 (as x.to(bf16) before the
/// bf16 pass): a bf16 lane's convolution computed in fp32 hands its output here unrounded, and
/// its gradient comes back in fp32 (bf16 values), one cast pass fewer each way. `scale` in bf16.
void reluMaxPool2Rounding(const float* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                          std::uint64_t seed);

/// dx (x's shape and layout, every element written) from dy (laid out as the output).
void reluMaxPool2Backward(const float* dy, const std::uint8_t* slot, float* dx, const PoolShape& s, float scale);
void reluMaxPool2Backward(const Bf16* dy, const std::uint8_t* slot, Bf16* dx, const PoolShape& s, float scale);
/// reluMaxPool2Rounding's: a bf16 dy, the fp32 x's gradient (dy x scale rounded to bf16, as the bf16 pass).
void reluMaxPool2RoundingBackward(const Bf16* dy, const std::uint8_t* slot, float* dx, const PoolShape& s, float scale);

} // namespace devicerace::detail::cpu
