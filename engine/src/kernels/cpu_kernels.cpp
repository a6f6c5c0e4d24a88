// One-pass CPU loops (see cpu_kernels.h). Each exported loop is a thin wrapper, built once per
// ISA by target_clones, around an always-inline body, so the compiler vectorises the body for
// AVX-512, AVX2 and the baseline, and the dynamic loader picks the clone this CPU runs. Built
// with -fno-math-errno and -fno-trapping-math (engine/CMakeLists.txt) so that sqrt and selects
// vectorise.
#include "kernels/cpu_kernels.h"
#include "kernels/bf16_narrow.h"
#include "kernels/kernel_inline.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#ifdef __SSE__
#include <xmmintrin.h>
#endif

namespace devicerace::detail::cpu {

namespace {

// One element of biasReluDropout: relu?(v + bias), dropped or scaled by its mask bit.
template <bool Relu, bool Drop>
DR_INLINE float activate(float v, float bias, float scale, std::uint32_t threshold, std::uint64_t seed,
                         std::uint32_t index) {
    v += bias;
    if constexpr (Relu) {
        v = v > 0.0f ? v : 0.0f;
    }
    if constexpr (Drop) {
        const bool keep = maskBits(seed, index) >= threshold;
        const float scaled = v * scale;
        v = keep ? scaled : 0.0f;
    }
    return v;
}

template <class T, bool Relu, bool Drop>
DR_INLINE void biasReluDropoutRows(T* __restrict x, const float* __restrict bias, std::int64_t rows, std::int64_t cols,
                                   float scale, std::uint32_t threshold, std::uint64_t seed, std::int64_t firstRow) {
    for (std::int64_t r = 0; r < rows; ++r) {
        T* row = x + r * cols;
        const auto base = static_cast<std::uint32_t>((firstRow + r) * cols);
        for (std::int64_t c = 0; c < cols; ++c) {
            store(row[c], activate<Relu, Drop>(load(row[c]), bias[c], scale, threshold, seed,
                                               base + static_cast<std::uint32_t>(c)));
        }
    }
}

// Out of place: fp32 GEMM sums (leading dimension `ld`) to bf16 activations (rows x cols, dense;
// O: Bf16 or Bf16InF32).
template <bool Relu, bool Drop, class O>
DR_INLINE void biasReluDropoutRowsTo(const float* __restrict in, std::int64_t ld, O* __restrict out,
                                     const float* __restrict bias, std::int64_t rows, std::int64_t cols, float scale,
                                     std::uint32_t threshold, std::uint64_t seed, std::int64_t firstRow) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* src = in + r * ld;
        O* row = out + r * cols;
        const auto base = static_cast<std::uint32_t>((firstRow + r) * cols);
        for (std::int64_t c = 0; c < cols; ++c) {
            store(row[c],
                  activate<Relu, Drop>(src[c], bias[c], scale, threshold, seed, base + static_cast<std::uint32_t>(c)));
        }
    }
}

// Calls rows.template operator()<Relu, Drop>(scale, threshold) for the flags' combination.
template <class Rows>
DR_INLINE void withActivation(bool relu, float p, const Rows& rows) {
    const bool drop = p > 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
    const std::uint32_t threshold = keepThreshold(p);
    if (relu && drop) {
        rows.template operator()<true, true>(scale, threshold);
    } else if (relu) {
        rows.template operator()<true, false>(scale, threshold);
    } else if (drop) {
        rows.template operator()<false, true>(scale, threshold);
    } else {
        rows.template operator()<false, false>(scale, threshold);
    }
}

template <class T>
DR_INLINE void biasReluDropoutBody(T* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                                   std::uint64_t seed, std::int64_t firstRow) {
    withActivation(relu, p, [&]<bool Relu, bool Drop>(float scale, std::uint32_t threshold) {
        biasReluDropoutRows<T, Relu, Drop>(x, bias, rows, cols, scale, threshold, seed, firstRow);
    });
}

