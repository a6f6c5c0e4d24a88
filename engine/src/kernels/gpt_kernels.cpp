// The fused transformer step's loops (see gpt_kernels.h): each public function is a parallel
// loop over rows around a per-ISA clone (DR_CLONES) of an always-inline body, as in
// cpu_kernels.cpp, so the bodies vectorise for the CPU at hand.
#include "kernels/gpt_kernels.h"
#include "kernels/bf16_narrow.h"
#include "kernels/kernel_inline.h"
#include "kernels/vec_inline.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <type_traits>
#include <vector>

namespace devicerace::detail::cpu {

namespace {

constexpr float kLayerNormEps = 1e-5f; // torch.nn.LayerNorm's default

// Rows per task of a row loop over `cols` values a row: about kGrain values a task.
std::int64_t rowGrain(std::int64_t cols) { return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols)); }

template <class F>
void rowsParallel(std::int64_t rows, std::int64_t cols, const F& f) {
    at::parallel_for(0, rows, rowGrain(cols), f);
}

// ---- layer norm ----

// The rows' loops in explicit vectors of 8 floats (vec_inline.h): ymm in the avx512f and avx2
// clones, xmm pairs in the default one. Not 16: GCC keeps a V16 on the stack in an avx2 clone.
constexpr int kRowW = 8;
using VR = VecT<kRowW>;

// A row's loops written once for its whole vectors and its tail: a body templated on T is called
// with T = VR for columns c..c + kRowW - 1 and with T = float for each column past the last whole
// vector. lanes<T>(p, c) reads p at c as a T, put(o, c, v) writes v (a VR or a float, to float or
// bf16) at c.
template <class T>
DR_INLINE T lanes(const float* p, std::int64_t c) {
    if constexpr (std::is_same_v<T, float>) {
        return p[c];
    } else {
        return loadV<kRowW>(p + c);
    }
}
template <class O>
DR_INLINE void put(O* o, std::int64_t c, VR v) {
    storeV<kRowW>(o + c, v);
}
template <class O>
DR_INLINE void put(O* o, std::int64_t c, float v) {
    store(o[c], v);
}

// A row's sum: add(acc, c) adds the terms of columns c.. to acc (a VR, or a float for one tail
// column); two vector accumulators, then the tail added one by one to their sum. (By reference: a
// lambda returning a vector is a function of the default target, which GCC warns of, -Wpsabi.) In
// place of laneSum's 64 partial sums, folded: the layer norm's backward 1.13x.
template <class F>
DR_INLINE float rowSum(std::int64_t cols, const F& add) {
    VR a{}, b{};
    std::int64_t c = 0;
    for (; c + 2 * kRowW <= cols; c += 2 * kRowW) {
        add(a, c);
        add(b, c + kRowW);
    }
    if (c + kRowW <= cols) {
        add(a, c);
        c += kRowW;
    }
    float sum = allSum<kRowW>(a + b)[0];
    for (; c < cols; ++c) {
        add(sum, c);
    }
    return sum;
}
// f(std::type_identity<T>{}, c) over a row: T = VR for each whole vector, float for each tail column.
template <class F>
DR_INLINE void rowEach(std::int64_t cols, const F& f) {
    std::int64_t c = 0;
    for (; c + kRowW <= cols; c += kRowW) {
        f(std::type_identity<VR>{}, c);
    }
    for (; c < cols; ++c) {
        f(std::type_identity<float>{}, c);
    }
}

