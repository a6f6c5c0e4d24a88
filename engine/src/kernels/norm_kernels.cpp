// Batch norm + residual add + ReLU in NHWC, forward and backward (see norm_kernels.h). Built like
// cpu_kernels.cpp: per-ISA clones of always-inline bodies; every loop runs along a pixel's
// channels, so it vectorises, and the rows are split over the lane's threads.
#include "kernels/norm_kernels.h"
#include "kernels/bf16_gemm.h"
#include "kernels/kernel_inline.h"
#include "kernels/norm_bf16_avx512.h"

#include <ATen/Parallel.h>

#include <vector>

namespace devicerace::detail::cpu {

namespace {

// --- bodies -----------------------------------------------------------------------------------

// Shifted sums of one block of rows: s1 += x - shift, s2 += (x - shift)^2. Shifting by a value
// near the mean keeps E[v^2] - E[v]^2 from cancelling when the mean is large against the spread.
template <class T>
DR_INLINE void momentsBody(const T* __restrict x, std::int64_t rows, std::int64_t channels,
                           const float* __restrict shift, float* __restrict s1, float* __restrict s2) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* __restrict row = x + r * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
            const float v = load(row[c]) - shift[c];
            s1[c] += v;
            s2[c] += v * v;
        }
    }
}

// (x - mean) first, as ATen does: a constant channel (variance 0, a = gamma / sqrt(eps)) then
// gives exactly b, where x * a + (b - mean * a) would leave the rounding of two large products.
template <class T, bool Residual>
DR_INLINE void applyBody(const T* __restrict x, const T* __restrict res, T* __restrict y, std::int64_t rows,
                         std::int64_t channels, const float* __restrict m, const float* __restrict a,
                         const float* __restrict b) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t o = r * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
            float v = (load(x[o + c]) - m[c]) * a[c] + b[c];
            if constexpr (Residual) {
                v += load(res[o + c]);
            }
            store(y[o + c], v > 0.0f ? v : 0.0f);
        }
    }
}

template <class T>
DR_INLINE void gradSumsBody(const T* __restrict dy, const T* __restrict y, const T* __restrict x, std::int64_t rows,
                            std::int64_t channels, const float* __restrict mean, float* __restrict sg,
                            float* __restrict sgx) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t o = r * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
            const float d = load(dy[o + c]); // read before the test: a conditional bf16 load stays scalar
            const float g = load(y[o + c]) > 0.0f ? d : 0.0f;
            sg[c] += g;
            sgx[c] += g * (load(x[o + c]) - mean[c]);
        }
    }
}

template <class T, bool Residual>
DR_INLINE void gradBody(const T* __restrict dy, const T* __restrict y, const T* __restrict x, T* __restrict dx,
                        T* __restrict dres, std::int64_t rows, std::int64_t channels, const float* __restrict a,
                        const float* __restrict c0, const float* __restrict c1, const float* __restrict mean) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t o = r * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
            const float d = load(dy[o + c]); // read before the test: a conditional bf16 load stays scalar
            const float g = load(y[o + c]) > 0.0f ? d : 0.0f;
            store(dx[o + c], a[c] * g + c0[c] + c1[c] * (load(x[o + c]) - mean[c]));
            if constexpr (Residual) {
                store(dres[o + c], g);
            }
        }
    }
}

// --- per-ISA leaves ---------------------------------------------------------------------------

