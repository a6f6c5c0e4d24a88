#pragma once
// One-pass CPU loops for the fused training step (train/fused/dense_step.h) and the fused RMSprop:
// each replaces several ATen ops (and as many OpenMP regions and temporaries) with one pass
// over the data. Built for several x86 ISAs (target_clones) and picked at load time, so the
// binary assumes no vector ISA. Storage is float or bf16 (`Bf16`, bit-compatible with
// c10::BFloat16); arithmetic is float. Torch-free header.
#include <cstdint>

namespace devicerace::detail::cpu {

/// bf16 bits (the upper half of a float).
struct Bf16 {
    std::uint16_t bits;
};

/// A bf16 value held in fp32 storage: a float whose lower 16 bits are zero, as widening a Bf16
/// gives. What a bf16 lane's loops write where every GEMM that reads the values runs in fp32 on
/// them: the same values without a bf16 copy to widen again (train/fused/gpt_step.h).
struct Bf16InF32 {
    float v;
};

/// The dropout keep mask of element `index` under `seed`: a counter-based hash, so a mask
/// needs no state and no generator call per element. Keeps with probability 1 - p. Every CPU
/// dropout of the engine uses it (models' laneDropout and the fused step), one seed per layer
/// and step drawn from the lane's generator, so fused and unfused lanes drop the same units.
bool dropoutKeeps(std::uint64_t seed, std::uint64_t index, float p);

/// mask[i] = dropoutKeeps(seed, i, p) ? 1/(1-p) : 0 for i < n; parallel.
void dropoutMask(float* mask, std::int64_t n, float p, std::uint64_t seed);
void dropoutMask(Bf16* mask, std::int64_t n, float p, std::uint64_t seed);
/// The same mask of `images` x `channels` x `spatial` values (NCHW indices) stored in NHWC order
/// (channels innermost), for channels_last activations: a layout never changes which units drop.
void dropoutMaskNhwc(float* mask, std::int64_t images, std::int64_t channels, std::int64_t spatial, float p,
                     std::uint64_t seed);
void dropoutMaskNhwc(Bf16* mask, std::int64_t images, std::int64_t channels, std::int64_t spatial, float p,
                     std::uint64_t seed);

/// In place on rows×cols (row-major): x = dropout(relu?(x + bias)), dropout scaling the kept
/// values by 1/(1-p); p = 0: no dropout. Element indices for the mask are (firstRow + row) *
/// cols + col: `x` may be rows [firstRow, firstRow + rows) of a larger batch. One thread.
void biasReluDropout(float* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed, std::int64_t firstRow = 0);
void biasReluDropout(Bf16* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed, std::int64_t firstRow = 0);
/// The same from fp32 GEMM sums `in` (rows of leading dimension `ld`) to bf16 `out` (rows×cols).
void biasReluDropout(const float* in, std::int64_t ld, Bf16* out, const float* bias, std::int64_t rows,
                     std::int64_t cols, bool relu, float p, std::uint64_t seed, std::int64_t firstRow = 0);
void biasReluDropout(const float* in, std::int64_t ld, Bf16InF32* out, const float* bias, std::int64_t rows,
                     std::int64_t cols, bool relu, float p, std::uint64_t seed, std::int64_t firstRow = 0);

/// Backward of biasReluDropout with relu, in place on the gradient `d` (rows×cols):
/// d = h > 0 ? d * scale : 0 (h: the layer's output, scale = 1/(1-p)); dbias = column sums of
/// the result (overwritten). One thread.
void reluDropoutBackward(float* d, const float* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias);
void reluDropoutBackward(Bf16* d, const Bf16* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias);
/// The same from fp32 GEMM sums `dIn` (rows of leading dimension `ld`) to the bf16 gradient `d`.
void reluDropoutBackward(const float* dIn, std::int64_t ld, Bf16* d, const Bf16* h, std::int64_t rows,
                         std::int64_t cols, float scale, float* dbias);
void reluDropoutBackward(const float* dIn, std::int64_t ld, Bf16InF32* d, const Bf16InF32* h, std::int64_t rows,
                         std::int64_t cols, float scale, float* dbias);

struct CrossEntropy {
    double lossSum = 0;       // sum over rows of -log softmax(logits)[label]
    std::int64_t correct = 0; // rows whose argmax is the label
    bool badLabel = false;    // a label outside [0, classes): nothing computed for that row
};

/// Softmax cross-entropy of rows×classes logits with labels, and its gradient for the mean
/// loss over `meanOver` rows (the whole batch; 0: `rows`): dlogits = (softmax - onehot) /
/// meanOver; dbias = column sums of dlogits (overwritten). One thread.
CrossEntropy softmaxCrossEntropy(const float* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, float* dlogits, float* dbias, std::int64_t meanOver = 0);
CrossEntropy softmaxCrossEntropy(const Bf16* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, Bf16* dlogits, float* dbias, std::int64_t meanOver = 0);
CrossEntropy softmaxCrossEntropy(const Bf16InF32* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, Bf16InF32* dlogits, float* dbias, std::int64_t meanOver = 0);

/// One RMSprop step (torch.optim.RMSprop without centring or momentum) over n floats:
/// g += wd * p; sq = alpha * sq + (1 - alpha) * g²; p -= lr * g / (sqrt(sq) + eps). When
/// `mirror` is set, also writes bf16(p) there. Parallel over the lane's intra-op threads.
void rmspropStep(float* p, const float* g, float* sq, std::int64_t n, float lr, float alpha, float eps, float wd,
                 Bf16* mirror);

/// One AdamW step's settings: bias corrections 1 - beta^step; `gradScale` multiplies every
/// gradient first (the clipping coefficient; 1 when not clipping).
struct AdamW {
    float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weightDecay = 0;
    float biasCorrection1 = 1, biasCorrection2 = 1, gradScale = 1;
};
/// torch.optim.AdamW's update (as its fused CPU kernel computes it, without amsgrad) over n
/// floats: p *= 1 - lr·wd; m += (1-β1)(g - m); v = β2 v + (1-β2) g²; p -= lr / bc1 · m /
/// (sqrt(v) / sqrt(bc2) + eps). When `mirror` is set, also writes bf16(p) there. Parallel.
void adamwStep(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamW& settings, Bf16* mirror);

/// Gives the calling thread's floating-point control word (MXCSR on x86: the lane's denormal
/// flushing) to every thread of its OpenMP team of `threads` (ATen's, MKL's and oneDNN's
/// parallel regions on this thread run there): the word is per thread.
void shareFpControlWithTeam(int threads);

/// What a parallel region of this thread looks like (tests): `threads` one-element tasks after
/// setting the thread's intra-op count to `threads`; how many distinct threads ran them, and
/// whether every one of them flushes denormals (MXCSR FTZ and DAZ; false off x86). It lives
/// here, not in the test, on purpose: it must open its region from a TU built as the kernels
/// are (-fopenmp), which is the thing it checks — a test file's own region would prove nothing.
struct TeamCheck {
    int threads = 0;
    bool allFlushDenormals = false;
};
TeamCheck checkTeam(int threads);

/// dst = bf16(src) (round to nearest even), and the way back; parallel.
void toBf16(const float* src, Bf16* dst, std::int64_t n);
void toFloat(const Bf16* src, float* dst, std::int64_t n);
/// dst = relu(bf16(src)) (ATen's relu: v <= 0 gives 0, a NaN stays), and its gradient from the
/// relu's bf16 output y and gradient dy, widened: dx = y <= 0 ? 0 : dy; parallel. A bf16 lane's
/// convolution computed in fp32 to the next layer's bf16 input, and back, one pass each.
void reluToBf16(const float* src, Bf16* dst, std::int64_t n);
void reluGradToFloat(const Bf16* dy, const Bf16* y, float* dx, std::int64_t n);
/// dst = src rounded to bf16 (nearest even), kept in fp32 storage: widen(toBf16(src)); parallel.
void roundToBf16(const float* src, Bf16InF32* dst, std::int64_t n);
/// The same in place: x becomes its bf16 values (no second buffer to allocate and write); parallel.
void roundToBf16InPlace(float* x, std::int64_t n);
/// x = bf16(x + bias) in place, kept in fp32 storage (rows×cols, one bias per column): a GEMM's
/// sums to a layer's bf16 output in one pass; parallel over rows.
void addBiasRoundingToBf16(float* x, const float* bias, std::int64_t rows, std::int64_t cols);

/// dst = src * scale + shift, from bytes (image pixels) to floats; parallel.
void bytesToFloat(const std::uint8_t* src, float* dst, std::int64_t n, float scale, float shift);
void bytesToBf16(const std::uint8_t* src, Bf16* dst, std::int64_t n, float scale, float shift);
void bytesToBf16(const std::uint8_t* src, Bf16InF32* dst, std::int64_t n, float scale, float shift);

} // namespace devicerace::detail::cpu