template <class T>
DR_INLINE void layerNormBody(const float* __restrict x, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                             const float* __restrict gamma, const float* __restrict beta, T* __restrict out,
                             float* __restrict mean, float* __restrict rstd) {
    const float inv = 1.0f / static_cast<float>(cols);
    for (std::int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * cols;
        const float m = rowSum(cols, [&]<class A>(A& acc, std::int64_t c) { acc += lanes<A>(xr, c); }) * inv;
        const float var = rowSum(cols, [&]<class A>(A& acc, std::int64_t c) {
            const A d = lanes<A>(xr, c) - m;
            acc += d * d;
        });
        const float s = 1.0f / std::sqrt(var * inv + kLayerNormEps);
        mean[r] = m;
        rstd[r] = s;
        T* o = out + r * cols;
        rowEach(cols, [&]<class A>(std::type_identity<A>, std::int64_t c) {
            put(o, c, (lanes<A>(xr, c) - m) * s * lanes<A>(gamma, c) + lanes<A>(beta, c));
        });
    }
}
DR_CLONES void layerNormF(const float* x, std::int64_t r0, std::int64_t r1, std::int64_t cols, const float* gamma,
                          const float* beta, float* out, float* mean, float* rstd) {
    layerNormBody(x, r0, r1, cols, gamma, beta, out, mean, rstd);
}
DR_CLONES void layerNormB(const float* x, std::int64_t r0, std::int64_t r1, std::int64_t cols, const float* gamma,
                          const float* beta, Bf16* out, float* mean, float* rstd) {
    constexpr std::int64_t kRowMax = 4096;
    if (cols <= kRowMax && haveBf16NarrowInstruction()) { // each row in fp32, then narrowed (bf16_narrow.h)
        float row[kRowMax];
        for (std::int64_t r = r0; r < r1; ++r) {
            layerNormBody(x + r * cols, 0, 1, cols, gamma, beta, row, mean + r, rstd + r);
            narrowToBf16(row, out + r * cols, cols);
        }
        return;
    }
    layerNormBody(x, r0, r1, cols, gamma, beta, out, mean, rstd);
}
DR_CLONES void layerNormW(const float* x, std::int64_t r0, std::int64_t r1, std::int64_t cols, const float* gamma,
                          const float* beta, Bf16InF32* out, float* mean, float* rstd) {
    layerNormBody(x, r0, r1, cols, gamma, beta, out, mean, rstd);
}

DR_CLONES void layerNormBackwardRange(const float* __restrict dy, const float* __restrict x,
                                      const float* __restrict mean, const float* __restrict rstd,
                                      const float* __restrict gamma, std::int64_t r0, std::int64_t r1,
                                      std::int64_t cols, float* __restrict dx) {
    const float inv = 1.0f / static_cast<float>(cols);
    for (std::int64_t r = r0; r < r1; ++r) {
        const float* d = dy + r * cols;
        const float* xr = x + r * cols;
        const float m = mean[r], s = rstd[r];
        // The means of g and of g · xhat, g = dy · gamma.
        const float a =
            rowSum(cols, [&]<class A>(A& acc, std::int64_t c) { acc += lanes<A>(d, c) * lanes<A>(gamma, c); }) * inv;
        const float b = rowSum(cols,
                               [&]<class A>(A& acc, std::int64_t c) {
                                   acc += lanes<A>(d, c) * lanes<A>(gamma, c) * (lanes<A>(xr, c) - m) * s;
                               }) *
                        inv;
        float* o = dx + r * cols;
        rowEach(cols, [&]<class A>(std::type_identity<A>, std::int64_t c) {
            const A xhat = (lanes<A>(xr, c) - m) * s;
            put(o, c, lanes<A>(o, c) + s * (lanes<A>(d, c) * lanes<A>(gamma, c) - a - xhat * b));
        });
    }
}

DR_CLONES void layerNormParamGradsBody(const float* __restrict dy, const float* __restrict x,
                                       const float* __restrict mean, const float* __restrict rstd, std::int64_t rows,
                                       std::int64_t cols, float* __restrict dgamma, float* __restrict dbeta) {
    std::fill(dgamma, dgamma + cols, 0.0f);
    std::fill(dbeta, dbeta + cols, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* d = dy + r * cols;
        const float* xr = x + r * cols;
        const float m = mean[r], s = rstd[r];
        for (std::int64_t c = 0; c < cols; ++c) {
            dgamma[c] += d[c] * (xr[c] - m) * s;
            dbeta[c] += d[c];
        }
    }
}

// ---- elementwise ----