DR_CLONES void momentsF(const float* x, std::int64_t r, std::int64_t c, const float* k, float* s1, float* s2) {
    momentsBody(x, r, c, k, s1, s2);
}
DR_CLONES void momentsB(const Bf16* x, std::int64_t r, std::int64_t c, const float* k, float* s1, float* s2) {
    momentsBody(x, r, c, k, s1, s2);
}
DR_CLONES void applyF(const float* x, const float* res, float* y, std::int64_t r, std::int64_t c, const float* m,
                      const float* a, const float* b) {
    res ? applyBody<float, true>(x, res, y, r, c, m, a, b) : applyBody<float, false>(x, res, y, r, c, m, a, b);
}
DR_CLONES void applyB(const Bf16* x, const Bf16* res, Bf16* y, std::int64_t r, std::int64_t c, const float* m,
                      const float* a, const float* b) {
    res ? applyBody<Bf16, true>(x, res, y, r, c, m, a, b) : applyBody<Bf16, false>(x, res, y, r, c, m, a, b);
}
DR_CLONES void gradSumsF(const float* dy, const float* y, const float* x, std::int64_t r, std::int64_t c,
                         const float* m, float* sg, float* sgx) {
    gradSumsBody(dy, y, x, r, c, m, sg, sgx);
}
DR_CLONES void gradSumsB(const Bf16* dy, const Bf16* y, const Bf16* x, std::int64_t r, std::int64_t c, const float* m,
                         float* sg, float* sgx) {
    gradSumsBody(dy, y, x, r, c, m, sg, sgx);
}
DR_CLONES void gradF(const float* dy, const float* y, const float* x, float* dx, float* dres, std::int64_t r,
                     std::int64_t c, const float* a, const float* c0, const float* c1, const float* m) {
    dres ? gradBody<float, true>(dy, y, x, dx, dres, r, c, a, c0, c1, m)
         : gradBody<float, false>(dy, y, x, dx, dres, r, c, a, c0, c1, m);
}
DR_CLONES void gradB(const Bf16* dy, const Bf16* y, const Bf16* x, Bf16* dx, Bf16* dres, std::int64_t r, std::int64_t c,
                     const float* a, const float* c0, const float* c1, const float* m) {
    dres ? gradBody<Bf16, true>(dy, y, x, dx, dres, r, c, a, c0, c1, m)
         : gradBody<Bf16, false>(dy, y, x, dx, dres, r, c, a, c0, c1, m);
}

DR_CLONES void sumB(const Bf16* a, const Bf16* b, Bf16* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        store(out[i], load(a[i]) + load(b[i]));
    }
}

// --- the row split ----------------------------------------------------------------------------

// Rows per reduction block: float sums over at most a few hundred rows (rounding ~1e-6), the
// blocks' sums added in double; at most ~1,024 blocks, so that last sum stays small.
std::int64_t blockRows(NormShape s) { return std::max<std::int64_t>(64, (s.rows + 1023) / 1024); }

// Rows per task of a parallel loop: at least kGrain elements.
std::int64_t rowGrain(NormShape s) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, s.channels)); }

// Two per-channel sums over the rows: block(begin row, rows, sums1, sums2) adds a block's rows
// into float sums; the blocks' sums are added in double, in block order (so the result does not
// depend on the thread count).
template <class Block>
void reduceRows(NormShape s, double* out1, double* out2, Block&& block) {
    const std::int64_t per = blockRows(s), c = s.channels;
    const std::int64_t blocks = (s.rows + per - 1) / per;
    std::vector<float> partial(static_cast<std::size_t>(blocks * 2 * c), 0.0f);
    const std::int64_t grain = std::max<std::int64_t>(1, rowGrain(s) / per);
    at::parallel_for(0, blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t b = b0; b < b1; ++b) {
            const std::int64_t begin = b * per;
            float* sums = partial.data() + b * 2 * c;
            block(begin, std::min(per, s.rows - begin), sums, sums + c);
        }
    });
    std::fill(out1, out1 + c, 0.0);
    std::fill(out2, out2 + c, 0.0);
    for (std::int64_t b = 0; b < blocks; ++b) {
        const float* sums = partial.data() + b * 2 * c;
        for (std::int64_t i = 0; i < c; ++i) {
            out1[i] += sums[i];
            out2[i] += sums[c + i];
        }
    }
}

