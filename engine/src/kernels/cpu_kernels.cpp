// One-pass CPU loops (see cpu_kernels.h). Each exported loop is a thin wrapper, built once per
// ISA by target_clones, around an always-inline body, so the compiler vectorises the body for
// AVX-512, AVX2 and the baseline, and the dynamic loader picks the clone this CPU runs. Built
// with -fno-math-errno and -fno-trapping-math (engine/CMakeLists.txt) so that sqrt and selects
// vectorise.
#include "kernels/cpu_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define DR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef DR_CLONES
#define DR_CLONES
#endif
#define DR_INLINE inline __attribute__((always_inline))

namespace devicerace::detail::cpu {

namespace {

// Elements per task of a parallel loop: small loops stay on the calling thread (waking the
// other threads costs more than a pass over a few hundred kB).
constexpr std::int64_t kGrain = 1 << 16;

DR_INLINE float load(const float& v) { return v; }
DR_INLINE float load(const Bf16& v) {
    const std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
DR_INLINE void store(float& dst, float v) { dst = v; }
// Round to nearest even, NaN kept a NaN.
DR_INLINE void store(Bf16& dst, float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    dst.bits = v != v ? std::uint16_t{0x7FC0} : static_cast<std::uint16_t>(rounded);
}

// Chris Wellons' lowbias32 finaliser, twice: indices that differ in one bit give unrelated bits.
DR_INLINE std::uint32_t mix32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
DR_INLINE std::uint32_t maskBits(std::uint64_t seed, std::uint32_t index) {
    return mix32(mix32(index ^ static_cast<std::uint32_t>(seed)) + static_cast<std::uint32_t>(seed >> 32));
}
DR_INLINE std::uint32_t keepThreshold(float p) {
    const double t = std::clamp(static_cast<double>(p), 0.0, 1.0) * 4294967296.0;
    return t >= 4294967295.0 ? std::numeric_limits<std::uint32_t>::max() : static_cast<std::uint32_t>(t);
}

template <class T, bool Relu, bool Drop>
DR_INLINE void biasReluDropoutRows(T* __restrict x, const float* __restrict bias, std::int64_t rows, std::int64_t cols,
                                   float scale, std::uint32_t threshold, std::uint64_t seed) {
    for (std::int64_t r = 0; r < rows; ++r) {
        T* row = x + r * cols;
        const auto base = static_cast<std::uint32_t>(r * cols);
        for (std::int64_t c = 0; c < cols; ++c) {
            float v = load(row[c]) + bias[c];
            if constexpr (Relu) {
                v = v > 0.0f ? v : 0.0f;
            }
            if constexpr (Drop) {
                const bool keep = maskBits(seed, base + static_cast<std::uint32_t>(c)) >= threshold;
                const float scaled = v * scale;
                v = keep ? scaled : 0.0f;
            }
            store(row[c], v);
        }
    }
}

template <class T>
DR_INLINE void biasReluDropoutBody(T* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                                   std::uint64_t seed) {
    const bool drop = p > 0;
    const float scale = drop ? 1.0f / (1.0f - p) : 1.0f;
    const std::uint32_t threshold = keepThreshold(p);
    if (relu && drop) {
        biasReluDropoutRows<T, true, true>(x, bias, rows, cols, scale, threshold, seed);
    } else if (relu) {
        biasReluDropoutRows<T, true, false>(x, bias, rows, cols, scale, threshold, seed);
    } else if (drop) {
        biasReluDropoutRows<T, false, true>(x, bias, rows, cols, scale, threshold, seed);
    } else {
        biasReluDropoutRows<T, false, false>(x, bias, rows, cols, scale, threshold, seed);
    }
}

// Loads and arithmetic before the select: work inside a branch keeps the loop scalar.
template <class T>
DR_INLINE void reluDropoutBackwardBody(T* __restrict d, const T* __restrict h, std::int64_t rows, std::int64_t cols,
                                       float scale, float* __restrict dbias) {
    std::fill(dbias, dbias + cols, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        T* drow = d + r * cols;
        const T* hrow = h + r * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
            const float hv = load(hrow[c]);
            const float dv = load(drow[c]);
            const float scaled = dv * scale;
            const float v = hv > 0.0f ? scaled : 0.0f;
            store(drow[c], v);
            dbias[c] += v;
        }
    }
}

template <class T>
CrossEntropy crossEntropyBody(const T* logits, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                              T* dlogits, float* dbias) {
    CrossEntropy out;
    std::fill(dbias, dbias + classes, 0.0f);
    const float inv = 1.0f / static_cast<float>(rows);
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

DR_INLINE void maskBody(float* __restrict mask, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed) {
    const std::uint32_t threshold = keepThreshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (std::int64_t i = 0; i < n; ++i) {
        mask[i] = maskBits(seed, static_cast<std::uint32_t>(begin + i)) >= threshold ? scale : 0.0f;
    }
}

// The cloned leaves (one per ISA).
DR_CLONES void maskRange(float* m, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed) {
    maskBody(m, begin, n, p, seed);
}
DR_CLONES void biasReluDropoutF(float* x, const float* b, std::int64_t r, std::int64_t c, bool relu, float p,
                                std::uint64_t s) {
    biasReluDropoutBody(x, b, r, c, relu, p, s);
}
DR_CLONES void biasReluDropoutB(Bf16* x, const float* b, std::int64_t r, std::int64_t c, bool relu, float p,
                                std::uint64_t s) {
    biasReluDropoutBody(x, b, r, c, relu, p, s);
}
DR_CLONES void reluBackwardF(float* d, const float* h, std::int64_t r, std::int64_t c, float scale, float* db) {
    reluDropoutBackwardBody(d, h, r, c, scale, db);
}
DR_CLONES void reluBackwardB(Bf16* d, const Bf16* h, std::int64_t r, std::int64_t c, float scale, float* db) {
    reluDropoutBackwardBody(d, h, r, c, scale, db);
}
DR_CLONES void rmspropRange(float* p, const float* g, float* sq, std::int64_t n, float lr, float alpha, float eps,
                            float wd, Bf16* mirror) {
    rmspropBody(p, g, sq, n, lr, alpha, eps, wd, mirror);
}
DR_CLONES void toBf16Range(const float* s, Bf16* d, std::int64_t n) { convertBody(s, d, n); }
DR_CLONES void toFloatRange(const Bf16* s, float* d, std::int64_t n) { convertBody(s, d, n); }
DR_CLONES void bytesToFloatRange(const std::uint8_t* s, float* d, std::int64_t n, float a, float b) {
    bytesBody(s, d, n, a, b);
}
DR_CLONES void bytesToBf16Range(const std::uint8_t* s, Bf16* d, std::int64_t n, float a, float b) {
    bytesBody(s, d, n, a, b);
}

} // namespace

bool dropoutKeeps(std::uint64_t seed, std::uint64_t index, float p) {
    return maskBits(seed, static_cast<std::uint32_t>(index)) >= keepThreshold(p);
}

void dropoutMask(float* mask, std::int64_t n, float p, std::uint64_t seed) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { maskRange(mask + b, b, e - b, p, seed); });
}