DR_CLONES void addRowsBiasRange(const float* __restrict x, const float* __restrict y, const float* __restrict bias,
                                std::int64_t r0, std::int64_t r1, std::int64_t cols, float* __restrict out) {
    for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] = x[r * cols + c] + y[r * cols + c] + bias[c];
        }
    }
}
// The same with y + bias through dropout (the hashed mask of element r·cols + c).
DR_CLONES void addRowsBiasDropoutRange(const float* __restrict x, const float* __restrict y,
                                       const float* __restrict bias, std::int64_t r0, std::int64_t r1,
                                       std::int64_t cols, float p, std::uint64_t seed, std::int64_t firstRow,
                                       float* __restrict out) {
    const std::uint32_t threshold = keepThreshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            const auto index = static_cast<std::uint32_t>((firstRow + r) * cols + c);
            const float keep = maskBits(seed, index) >= threshold ? scale : 0.0f;
            out[r * cols + c] = x[r * cols + c] + (y[r * cols + c] + bias[c]) * keep;
        }
    }
}
DR_CLONES void dropoutRange(const float* __restrict in, std::int64_t begin, std::int64_t n, float p, std::uint64_t seed,
                            float* __restrict out) {
    const std::uint32_t threshold = keepThreshold(p);
    const float scale = 1.0f / (1.0f - p);
    for (std::int64_t i = 0; i < n; ++i) {
        out[i] = maskBits(seed, static_cast<std::uint32_t>(begin + i)) >= threshold ? in[i] * scale : 0.0f;
    }
}

// Columns [c0, c1) of x: their sums over every row, and (copy set) every value to bf16 (C: Bf16
// or Bf16InF32).
template <bool Copy, class C>
DR_INLINE void columnSumsBody(const float* __restrict x, std::int64_t rows, std::int64_t cols, std::int64_t c0,
                              std::int64_t c1, float* __restrict out, C* __restrict copy) {
    std::fill(out + c0, out + c1, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* __restrict xr = x + r * cols;
        for (std::int64_t c = c0; c < c1; ++c) {
            out[c] += xr[c];
            if constexpr (Copy) {
                store(copy[r * cols + c], xr[c]);
            }
        }
    }
}
DR_CLONES void columnSumsF(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1,
                           float* out) {
    columnSumsBody<false, float>(x, rows, cols, c0, c1, out, nullptr);
}
DR_CLONES void columnSumsB(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1,
                           float* out, Bf16* copy) {
    columnSumsBody<true>(x, rows, cols, c0, c1, out, copy);
}
DR_CLONES void columnSumsW(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1,
                           float* out, Bf16InF32* copy) {
    columnSumsBody<true>(x, rows, cols, c0, c1, out, copy);
}

// Φ(x) = (1 + erf(x / √2)) / 2 and φ(x) = exp(-x² / 2) / √(2π) from one exp: erf by
// Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), whose exp(-z²) is φ's own. Divisions,
// selects and the select-only exp: vectorises, unlike std::erf.
struct Normal {
    float cdf, pdf;
};
// z is bounded where exp(-z²) would leave the normal floats (z² ≤ 87, |x| ≤ 13.19): one min in place
// of exp's two clamps (their compares and blends were a tenth of the vectorised GELU). Past it,
// Φ is 1 or under 1e-38 either way.
DR_INLINE Normal normalAt(float x) {
    const float z = std::min((x < 0 ? -x : x) * 0.70710678118654752f, 9.32737905f);
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float e = expInRange(-z * z);
    const float half = 0.5f * p * t * e; // erfc(z) / 2
    return {x < 0 ? half : 1.0f - half, 0.39894228040143268f * e};
}
DR_INLINE float normalCdf(float x) { return normalAt(x).cdf; }
DR_INLINE float normalPdf(float x) { return normalAt(x).pdf; }
DR_INLINE float geluBody(float x) { return x * normalCdf(x); }
DR_INLINE float geluSlopeBody(float x) { return normalCdf(x) + x * normalPdf(x); }