template <class T>
void moments(const T* x, NormShape s, double* mean, double* var,
             void (*leaf)(const T*, std::int64_t, std::int64_t, const float*, float*, float*)) {
    const std::int64_t c = s.channels;
    std::vector<float> shift(static_cast<std::size_t>(c), 0.0f);
    if (s.rows > 0) {
        for (std::int64_t i = 0; i < c; ++i) {
            shift[i] = load(x[i]); // the first pixel's value: near the mean for the cancellation to stay small
        }
    }
    reduceRows(s, mean, var, [&](std::int64_t begin, std::int64_t rows, float* s1, float* s2) {
        leaf(x + begin * c, rows, c, shift.data(), s1, s2);
    });
    const double n = static_cast<double>(std::max<std::int64_t>(1, s.rows));
    for (std::int64_t i = 0; i < c; ++i) {
        const double m = mean[i] / n;
        var[i] = std::max(0.0, var[i] / n - m * m);
        mean[i] = shift[i] + m;
    }
}

// Rows per call of an elementwise leaf: ~4 KB of each tensor. The AVX-512 BF16 leaves go over
// their rows once per 16 channels; on a thread's whole share (MBs) each of those passes came from
// beyond L2, on 4 KB the later ones read L1 (the backward leaf, 2 threads, caches cold: 1.62x at
// 32 channels, 1.45x at 64, 1.33x at 256; the fp32 leaves go row by row and lose nothing).
template <class T>
std::int64_t leafRows(NormShape s) {
    return std::max<std::int64_t>(1, 4096 / (std::max<std::int64_t>(1, s.channels) * std::int64_t(sizeof(T))));
}

// Calls f(first row, rows) for [r0, r1) in pieces of leafRows.
template <class T, class F>
void eachLeafRows(NormShape s, std::int64_t r0, std::int64_t r1, const F& f) {
    const std::int64_t per = leafRows<T>(s);
    for (std::int64_t r = r0; r < r1; r += per) {
        f(r, std::min(per, r1 - r));
    }
}

// The row-split passes, for either storage type; `leaf` is its per-ISA clone.
template <class T, class Leaf>
void normalizeReluRows(const T* x, const T* residual, T* y, NormShape s, const float* mean, const float* a,
                       const float* b, Leaf leaf) {
    const std::int64_t c = s.channels;
    at::parallel_for(0, s.rows, rowGrain(s), [&](std::int64_t r0, std::int64_t r1) {
        eachLeafRows<T>(s, r0, r1, [&](std::int64_t r, std::int64_t rows) {
            leaf(x + r * c, residual ? residual + r * c : nullptr, y + r * c, rows, c, mean, a, b);
        });
    });
}

template <class T, class Leaf>
void gradSumsRows(const T* dy, const T* y, const T* x, NormShape s, const float* mean, double* sumG, double* sumGx,
                  Leaf leaf) {
    const std::int64_t c = s.channels;
    reduceRows(s, sumG, sumGx, [&](std::int64_t begin, std::int64_t rows, float* sg, float* sgx) {
        leaf(dy + begin * c, y + begin * c, x + begin * c, rows, c, mean, sg, sgx);
    });
}

template <class T, class Leaf>
void gradRows(const T* dy, const T* y, const T* x, T* dx, T* dres, NormShape s, NormGradCoefficients k, Leaf leaf) {
    const std::int64_t c = s.channels;
    at::parallel_for(0, s.rows, rowGrain(s), [&](std::int64_t r0, std::int64_t r1) {
        eachLeafRows<T>(s, r0, r1, [&](std::int64_t r, std::int64_t rows) {
            const std::int64_t o = r * c;
            leaf(dy + o, y + o, x + o, dx + o, dres ? dres + o : nullptr, rows, c, k.a, k.c0, k.c1, k.mean);
        });
    });
}

// The bf16 leaves: AVX-512 BF16's where the CPU has it and the channels fill its vectors.
bool bf16Vectors(NormShape s) { return s.channels % 16 == 0 && haveAvx512Bf16Gemm(); }

} // namespace