template <class O>
DR_INLINE void biasReluDropoutToBody(const float* in, std::int64_t ld, O* out, const float* bias, std::int64_t rows,
                                     std::int64_t cols, bool relu, float p, std::uint64_t seed, std::int64_t firstRow) {
    withActivation(relu, p, [&]<bool Relu, bool Drop>(float scale, std::uint32_t threshold) {
        biasReluDropoutRowsTo<Relu, Drop>(in, ld, out, bias, rows, cols, scale, threshold, seed, firstRow);
    });
}

// Loads and arithmetic before the select: work inside a branch keeps the loop scalar.
// `dIn` (leading dimension `ld`) may be `d` itself (ld = cols), read before it is written.
template <class S, class T>
DR_INLINE void reluDropoutBackwardBody(const S* dIn, std::int64_t ld, T* d, const T* __restrict h, std::int64_t rows,
                                       std::int64_t cols, float scale, float* __restrict dbias) {
    std::fill(dbias, dbias + cols, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        const S* src = dIn + r * ld;
        T* drow = d + r * cols;
        const T* hrow = h + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
            const float hv = load(hrow[c]);
            const float dv = load(src[c]);
            const float scaled = dv * scale;
            const float v = hv > 0.0f ? scaled : 0.0f;
            store(drow[c], v);
            dbias[c] += v;
        }
    }
}

template <class T>
CrossEntropy crossEntropyBody(const T* logits, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                              T* dlogits, float* dbias, std::int64_t meanOver) {
    CrossEntropy out;
    std::fill(dbias, dbias + classes, 0.0f);
    const float inv = 1.0f / static_cast<float>(meanOver > 0 ? meanOver : rows);
    for (std::int64_t r = 0; r < rows; ++r) {
        const T* z = logits + r * classes;
        T* dz = dlogits + r * classes;
        const std::int64_t label = labels[r];
        if (label < 0 || label >= classes) {
            out.badLabel = true;
            std::fill(dz, dz + classes, T{});
            continue;
        }
        float best = load(z[0]);
        std::int64_t arg = 0;
        for (std::int64_t c = 1; c < classes; ++c) {
            if (load(z[c]) > best) {
                best = load(z[c]);
                arg = c;
            }
        }
        double sum = 0;
        for (std::int64_t c = 0; c < classes; ++c) {
            sum += std::exp(static_cast<double>(load(z[c]) - best));
        }
        const double logSum = std::log(sum);
        out.lossSum += logSum - static_cast<double>(load(z[label]) - best);
        out.correct += arg == label ? 1 : 0;
        for (std::int64_t c = 0; c < classes; ++c) {
            const double softmax = std::exp(static_cast<double>(load(z[c]) - best) - logSum);
            const float g = static_cast<float>(softmax - (c == label ? 1.0 : 0.0)) * inv;
            store(dz[c], g);
            dbias[c] += g;
        }
    }
    return out;
}

DR_INLINE void rmspropBody(float* __restrict p, const float* __restrict g, float* __restrict sq, std::int64_t n,
                           float lr, float alpha, float eps, float wd, Bf16* __restrict mirror) {
    const float beta = 1.0f - alpha;
    for (std::int64_t i = 0; i < n; ++i) {
        const float grad = g[i] + wd * p[i];
        const float s = alpha * sq[i] + beta * grad * grad;
        sq[i] = s;
        const float v = p[i] - lr * grad / (std::sqrt(s) + eps);
        p[i] = v;
        if (mirror) {
            store(mirror[i], v);
        }
    }
}

template <class From, class To>
DR_INLINE void convertBody(const From* __restrict src, To* __restrict dst, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        store(dst[i], load(src[i]));
    }
}

template <class To>
DR_INLINE void bytesBody(const std::uint8_t* __restrict src, To* __restrict dst, std::int64_t n, float scale,
                         float shift) {
    for (std::int64_t i = 0; i < n; ++i) {
        store(dst[i], static_cast<float>(src[i]) * scale + shift);
    }
}

template <class T>
DR_INLINE void maskBody(T* __restrict mask, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed) {
    const std::uint32_t threshold = keepThreshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (std::int64_t i = 0; i < n; ++i) {
        store(mask[i], maskBits(seed, static_cast<std::uint32_t>(begin + i)) >= threshold ? scale : 0.0f);
    }
}

