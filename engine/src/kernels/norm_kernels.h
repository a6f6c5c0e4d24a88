#pragma once
// Training-mode batch norm, an optional residual add and ReLU as one pass forward and two passes
// back, for the CPU's residual networks in channels_last (NHWC: every pixel's channels
// contiguous). ATen runs them as four to five ops each way (statistics, normalise, add, relu;
// relu's backward, then batch norm's two passes), each reading and writing whole activations.
// Float or bf16 activations, float statistics and parameters, float arithmetic. Torch-free header.
#include <cstdint>

#include "kernels/cpu_kernels.h"

namespace devicerace::detail::cpu {

/// An NHWC activation seen as `rows` pixels (images x height x width) of `channels` values.
struct NormShape {
    std::int64_t rows, channels;
};

/// Each channel's mean and biased variance over the rows (shifted sums in float over blocks of
/// rows, the blocks summed in double). Parallel over the lane's intra-op threads.
void channelMoments(const float* x, NormShape s, double* mean, double* var);
void channelMoments(const Bf16* x, NormShape s, double* mean, double* var);

/// y = max(0, (x - mean[c]) * a[c] + b[c] (+ residual)), every element written; `residual` may
/// be null.
void normalizeRelu(const float* x, const float* residual, float* y, NormShape s, const float* mean, const float* a,
                   const float* b);
void normalizeRelu(const Bf16* x, const Bf16* residual, Bf16* y, NormShape s, const float* mean, const float* a,
                   const float* b);

/// With g = (y > 0 ? dy : 0): per channel, sumG = sum(g) and sumGx = sum(g * (x - mean)).
void reluNormGradSums(const float* dy, const float* y, const float* x, NormShape s, const float* mean, double* sumG,
                      double* sumGx);
void reluNormGradSums(const Bf16* dy, const Bf16* y, const Bf16* x, NormShape s, const float* mean, double* sumG,
                      double* sumGx);

/// dx = a[c] * g + c0[c] + c1[c] * (x - mean[c]), and dres = g where `dres` is not null.
struct NormGradCoefficients {
    const float *a, *c0, *c1, *mean;
};
void reluNormGrad(const float* dy, const float* y, const float* x, float* dx, float* dres, NormShape s,
                  NormGradCoefficients k);
void reluNormGrad(const Bf16* dy, const Bf16* y, const Bf16* x, Bf16* dx, Bf16* dres, NormShape s,
                  NormGradCoefficients k);

/// out = a + b over n values (a residual block input's two gradients: its convolution's and its
/// shortcut's), each sum rounded once. Parallel over the lane's intra-op threads.
void sumGradients(const Bf16* a, const Bf16* b, Bf16* out, std::int64_t n);
/// The same for an option-A shortcut (every `stride`-th pixel, channels zero-padded): a and out
/// [images x h x w x c] (NHWC), b the shortcut's gradient [images x ceil(h / stride) x ceil(w /
/// stride) x bChannels] whose channels [offset, offset + c) are x's: out = a, plus b's part at the
/// pixels the shortcut took.
struct ShortcutShape {
    std::int64_t images, h, w, c, stride, bChannels, offset;
};
void sumShortcutGradients(const Bf16* a, const Bf16* b, Bf16* out, ShortcutShape s);

} // namespace devicerace::detail::cpu