// One Φ and one φ per value: gelu(v) = v Φ(v) out, gelu'(v) = Φ(v) + v φ(v) kept in x.
template <class T>
DR_INLINE void biasGeluBody(float* __restrict x, const float* __restrict bias, std::int64_t r0, std::int64_t r1,
                            std::int64_t cols, T* __restrict out) {
    // bf16 in chunks through a float buffer: a loop that also stores bf16 gets half-width vectors.
    // Chunks of 512 (2 kB), not 64: char-gpt's 512-wide rows in one go. float goes straight out
    // (through the buffer, GCC copies each chunk with `rep movsq`).
    // With AVX-512 BF16 each chunk is narrowed by its instruction (bf16_narrow.h).
    constexpr std::int64_t kChunk = 512;
    float gelu[kChunk];
    const bool narrow = std::is_same_v<T, Bf16> && haveBf16NarrowInstruction();
    for (std::int64_t r = r0; r < r1; ++r) {
        float* __restrict xr = x + r * cols;
        T* __restrict o = out + r * cols;
        if constexpr (!std::is_same_v<T, Bf16>) { // 4-byte stores: one loop
            for (std::int64_t c = 0; c < cols; ++c) {
                const float v = xr[c] + bias[c];
                const Normal nv = normalAt(v);
                store(o[c], v * nv.cdf);
                xr[c] = nv.cdf + v * nv.pdf;
            }
            continue;
        }
        for (std::int64_t c0 = 0; c0 < cols; c0 += kChunk) {
            const std::int64_t n = std::min(kChunk, cols - c0);
            for (std::int64_t c = 0; c < n; ++c) {
                const float v = xr[c0 + c] + bias[c0 + c];
                const Normal nv = normalAt(v);
                gelu[c] = v * nv.cdf;
                xr[c0 + c] = nv.cdf + v * nv.pdf;
            }
            if constexpr (std::is_same_v<T, Bf16>) {
                if (narrow) {
                    narrowToBf16(gelu, o + c0, n);
                    continue;
                }
            }
            for (std::int64_t c = 0; c < n; ++c) {
                store(o[c0 + c], gelu[c]);
            }
        }
    }
}
DR_CLONES_FMA void biasGeluF(float* x, const float* bias, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                             float* out) {
    biasGeluBody(x, bias, r0, r1, cols, out);
}
DR_CLONES_FMA void biasGeluB(float* x, const float* bias, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                             Bf16* out) {
    biasGeluBody(x, bias, r0, r1, cols, out);
}
DR_CLONES_FMA void biasGeluW(float* x, const float* bias, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                             Bf16InF32* out) {
    biasGeluBody(x, bias, r0, r1, cols, out);
}
DR_CLONES void geluBackwardRange(float* __restrict d, const float* __restrict slope, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        d[i] *= slope[i];
    }
}

// ---- attention ----

DR_CLONES void splitHeadsRange(const float* __restrict src, std::int64_t ld, const float* __restrict bias,
                               std::int64_t r0, std::int64_t r1, std::int64_t seq, std::int64_t heads,
                               std::int64_t head, float* __restrict dst) {
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t b = r / seq, t = r % seq;
        const float* row = src + r * ld;
        for (std::int64_t h = 0; h < heads; ++h) {
            float* o = dst + ((b * heads + h) * seq + t) * head;
            const float* in = row + h * head;
            if (bias) {
                for (std::int64_t d = 0; d < head; ++d) {
                    o[d] = in[d] + bias[h * head + d];
                }
            } else {
                for (std::int64_t d = 0; d < head; ++d) {
                    o[d] = in[d];
                }
            }
        }
    }
}

template <class T>
DR_INLINE void mergeHeadsBody(const float* __restrict src, std::int64_t r0, std::int64_t r1, std::int64_t seq,
                              std::int64_t heads, std::int64_t head, T* __restrict dst, std::int64_t ld) {
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t b = r / seq, t = r % seq;
        T* row = dst + r * ld;
        for (std::int64_t h = 0; h < heads; ++h) {
            const float* in = src + ((b * heads + h) * seq + t) * head;
            for (std::int64_t d = 0; d < head; ++d) {
                store(row[h * head + d], in[d]);
            }
        }
    }
}
DR_CLONES void mergeHeadsF(const float* src, std::int64_t r0, std::int64_t r1, std::int64_t seq, std::int64_t heads,
                           std::int64_t head, float* dst, std::int64_t ld) {
    mergeHeadsBody(src, r0, r1, seq, heads, head, dst, ld);
}
DR_CLONES void mergeHeadsB(const float* src, std::int64_t r0, std::int64_t r1, std::int64_t seq, std::int64_t heads,
                           std::int64_t head, Bf16* dst, std::int64_t ld) {
    mergeHeadsBody(src, r0, r1, seq, heads, head, dst, ld);
}
DR_CLONES void mergeHeadsW(const float* src, std::int64_t r0, std::int64_t r1, std::int64_t seq, std::int64_t heads,
                           std::int64_t head, Bf16InF32* dst, std::int64_t ld) {
    mergeHeadsBody(src, r0, r1, seq, heads, head, dst, ld);
}