// Rows [begin, end) of an NHWC mask (one row per image position, `channels` values each): the
// value at (n, position, c) is the mask of NCHW index (n * channels + c) * spatial + position.
template <class T>
DR_INLINE void maskNhwcBody(T* __restrict mask, std::int64_t begin, std::int64_t end, std::int64_t channels,
                            std::int64_t spatial, float p, std::uint64_t seed) {
    const std::uint32_t threshold = keepThreshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t image = r / spatial;
        const auto base = static_cast<std::uint32_t>(image * channels * spatial + r % spatial);
        const auto step = static_cast<std::uint32_t>(spatial);
        T* row = mask + r * channels;
        for (std::int64_t c = 0; c < channels; ++c) {
            store(row[c], maskBits(seed, base + static_cast<std::uint32_t>(c) * step) >= threshold ? scale : 0.0f);
        }
    }
}

// The cloned leaves (one per ISA).
DR_CLONES void maskRangeF(float* m, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed) {
    maskBody(m, begin, n, p, seed);
}
DR_CLONES void maskRangeB(Bf16* m, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed) {
    maskBody(m, begin, n, p, seed);
}
DR_CLONES void maskNhwcF(float* m, std::int64_t b, std::int64_t e, std::int64_t c, std::int64_t s, float p,
                         std::uint64_t seed) {
    maskNhwcBody(m, b, e, c, s, p, seed);
}
DR_CLONES void maskNhwcB(Bf16* m, std::int64_t b, std::int64_t e, std::int64_t c, std::int64_t s, float p,
                         std::uint64_t seed) {
    maskNhwcBody(m, b, e, c, s, p, seed);
}
DR_CLONES void biasReluDropoutF(float* x, const float* b, std::int64_t r, std::int64_t c, bool relu, float p,
                                std::uint64_t s, std::int64_t first) {
    biasReluDropoutBody(x, b, r, c, relu, p, s, first);
}
DR_CLONES void biasReluDropoutB(Bf16* x, const float* b, std::int64_t r, std::int64_t c, bool relu, float p,
                                std::uint64_t s, std::int64_t first) {
    biasReluDropoutBody(x, b, r, c, relu, p, s, first);
}
DR_CLONES void biasReluDropoutW(Bf16InF32* x, const float* b, std::int64_t r, std::int64_t c, bool relu, float p,
                                std::uint64_t s, std::int64_t first) {
    biasReluDropoutBody(x, b, r, c, relu, p, s, first);
}
DR_CLONES void biasReluDropoutFB(const float* in, std::int64_t ld, Bf16* out, const float* b, std::int64_t r,
                                 std::int64_t c, bool relu, float p, std::uint64_t s, std::int64_t first) {
    biasReluDropoutToBody(in, ld, out, b, r, c, relu, p, s, first);
}
DR_CLONES void biasReluDropoutFW(const float* in, std::int64_t ld, Bf16InF32* out, const float* b, std::int64_t r,
                                 std::int64_t c, bool relu, float p, std::uint64_t s, std::int64_t first) {
    biasReluDropoutToBody(in, ld, out, b, r, c, relu, p, s, first);
}
DR_CLONES void reluBackwardF(float* d, const float* h, std::int64_t r, std::int64_t c, float scale, float* db) {
    reluDropoutBackwardBody(d, c, d, h, r, c, scale, db);
}
DR_CLONES void reluBackwardB(Bf16* d, const Bf16* h, std::int64_t r, std::int64_t c, float scale, float* db) {
    reluDropoutBackwardBody(d, c, d, h, r, c, scale, db);
}
DR_CLONES void reluBackwardFB(const float* dIn, std::int64_t ld, Bf16* d, const Bf16* h, std::int64_t r, std::int64_t c,
                              float scale, float* db) {
    reluDropoutBackwardBody(dIn, ld, d, h, r, c, scale, db);
}
DR_CLONES void reluBackwardFW(const float* dIn, std::int64_t ld, Bf16InF32* d, const Bf16InF32* h, std::int64_t r,
                              std::int64_t c, float scale, float* db) {
    reluDropoutBackwardBody(dIn, ld, d, h, r, c, scale, db);
}
// torch's fused AdamW kernel's arithmetic (ATen FusedAdamKernel.cpp, not amsgrad), float.
DR_INLINE void adamwBody(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                         std::int64_t n, const AdamW& a, Bf16* __restrict mirror) {
    const float decay = 1.0f - a.lr * a.weightDecay;
    const float stepSize = a.lr / a.biasCorrection1;
    const float bc2Sqrt = std::sqrt(a.biasCorrection2);
    for (std::int64_t i = 0; i < n; ++i) {
        const float grad = g[i] * a.gradScale;
        const float mi = m[i] + (1.0f - a.beta1) * (grad - m[i]);
        const float vi = v[i] * a.beta2 + (1.0f - a.beta2) * grad * grad;
        m[i] = mi;
        v[i] = vi;
        const float value = p[i] * decay - stepSize * mi / (std::sqrt(vi) / bc2Sqrt + a.eps);
        p[i] = value;
        if (mirror) {
            store(mirror[i], value);
        }
    }
}
DR_CLONES void adamwRange(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamW& a, Bf16* mirror) {
    adamwBody(p, g, m, v, n, a, mirror);
}

