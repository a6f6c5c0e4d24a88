// One-pass LSTM loops (see lstm_kernels.h), cloned per ISA like cpu_kernels.cpp.
#include "kernels/lstm_kernels.h"
#include "kernels/kernel_inline.h"

#include <ATen/Parallel.h>

namespace devicerace::detail::cpu {

namespace {

DR_INLINE float sigmoidBody(float x) { return 1.0f / (1.0f + expBody(-x)); }
DR_INLINE float tanhBody(float x) { return 2.0f / (1.0f + expBody(-2.0f * x)) - 1.0f; }

template <bool HasPrev>
DR_INLINE void forwardRows(float* __restrict gates, const float* __restrict cPrev, float* __restrict c,
                           float* __restrict h, std::int64_t begin, std::int64_t end, std::int64_t hidden) {
    for (std::int64_t r = begin; r < end; ++r) {
        float* __restrict gi = gates + r * 4 * hidden;
        float* __restrict gf = gi + hidden;
        float* __restrict gg = gf + hidden;
        float* __restrict go = gg + hidden;
        float* __restrict cr = c + r * hidden;
        float* __restrict hr = h + r * hidden;
        for (std::int64_t k = 0; k < hidden; ++k) {
            const float i = sigmoidBody(gi[k]);
            const float f = sigmoidBody(gf[k]);
            const float g = tanhBody(gg[k]);
            const float o = sigmoidBody(go[k]);
            float cv = i * g;
            if constexpr (HasPrev) {
                cv += f * cPrev[r * hidden + k];
            }
            gi[k] = i;
            gf[k] = f;
            gg[k] = g;
            go[k] = o;
            cr[k] = cv;
            hr[k] = o * tanhBody(cv);
        }
    }
}

template <bool HasPrev>
DR_INLINE void backwardRows(const float* __restrict gates, const float* __restrict cPrev, const float* __restrict c,
                            const float* __restrict dh, float* __restrict dc, float* __restrict dGates,
                            std::int64_t begin, std::int64_t end, std::int64_t hidden) {
    for (std::int64_t r = begin; r < end; ++r) {
        const float* __restrict gi = gates + r * 4 * hidden;
        const float* __restrict gf = gi + hidden;
        const float* __restrict gg = gf + hidden;
        const float* __restrict go = gg + hidden;
        float* __restrict di = dGates + r * 4 * hidden;
        float* __restrict df = di + hidden;
        float* __restrict dg = df + hidden;
        float* __restrict dout = dg + hidden;
        for (std::int64_t k = 0; k < hidden; ++k) {
            const auto e = r * hidden + k;
            const float i = gi[k], f = gf[k], g = gg[k], o = go[k];
            const float tc = tanhBody(c[e]);
            const float dhv = dh[e];
            const float dcv = dc[e] + dhv * o * (1.0f - tc * tc);
            const float prev = HasPrev ? cPrev[e] : 0.0f;
            di[k] = dcv * g * i * (1.0f - i);
            df[k] = dcv * prev * f * (1.0f - f);
            dg[k] = dcv * i * (1.0f - g * g);
            dout[k] = dhv * tc * o * (1.0f - o);
            dc[e] = dcv * f;
        }
    }
}

DR_CLONES void forwardRange(float* gates, const float* cPrev, float* c, float* h, std::int64_t b, std::int64_t e,
                            std::int64_t hidden) {
    if (cPrev) {
        forwardRows<true>(gates, cPrev, c, h, b, e, hidden);
    } else {
        forwardRows<false>(gates, cPrev, c, h, b, e, hidden);
    }
}
DR_CLONES void backwardRange(const float* gates, const float* cPrev, const float* c, const float* dh, float* dc,
                             float* dGates, std::int64_t b, std::int64_t e, std::int64_t hidden) {
    if (cPrev) {
        backwardRows<true>(gates, cPrev, c, dh, dc, dGates, b, e, hidden);
    } else {
        backwardRows<false>(gates, cPrev, c, dh, dc, dGates, b, e, hidden);
    }
}
DR_CLONES void gatherRange(const float* table, const std::int64_t* ids, std::int64_t idStride, const float* bias,
                           float* out, std::int64_t b, std::int64_t e, std::int64_t cols) {
    for (std::int64_t r = b; r < e; ++r) {
        const float* __restrict src = table + ids[r * idStride] * cols;
        float* __restrict dst = out + r * cols;
        for (std::int64_t k = 0; k < cols; ++k) {
            dst[k] = bias[k] + src[k];
        }
    }
}
DR_CLONES void scatterRange(const float* src, const std::int64_t* ids, std::int64_t idStride, float* table,
                            std::int64_t rows, std::int64_t cols, std::int64_t c0, std::int64_t c1) {
    for (std::int64_t r = 0; r < rows; ++r) {
        float* __restrict dst = table + ids[r * idStride] * cols;
        const float* __restrict from = src + r * cols;
        for (std::int64_t k = c0; k < c1; ++k) {
            dst[k] += from[k];
        }
    }
}
DR_CLONES float expOne(float x) { return expBody(x); }

// Rows per task: a step's gates are small (batch × 4·hidden), but each value costs several
// exps, so a smaller grain than the plain loops' pays.
std::int64_t rowGrain(std::int64_t hidden) {
    return std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, hidden));
}

} // namespace

float lstmExp(float x) { return expOne(x); }
float lstmSigmoid(float x) { return 1.0f / (1.0f + expOne(-x)); }
float lstmTanh(float x) { return 2.0f / (1.0f + expOne(-2.0f * x)) - 1.0f; }

bool gatherRowsPlusBias(const float* table, std::int64_t tableRows, const std::int64_t* ids, std::int64_t idStride,
                        const float* bias, float* out, std::int64_t rows, std::int64_t cols) {
    for (std::int64_t r = 0; r < rows; ++r) {
        if (ids[r * idStride] < 0 || ids[r * idStride] >= tableRows) {
            return false;
        }
    }
    at::parallel_for(0, rows, std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cols)),
                     [&](std::int64_t b, std::int64_t e) { gatherRange(table, ids, idStride, bias, out, b, e, cols); });
    return true;
}

void scatterAddRows(const float* src, const std::int64_t* ids, std::int64_t idStride, float* table, std::int64_t rows,
                    std::int64_t cols) {
    at::parallel_for(0, cols, std::max<std::int64_t>(16, cols / 8), [&](std::int64_t c0, std::int64_t c1) {
        scatterRange(src, ids, idStride, table, rows, cols, c0, c1);
    });
}

void lstmStepForward(float* gates, const float* cPrev, float* c, float* h, std::int64_t batch, std::int64_t hidden) {
    at::parallel_for(0, batch, rowGrain(hidden),
                     [&](std::int64_t b, std::int64_t e) { forwardRange(gates, cPrev, c, h, b, e, hidden); });
}

void lstmStepBackward(const float* gates, const float* cPrev, const float* c, const float* dh, float* dc, float* dGates,
                      std::int64_t batch, std::int64_t hidden) {
    at::parallel_for(0, batch, rowGrain(hidden), [&](std::int64_t b, std::int64_t e) {
        backwardRange(gates, cPrev, c, dh, dc, dGates, b, e, hidden);
    });
}

} // namespace devicerace::detail::cpu