void biasReluDropout(float* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed) {
    biasReluDropoutF(x, bias, rows, cols, relu, p, seed);
}
void biasReluDropout(Bf16* x, const float* bias, std::int64_t rows, std::int64_t cols, bool relu, float p,
                     std::uint64_t seed) {
    biasReluDropoutB(x, bias, rows, cols, relu, p, seed);
}

void reluDropoutBackward(float* d, const float* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias) {
    reluBackwardF(d, h, rows, cols, scale, dbias);
}
void reluDropoutBackward(Bf16* d, const Bf16* h, std::int64_t rows, std::int64_t cols, float scale, float* dbias) {
    reluBackwardB(d, h, rows, cols, scale, dbias);
}

CrossEntropy softmaxCrossEntropy(const float* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, float* dlogits, float* dbias) {
    return crossEntropyBody(logits, labels, rows, classes, dlogits, dbias);
}
CrossEntropy softmaxCrossEntropy(const Bf16* logits, const std::int64_t* labels, std::int64_t rows,
                                 std::int64_t classes, Bf16* dlogits, float* dbias) {
    return crossEntropyBody(logits, labels, rows, classes, dlogits, dbias);
}

void rmspropStep(float* p, const float* g, float* sq, std::int64_t n, float lr, float alpha, float eps, float wd,
                 Bf16* mirror) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
        rmspropRange(p + begin, g + begin, sq + begin, end - begin, lr, alpha, eps, wd,
                     mirror ? mirror + begin : nullptr);
    });
}

void toBf16(const float* src, Bf16* dst, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { toBf16Range(src + b, dst + b, e - b); });
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

} // namespace devicerace::detail::cpu