DR_CLONES void rmspropRange(float* p, const float* g, float* sq, std::int64_t n, float lr, float alpha, float eps,
                            float wd, Bf16* mirror) {
    rmspropBody(p, g, sq, n, lr, alpha, eps, wd, mirror);
}
DR_CLONES void toBf16Range(const float* s, Bf16* d, std::int64_t n) { convertBody(s, d, n); }
DR_CLONES void toFloatRange(const Bf16* s, float* d, std::int64_t n) { convertBody(s, d, n); }
DR_CLONES void roundRange(const float* s, Bf16InF32* d, std::int64_t n) { convertBody(s, d, n); }
DR_CLONES void reluToBf16Range(const float* __restrict s, Bf16* __restrict d, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        Bf16 r;
        store(r, s[i]);
        const float v = load(r);
        store(d[i], v <= 0.0f ? 0.0f : v);
    }
}
DR_CLONES void reluGradToFloatRange(const Bf16* __restrict dy, const Bf16* __restrict y, float* __restrict dx,
                                    std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float g = load(dy[i]); // read before the test: GCC does not speculate a 16-bit load
        dx[i] = load(y[i]) <= 0.0f ? 0.0f : g;
    }
}
DR_CLONES void roundInPlaceRange(float* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        Bf16InF32 r;
        store(r, x[i]);
        x[i] = r.v;
    }
}
DR_CLONES void bytesToFloatRange(const std::uint8_t* s, float* d, std::int64_t n, float a, float b) {
    bytesBody(s, d, n, a, b);
}
DR_CLONES void bytesToBf16Range(const std::uint8_t* s, Bf16* d, std::int64_t n, float a, float b) {
    bytesBody(s, d, n, a, b);
}
DR_CLONES void bytesToBf16InF32Range(const std::uint8_t* s, Bf16InF32* d, std::int64_t n, float a, float b) {
    bytesBody(s, d, n, a, b);
}

} // namespace

bool dropoutKeeps(std::uint64_t seed, std::uint64_t index, float p) {
    return maskBits(seed, static_cast<std::uint32_t>(index)) >= keepThreshold(p);
}

void dropoutMask(float* mask, std::int64_t n, float p, std::uint64_t seed) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { maskRangeF(mask + b, b, e - b, p, seed); });
}
void dropoutMask(Bf16* mask, std::int64_t n, float p, std::uint64_t seed) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { maskRangeB(mask + b, b, e - b, p, seed); });
}
void dropoutMaskNhwc(float* mask, std::int64_t images, std::int64_t channels, std::int64_t spatial, float p,
                     std::uint64_t seed) {
    at::parallel_for(0, images * spatial, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, channels)),
                     [&](std::int64_t b, std::int64_t e) { maskNhwcF(mask, b, e, channels, spatial, p, seed); });
}
void dropoutMaskNhwc(Bf16* mask, std::int64_t images, std::int64_t channels, std::int64_t spatial, float p,
                     std::uint64_t seed) {
    at::parallel_for(0, images * spatial, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, channels)),
                     [&](std::int64_t b, std::int64_t e) { maskNhwcB(mask, b, e, channels, spatial, p, seed); });
}