// Rows [r0, r1) of the stacked seq×seq matrices (row r: matrix r / seq, query r % seq).
DR_CLONES void causalSoftmaxRange(float* __restrict s, std::int64_t r0, std::int64_t r1, std::int64_t seq,
                                  float scale) {
    for (std::int64_t r = r0; r < r1; ++r) {
        float* row = s + r * seq;
        // Keys 0..i. The loops run to i rounded up to 16 (whole vectors, selects past i), then zeros.
        const std::int64_t i = r % seq, n = std::min(seq, (i + 16) / 16 * 16);
        causalSoftmaxRow(row, i, n, scale);
        for (std::int64_t j = n; j < seq; ++j) {
            row[j] = 0.0f;
        }
    }
}

DR_CLONES void causalSoftmaxBackwardRange(const float* __restrict p, float* __restrict dp, std::int64_t r0,
                                          std::int64_t r1, std::int64_t seq, float scale) {
    for (std::int64_t r = r0; r < r1; ++r) {
        const float* pr = p + r * seq;
        float* d = dp + r * seq;
        // p is 0 above the diagonal, so the row up to i rounded up to 16 gives 0 there; then zeros.
        const std::int64_t n = std::min(seq, (r % seq + 16) / 16 * 16);
        causalSoftmaxGradRow(pr, d, n, scale);
        for (std::int64_t j = n; j < seq; ++j) {
            d[j] = 0.0f;
        }
    }
}

// ---- embeddings and the loss ----

DR_CLONES void embedRange(const float* __restrict wte, const float* __restrict wpe, const std::int64_t* tokens,
                          std::int64_t stride, std::int64_t r0, std::int64_t r1, std::int64_t seq, std::int64_t cols,
                          float* __restrict out) {
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t b = r / seq, t = r % seq;
        const float* e = wte + tokens[b * stride + t] * cols;
        const float* p = wpe + t * cols;
        for (std::int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] = e[c] + p[c];
        }
    }
}

DR_CLONES void embedBackwardBody(const float* __restrict dh, const std::int64_t* tokens, std::int64_t stride,
                                 std::int64_t batch, std::int64_t seq, std::int64_t cols, float* __restrict dwte,
                                 float* __restrict dwpe) {
    std::fill(dwpe, dwpe + seq * cols, 0.0f);
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = 0; t < seq; ++t) {
            const float* d = dh + (b * seq + t) * cols;
            float* e = dwte + tokens[b * stride + t] * cols;
            float* p = dwpe + t * cols;
            for (std::int64_t c = 0; c < cols; ++c) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
    }
}

DR_CLONES CrossEntropy crossEntropyRange(const float* __restrict logits, const std::int64_t* labels, std::int64_t r0,
                                         std::int64_t r1, std::int64_t classes, float* __restrict dlogits, float inv) {
    CrossEntropy out;
    for (std::int64_t r = r0; r < r1; ++r) {
        const float* z = logits + r * classes;
        float* dz = dlogits + r * classes;
        const std::int64_t label = labels[r];
        if (label < 0 || label >= classes) {
            out.badLabel = true;
            std::fill(dz, dz + classes, 0.0f);
            continue;
        }
        float best = z[0];
        std::int64_t arg = 0;
        for (std::int64_t c = 1; c < classes; ++c) {
            if (z[c] > best) {
                best = z[c];
                arg = c;
            }
        }
        for (std::int64_t c = 0; c < classes; ++c) {
            dz[c] = expBody(z[c] - best);
        }
        const float sum = laneSum(classes, [&](std::int64_t c) { return dz[c]; });
        out.lossSum += std::log(static_cast<double>(sum)) - static_cast<double>(z[label] - best);
        out.correct += arg == label ? 1 : 0;
        const float norm = inv / sum;
        for (std::int64_t c = 0; c < classes; ++c) {
            dz[c] *= norm;
        }
        dz[label] -= inv;
    }
    return out;
}

} // namespace