void channelMoments(const float* x, NormShape s, double* mean, double* var) { moments(x, s, mean, var, momentsF); }
void channelMoments(const Bf16* x, NormShape s, double* mean, double* var) {
    moments(x, s, mean, var, bf16Vectors(s) ? avx512bf16::moments : momentsB);
}

void normalizeRelu(const float* x, const float* residual, float* y, NormShape s, const float* mean, const float* a,
                   const float* b) {
    normalizeReluRows(x, residual, y, s, mean, a, b, applyF);
}
void normalizeRelu(const Bf16* x, const Bf16* residual, Bf16* y, NormShape s, const float* mean, const float* a,
                   const float* b) {
    normalizeReluRows(x, residual, y, s, mean, a, b, bf16Vectors(s) ? avx512bf16::apply : applyB);
}

void reluNormGradSums(const float* dy, const float* y, const float* x, NormShape s, const float* mean, double* sumG,
                      double* sumGx) {
    gradSumsRows(dy, y, x, s, mean, sumG, sumGx, gradSumsF);
}
void reluNormGradSums(const Bf16* dy, const Bf16* y, const Bf16* x, NormShape s, const float* mean, double* sumG,
                      double* sumGx) {
    gradSumsRows(dy, y, x, s, mean, sumG, sumGx, bf16Vectors(s) ? avx512bf16::gradSums : gradSumsB);
}

void reluNormGrad(const float* dy, const float* y, const float* x, float* dx, float* dres, NormShape s,
                  NormGradCoefficients k) {
    gradRows(dy, y, x, dx, dres, s, k, gradF);
}
void reluNormGrad(const Bf16* dy, const Bf16* y, const Bf16* x, Bf16* dx, Bf16* dres, NormShape s,
                  NormGradCoefficients k) {
    gradRows(dy, y, x, dx, dres, s, k, bf16Vectors(s) ? avx512bf16::grad : gradB);
}

void sumGradients(const Bf16* a, const Bf16* b, Bf16* out, std::int64_t n) {
    const auto leaf = haveAvx512Bf16Gemm() ? avx512bf16::sum : sumB;
    at::parallel_for(0, n, kGrain, [&](std::int64_t i0, std::int64_t i1) { leaf(a + i0, b + i0, out + i0, i1 - i0); });
}

void sumShortcutGradients(const Bf16* a, const Bf16* b, Bf16* out, ShortcutShape s) {
    const auto leaf = haveAvx512Bf16Gemm() ? avx512bf16::sum : sumB;
    const std::int64_t bh = (s.h + s.stride - 1) / s.stride, bw = (s.w + s.stride - 1) / s.stride;
    // One image row a task: its pixels' rows copied, the shortcut's every stride-th row added.
    at::parallel_for(0, s.images * s.h, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, s.w * s.c)),
                     [&](std::int64_t r0, std::int64_t r1) {
                         for (std::int64_t r = r0; r < r1; ++r) {
                             const std::int64_t image = r / s.h, y = r % s.h;
                             const Bf16* ar = a + r * s.w * s.c;
                             Bf16* outr = out + r * s.w * s.c;
                             if (y % s.stride != 0) {
                                 std::copy(ar, ar + s.w * s.c, outr);
                                 continue;
                             }
                             const Bf16* br = b + ((image * bh + y / s.stride) * bw) * s.bChannels + s.offset;
                             for (std::int64_t x = 0; x < s.w; ++x) {
                                 if (x % s.stride == 0) {
                                     leaf(ar + x * s.c, br + (x / s.stride) * s.bChannels, outr + x * s.c, s.c);
                                 } else {
                                     std::copy(ar + x * s.c, ar + (x + 1) * s.c, outr + x * s.c);
                                 }
                             }
                         }
                     });
}

} // namespace devicerace::detail::cpu