void biasReluDropout(float* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed, std::int64_t firstRow) {
    biasReluDropoutF(x, bias, rows, cols, relu, p, seed, firstRow);
}
void biasReluDropout(Bf16* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed, std::int64_t firstRow) {
    biasReluDropoutB(x, bias, rows, cols, relu, p, seed, firstRow);
}

void biasReluDropout(const float* in, std::int64_t ld, Bf16* out, const float* bias, std::int64_t rows,
                     std::int64_t cols, bool relu, float p, std::uint64_t seed, std::int64_t firstRow) {
    biasReluDropoutFB(in, ld, out, bias, rows, cols, relu, p, seed, firstRow);
}
void biasReluDropout(const float* in, std::int64_t ld, Bf16InF32* out, const float* bias, std::int64_t rows,
                     std::int64_t cols, bool relu, float p, std::uint64_t seed, std::int64_t firstRow) {
    biasReluDropoutFW(in, ld, out, bias, rows, cols, relu, p, seed, firstRow);
}

void reluDropoutBackward(float* d, const float* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias) {
    reluBackwardF(d, h, rows, cols, scale, dbias);
}
void reluDropoutBackward(Bf16* d, const Bf16* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias) {
    reluBackwardB(d, h, rows, cols, scale, dbias);
}
void reluDropoutBackward(const float* dIn, std::int64_t ld, Bf16* d, const Bf16* h, std::int64_t rows,
                         std::int64_t cols, float scale, float* dbias) {
    reluBackwardFB(dIn, ld, d, h, rows, cols, scale, dbias);
}
void reluDropoutBackward(const float* dIn, std::int64_t ld, Bf16InF32* d, const Bf16InF32* h, std::int64_t rows,
                         std::int64_t cols, float scale, float* dbias) {
    reluBackwardFW(dIn, ld, d, h, rows, cols, scale, dbias);
}

CrossEntropy softmaxCrossEntropy(const float* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, float* dlogits, float* dbias, std::int64_t meanOver) {
    return crossEntropyBody(logits, labels, rows, classes, dlogits, dbias, meanOver);
}
CrossEntropy softmaxCrossEntropy(const Bf16* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, Bf16* dlogits, float* dbias, std::int64_t meanOver) {
    return crossEntropyBody(logits, labels, rows, classes, dlogits, dbias, meanOver);
}
CrossEntropy softmaxCrossEntropy(const Bf16InF32* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, Bf16InF32* dlogits, float* dbias, std::int64_t meanOver) {
    return crossEntropyBody(logits, labels, rows, classes, dlogits, dbias, meanOver);
}

namespace {

// Weights RMSprop updates before AVX-512 BF16's conversion writes their bf16 mirror: the chunk's
// weights are read back from L1 (4 KB).
constexpr std::int64_t kMirrorChunk = 1024;

} // namespace

// The mirror is written by the loop's integer rounding, or, where the CPU has AVX-512 BF16's
// conversion, chunk by chunk after the update (RMSprop + mirror 1.06x / 1.05x on 1 / 2 threads of
// an AMX Xeon: bench/optimizer_ab.py).
void rmspropStep(float* p, const float* g, float* sq, std::int64_t n, float lr, float alpha, float eps, float wd,
                 Bf16* mirror) {
    const bool narrow = mirror && haveBf16NarrowInstruction();
    at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
        if (!narrow) {
            rmspropRange(p + begin, g + begin, sq + begin, end - begin, lr, alpha, eps, wd,
                         mirror ? mirror + begin : nullptr);
            return;
        }
        for (auto c = begin; c < end; c += kMirrorChunk) {
            const auto count = std::min(kMirrorChunk, end - c);
            rmspropRange(p + c, g + c, sq + c, count, lr, alpha, eps, wd, nullptr);
            narrowToBf16(p + c, mirror + c, count);
        }
    });
}