void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   float* out, float* mean, float* rstd) {
    rowsParallel(rows, cols,
                 [&](std::int64_t b, std::int64_t e) { layerNormF(x, b, e, cols, gamma, beta, out, mean, rstd); });
}
void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   Bf16* out, float* mean, float* rstd) {
    rowsParallel(rows, cols,
                 [&](std::int64_t b, std::int64_t e) { layerNormB(x, b, e, cols, gamma, beta, out, mean, rstd); });
}
void layerNormRows(const float* x, std::int64_t rows, std::int64_t cols, const float* gamma, const float* beta,
                   Bf16InF32* out, float* mean, float* rstd) {
    rowsParallel(rows, cols,
                 [&](std::int64_t b, std::int64_t e) { layerNormW(x, b, e, cols, gamma, beta, out, mean, rstd); });
}
void layerNormBackwardRows(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                           std::int64_t rows, std::int64_t cols, float* dx) {
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) {
        layerNormBackwardRange(dy, x, mean, rstd, gamma, b, e, cols, dx);
    });
}
void layerNormParamGrads(const float* dy, const float* x, const float* mean, const float* rstd, std::int64_t rows,
                         std::int64_t cols, float* dgamma, float* dbeta) {
    layerNormParamGradsBody(dy, x, mean, rstd, rows, cols, dgamma, dbeta);
}

void addRowsBias(const float* x, const float* y, const float* bias, std::int64_t rows, std::int64_t cols, float* out,
                 float p, std::uint64_t seed, std::int64_t firstRow) {
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) {
        if (p > 0) {
            addRowsBiasDropoutRange(x, y, bias, b, e, cols, p, seed, firstRow, out);
        } else {
            addRowsBiasRange(x, y, bias, b, e, cols, out);
        }
    });
}
void addBias(float* x, const float* bias, std::int64_t rows, std::int64_t cols) {
    // The dense step's one-pass bias loop (no relu, no dropout), over rows in parallel.
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) {
        biasReluDropout(x + b * cols, bias, e - b, cols, /*relu=*/false, 0.0f, 0);
    });
}
void dropoutValues(const float* in, std::int64_t n, float p, std::uint64_t seed, float* out, std::int64_t first) {
    at::parallel_for(0, n, kGrain,
                     [&](std::int64_t b, std::int64_t e) { dropoutRange(in + b, first + b, e - b, p, seed, out + b); });
}
namespace {
// f(c0, c1) over column blocks of 64 (4 cache lines a row), tasks of about kGrain values.
template <class F>
void columnBlocks(std::int64_t rows, std::int64_t cols, const F& f) {
    constexpr std::int64_t kBlock = 64;
    const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, rows * kBlock));
    at::parallel_for(0, blocks, grain,
                     [&](std::int64_t b, std::int64_t e) { f(b * kBlock, std::min(cols, e * kBlock)); });
}
} // namespace
void columnSums(const float* x, std::int64_t rows, std::int64_t cols, float* out, Bf16* copy) {
    const bool narrow = copy && haveBf16NarrowInstruction();
    columnBlocks(rows, cols, [&](std::int64_t c0, std::int64_t c1) {
        if (narrow) {
            columnSumsNarrowing(x, rows, cols, c0, c1, out, copy);
        } else if (copy) {
            columnSumsB(x, rows, cols, c0, c1, out, copy);
        } else {
            columnSumsF(x, rows, cols, c0, c1, out);
        }
    });
}
void columnSums(const float* x, std::int64_t rows, std::int64_t cols, float* out, Bf16InF32* copy) {
    columnBlocks(rows, cols, [&](std::int64_t c0, std::int64_t c1) { columnSumsW(x, rows, cols, c0, c1, out, copy); });
}