// AdamW keeps the mirror in its own loop: its arithmetic hides the integer rounding, and the
// chunked conversion measured slower (0.98x with the mirror, 1 and 2 threads: optimizer_ab.py).
void adamwStep(float* p, const float* g, float* m, float* v, std::int64_t n, const AdamW& a, Bf16* mirror) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
        adamwRange(p + begin, g + begin, m + begin, v + begin, end - begin, a, mirror ? mirror + begin : nullptr);
    });
}

void shareFpControlWithTeam(int threads) {
#ifdef __SSE__
    const unsigned control = _mm_getcsr();
    // One task per thread: a region of `threads` threads, each setting its own word.
    at::parallel_for(0, threads, 1, [&](std::int64_t, std::int64_t) { _mm_setcsr(control); });
#else
    (void)threads;
#endif
}

TeamCheck checkTeam(int threads) {
    at::set_num_threads(threads);
    std::vector<int> ranOn(static_cast<std::size_t>(threads), -1);
    std::vector<unsigned> control(static_cast<std::size_t>(threads), 0);
    at::parallel_for(0, threads, 1, [&](std::int64_t b, std::int64_t e) {
        for (auto i = static_cast<std::size_t>(b); i < static_cast<std::size_t>(e); ++i) {
            ranOn[i] = at::get_thread_num();
#ifdef __SSE__
            control[i] = _mm_getcsr();
#endif
        }
    });
    TeamCheck out;
    std::sort(ranOn.begin(), ranOn.end());
    out.threads = static_cast<int>(std::unique(ranOn.begin(), ranOn.end()) - ranOn.begin());
    constexpr unsigned kFlushAndDaz = 0x8040;
    out.allFlushDenormals =
        std::all_of(control.begin(), control.end(), [](unsigned c) { return (c & kFlushAndDaz) == kFlushAndDaz; });
    return out;
}

void toBf16(const float* src, Bf16* dst, std::int64_t n) {
    const bool narrow = haveBf16NarrowInstruction(); // AVX-512 BF16's conversion (bf16_narrow.h)
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) {
        if (narrow) {
            narrowToBf16(src + b, dst + b, e - b);
        } else {
            toBf16Range(src + b, dst + b, e - b);
        }
    });
}
void reluToBf16(const float* src, Bf16* dst, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { reluToBf16Range(src + b, dst + b, e - b); });
}
void reluGradToFloat(const Bf16* dy, const Bf16* y, float* dx, std::int64_t n) {
    at::parallel_for(0, n, kGrain,
                     [&](std::int64_t b, std::int64_t e) { reluGradToFloatRange(dy + b, y + b, dx + b, e - b); });
}
void roundToBf16(const float* src, Bf16InF32* dst, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { roundRange(src + b, dst + b, e - b); });
}
void roundToBf16InPlace(float* x, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { roundInPlaceRange(x + b, e - b); });
}
void addBiasRoundingToBf16(float* x, const float* bias, std::int64_t rows, std::int64_t cols) {
    at::parallel_for(0, rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols)),
                     [&](std::int64_t b, std::int64_t e) {
                         // biasReluDropout's in-place rows, no relu or dropout, stored as bf16 values
                         biasReluDropoutW(reinterpret_cast<Bf16InF32*>(x) + b * cols, bias, e - b, cols, false, 0.0f, 0,
                                          b);
                     });
}
void toFloat(const Bf16* src, float* dst, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { toFloatRange(src + b, dst + b, e - b); });
}
void bytesToFloat(const std::uint8_t* src, float* dst, std::int64_t n, float scale, float shift) {
    at::parallel_for(0, n, kGrain,
                     [&](std::int64_t b, std::int64_t e) { bytesToFloatRange(src + b, dst + b, e - b, scale, shift); });
}
void bytesToBf16(const std::uint8_t* src, Bf16* dst, std::int64_t n, float scale, float shift) {
    at::parallel_for(0, n, kGrain,
                     [&](std::int64_t b, std::int64_t e) { bytesToBf16Range(src + b, dst + b, e - b, scale, shift); });
}
void bytesToBf16(const std::uint8_t* src, Bf16InF32* dst, std::int64_t n, float scale, float shift) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) {
        bytesToBf16InF32Range(src + b, dst + b, e - b, scale, shift);
    });
}

} // namespace devicerace::detail::cpu