void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, float* out) {
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) { biasGeluF(x, bias, b, e, cols, out); });
}
void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, Bf16* out) {
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) { biasGeluB(x, bias, b, e, cols, out); });
}
void biasGelu(float* x, const float* bias, std::int64_t rows, std::int64_t cols, Bf16InF32* out) {
    rowsParallel(rows, cols, [&](std::int64_t b, std::int64_t e) { biasGeluW(x, bias, b, e, cols, out); });
}
void geluBackward(float* d, const float* slope, std::int64_t n) {
    at::parallel_for(0, n, kGrain, [&](std::int64_t b, std::int64_t e) { geluBackwardRange(d + b, slope + b, e - b); });
}
float geluValue(float x) { return geluBody(x); }
float geluSlope(float x) { return geluSlopeBody(x); }

void splitHeads(const float* src, std::int64_t ld, const float* bias, std::int64_t batch, std::int64_t seq,
                std::int64_t heads, std::int64_t head, float* dst) {
    rowsParallel(batch * seq, heads * head,
                 [&](std::int64_t b, std::int64_t e) { splitHeadsRange(src, ld, bias, b, e, seq, heads, head, dst); });
}
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                float* dst, std::int64_t ld) {
    rowsParallel(batch * seq, heads * head,
                 [&](std::int64_t b, std::int64_t e) { mergeHeadsF(src, b, e, seq, heads, head, dst, ld); });
}
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                Bf16* dst, std::int64_t ld) {
    rowsParallel(batch * seq, heads * head,
                 [&](std::int64_t b, std::int64_t e) { mergeHeadsB(src, b, e, seq, heads, head, dst, ld); });
}
void mergeHeads(const float* src, std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head,
                Bf16InF32* dst, std::int64_t ld) {
    rowsParallel(batch * seq, heads * head,
                 [&](std::int64_t b, std::int64_t e) { mergeHeadsW(src, b, e, seq, heads, head, dst, ld); });
}

void causalSoftmax(float* s, std::int64_t mats, std::int64_t seq, float scale) {
    rowsParallel(mats * seq, seq, [&](std::int64_t b, std::int64_t e) { causalSoftmaxRange(s, b, e, seq, scale); });
}
void causalSoftmaxBackward(const float* p, float* dp, std::int64_t mats, std::int64_t seq, float scale) {
    rowsParallel(mats * seq, seq,
                 [&](std::int64_t b, std::int64_t e) { causalSoftmaxBackwardRange(p, dp, b, e, seq, scale); });
}

bool embedTokens(const float* wte, std::int64_t vocabulary, const float* wpe, const std::int64_t* tokens,
                 std::int64_t stride, std::int64_t batch, std::int64_t seq, std::int64_t cols, float* out) {
    for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t t = 0; t < seq; ++t) {
            const auto id = tokens[b * stride + t];
            if (id < 0 || id >= vocabulary) {
                return false;
            }
        }
    }
    rowsParallel(batch * seq, cols,
                 [&](std::int64_t b, std::int64_t e) { embedRange(wte, wpe, tokens, stride, b, e, seq, cols, out); });
    return true;
}
void embedTokensBackward(const float* dh, const std::int64_t* tokens, std::int64_t stride, std::int64_t batch,
                         std::int64_t seq, std::int64_t cols, float* dwte, float* dwpe) {
    embedBackwardBody(dh, tokens, stride, batch, seq, cols, dwte, dwpe);
}

CrossEntropy tokenCrossEntropy(const float* logits, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                               float* dlogits, std::int64_t meanOver) {
    const float inv = 1.0f / static_cast<float>(meanOver > 0 ? meanOver : rows);
    const std::int64_t grain = rowGrain(classes);
    const std::int64_t tasks = (rows + grain - 1) / grain;
    std::vector<CrossEntropy> parts(static_cast<std::size_t>(tasks));
    at::parallel_for(0, tasks, 1, [&](std::int64_t b, std::int64_t e) {
        for (auto k = b; k < e; ++k) {
            parts[static_cast<std::size_t>(k)] =
                crossEntropyRange(logits, labels, k * grain, std::min(rows, (k + 1) * grain), classes, dlogits, inv);
        }
    });
    CrossEntropy out;
    for (const auto& p : parts) { // in task order: the same sum on any thread count
        out.lossSum += p.lossSum;
        out.correct += p.correct;
        out.badLabel = out.badLabel || p.badLabel;
    }
    return out;
}

} // namespace devicerace::detail::cpu
