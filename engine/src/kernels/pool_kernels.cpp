// ReLU + 2x2 max pooling + dropout, forward and backward (see pool_kernels.h). Built like
// cpu_kernels.cpp: per-ISA clones of always-inline bodies, parallel over output rows.
#include "kernels/pool_kernels.h"
#include "kernels/kernel_inline.h"

#include <ATen/Parallel.h>

namespace devicerace::detail::cpu {

namespace {

// The four inputs of window (oh, ow) of one channel, for a layout: element offsets from the
// window's top-left element.
struct Window {
    std::int64_t right, down;
};

// An fp32 input read as its bf16 rounding (kernel_inline.h's store(Bf16&)): a bf16 lane's
// convolution output, computed in fp32 and rounded here rather than in a pass of its own.
struct F32AsBf16 {
    float v;
};
DR_INLINE float load(const F32AsBf16& v) {
    Bf16 b;
    store(b, v.v);
    return load(b);
}

// One output: the slot of the window's first maximum after relu (kNoGradient when it is 0 or
// dropped) and its value. Selects, no branches, so the channel loop vectorises.
template <class T>
DR_INLINE float poolOne(const T* __restrict x, Window w, std::uint8_t& slot, bool keep) {
    const float a = load(x[0]), b = load(x[w.right]), c = load(x[w.down]), d = load(x[w.down + w.right]);
    float best = a;
    std::uint8_t at = 0;
    at = b > best ? std::uint8_t{1} : at;
    best = b > best ? b : best;
    at = c > best ? std::uint8_t{2} : at;
    best = c > best ? c : best;
    at = d > best ? std::uint8_t{3} : at;
    best = d > best ? d : best;
    const bool live = best > 0.0f && keep;
    slot = live ? at : kNoGradient;
    return live ? best : 0.0f;
}

// One NHWC input pixel's `channels` outputs: contiguous (NHWC output, from out + o) or `step`
// apart (NCHW output, from out + base).
template <class In, class Out, bool Drop, bool OutNhwc>
DR_INLINE void poolPixel(const In* __restrict in, Out* __restrict out, std::uint8_t* __restrict slot, Window w,
                         std::int64_t channels, std::uint32_t base, std::uint32_t step, std::uint32_t threshold,
                         float scale, std::uint64_t seed) {
    for (std::int64_t c = 0; c < channels; ++c) {
        const bool keep = !Drop || maskBits(seed, base + static_cast<std::uint32_t>(c) * step) >= threshold;
        const std::int64_t at = OutNhwc ? c : c * static_cast<std::int64_t>(step);
        const float v = poolOne(in + c, w, slot[at], keep);
        store(out[at], Drop ? v * scale : v);
    }
}

// One NCHW output row: `width` outputs of one plane, their windows two input rows.
template <class In, class Out, bool Drop>
DR_INLINE void poolRow(const In* __restrict in, Out* __restrict out, std::uint8_t* __restrict slot, Window w,
                       std::int64_t width, std::uint32_t base, std::uint32_t threshold, float scale,
                       std::uint64_t seed) {
    for (std::int64_t xo = 0; xo < width; ++xo) {
        const bool keep = !Drop || maskBits(seed, base + static_cast<std::uint32_t>(xo)) >= threshold;
        const float v = poolOne(in + 2 * xo, w, slot[xo], keep);
        store(out[xo], Drop ? v * scale : v);
    }
}

// Output rows [begin, end): a row is one (image, oh) in NHWC, one (image, channel, oh) in NCHW.
template <class In, class Out, bool Drop>
DR_INLINE void poolRows(const In* __restrict x, Out* __restrict out, std::uint8_t* __restrict slot, const PoolShape& s,
                        std::int64_t begin, std::int64_t end, float p, float scale, std::uint64_t seed) {
    const std::int64_t oh = s.height / 2, ow = s.width / 2;
    const std::uint32_t threshold = keepThreshold(p);
    for (std::int64_t r = begin; r < end; ++r) {
        if (s.nhwc) {
            const std::int64_t image = r / oh, y = r % oh;
            const Window w{s.channels, s.width * s.channels};
            for (std::int64_t xo = 0; xo < ow; ++xo) {
                const In* in = x + ((image * s.height + 2 * y) * s.width + 2 * xo) * s.channels;
                const std::int64_t o = ((image * oh + y) * ow + xo) * s.channels;
                // NCHW index of output (image, c, y, xo): ((image * C + c) * oh + y) * ow + xo.
                const auto base = static_cast<std::uint32_t>((image * s.channels * oh + y) * ow + xo);
                const auto step = static_cast<std::uint32_t>(oh * ow);
                if (s.outNhwc) {
                    poolPixel<In, Out, Drop, true>(in, out + o, slot + o, w, s.channels, base, step, threshold, scale,
                                                   seed);
                } else {
                    poolPixel<In, Out, Drop, false>(in, out + base, slot + base, w, s.channels, base, step, threshold,
                                                    scale, seed);
                }
            }
        } else {
            const std::int64_t plane = r / oh, y = r % oh;
            poolRow<In, Out, Drop>(x + (plane * s.height + 2 * y) * s.width, out + r * ow, slot + r * ow,
                                   Window{1, s.width}, ow, static_cast<std::uint32_t>(r * ow), threshold, scale, seed);
        }
    }
}

// One NHWC input pixel's window gradients from its `channels` outputs (laid out as in poolPixel).
template <class Dy, class T, bool OutNhwc>
DR_INLINE void poolBackPixel(const Dy* __restrict dy, const std::uint8_t* __restrict slot, T* __restrict in,
                             T* __restrict below, std::int64_t channels, std::int64_t step, float scale) {
    for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t o = OutNhwc ? c : c * step;
        const std::uint8_t at = slot[o];
        const float g = load(dy[o]) * scale;
        store(in[c], at == 0 ? g : 0.0f);
        store(in[channels + c], at == 1 ? g : 0.0f);
        store(below[c], at == 2 ? g : 0.0f);
        store(below[channels + c], at == 3 ? g : 0.0f);
    }
}

template <class Dy, class T>
DR_INLINE void poolBackRows(const Dy* __restrict dy, const std::uint8_t* __restrict slot, T* __restrict dx,
                            const PoolShape& s, std::int64_t begin, std::int64_t end, float scale) {
    const std::int64_t oh = s.height / 2, ow = s.width / 2;
    for (std::int64_t r = begin; r < end; ++r) {
        if (s.nhwc) {
            const std::int64_t image = r / oh, y = r % oh;
            for (std::int64_t xo = 0; xo < ow; ++xo) {
                T* in = dx + ((image * s.height + 2 * y) * s.width + 2 * xo) * s.channels;
                T* below = in + s.width * s.channels;
                if (s.outNhwc) {
                    const std::int64_t o = ((image * oh + y) * ow + xo) * s.channels;
                    poolBackPixel<Dy, T, true>(dy + o, slot + o, in, below, s.channels, 1, scale);
                } else {
                    const std::int64_t base = (image * s.channels * oh + y) * ow + xo;
                    poolBackPixel<Dy, T, false>(dy + base, slot + base, in, below, s.channels, oh * ow, scale);
                }
            }
        } else {
            const std::int64_t plane = r / oh, y = r % oh;
            T* in = dx + (plane * s.height + 2 * y) * s.width;
            T* below = in + s.width;
            const std::int64_t o = r * ow;
            for (std::int64_t xo = 0; xo < ow; ++xo) {
                const std::uint8_t at = slot[o + xo];
                const float g = load(dy[o + xo]) * scale;
                store(in[2 * xo], at == 0 ? g : 0.0f);
                store(in[2 * xo + 1], at == 1 ? g : 0.0f);
                store(below[2 * xo], at == 2 ? g : 0.0f);
                store(below[2 * xo + 1], at == 3 ? g : 0.0f);
            }
        }
    }
}

// Rows of the output: NHWC one per (image, oh), NCHW one per (image, channel, oh).
std::int64_t outputRows(const PoolShape& s) { return s.images * (s.nhwc ? 1 : s.channels) * (s.height / 2); }
std::int64_t rowGrain(const PoolShape& s) {
    const std::int64_t perRow = (s.nhwc ? s.channels : 1) * s.width * 2;
    return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, perRow));
}

// Inputs no window covers (the last row or column of an odd height or width) get no gradient.
template <class T>
void zeroUncovered(T* dx, const PoolShape& s) {
    if (s.height % 2 == 0 && s.width % 2 == 0) {
        return;
    }
    const std::int64_t c = s.nhwc ? s.channels : 1, planes = s.images * (s.nhwc ? 1 : s.channels);
    at::parallel_for(0, planes, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t pl = b; pl < e; ++pl) {
            T* plane = dx + pl * s.height * s.width * c;
            for (std::int64_t y = 0; y < s.height; ++y) {
                for (std::int64_t x = 0; x < s.width; ++x) {
                    if (y >= s.height / 2 * 2 || x >= s.width / 2 * 2) {
                        for (std::int64_t k = 0; k < c; ++k) {
                            store(plane[(y * s.width + x) * c + k], 0.0f);
                        }
                    }
                }
            }
        }
    });
}

// The dropout test hoisted out of the loops.
template <class In, class Out>
DR_INLINE void poolRowsOf(const In* x, Out* out, std::uint8_t* slot, const PoolShape& s, std::int64_t b, std::int64_t e,
                          float p, float scale, std::uint64_t seed) {
    if (p > 0.0f) {
        poolRows<In, Out, true>(x, out, slot, s, b, e, p, scale, seed);
    } else {
        poolRows<In, Out, false>(x, out, slot, s, b, e, p, scale, seed);
    }
}

DR_CLONES void poolRowsF(const float* x, float* out, std::uint8_t* slot, const PoolShape& s, std::int64_t b,
                         std::int64_t e, float p, float scale, std::uint64_t seed) {
    poolRowsOf(x, out, slot, s, b, e, p, scale, seed);
}
DR_CLONES void poolRowsB(const Bf16* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, std::int64_t b,
                         std::int64_t e, float p, float scale, std::uint64_t seed) {
    poolRowsOf(x, out, slot, s, b, e, p, scale, seed);
}
DR_CLONES void poolRowsR(const float* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, std::int64_t b,
                         std::int64_t e, float p, float scale, std::uint64_t seed) {
    poolRowsOf(reinterpret_cast<const F32AsBf16*>(x), out, slot, s, b, e, p, scale, seed);
}
DR_CLONES void poolBackRowsF(const float* dy, const std::uint8_t* slot, float* dx, const PoolShape& s, std::int64_t b,
                             std::int64_t e, float scale) {
    poolBackRows(dy, slot, dx, s, b, e, scale);
}
DR_CLONES void poolBackRowsB(const Bf16* dy, const std::uint8_t* slot, Bf16* dx, const PoolShape& s, std::int64_t b,
                             std::int64_t e, float scale) {
    poolBackRows(dy, slot, dx, s, b, e, scale);
}

// dx rounded to bf16 as the bf16 pass's (a kept value's dy x scale), kept in fp32.
DR_CLONES void poolBackRowsR(const Bf16* dy, const std::uint8_t* slot, float* dx, const PoolShape& s, std::int64_t b,
                             std::int64_t e, float scale) {
    poolBackRows(dy, slot, reinterpret_cast<Bf16InF32*>(dx), s, b, e, scale);
}

} // namespace

void reluMaxPool2(const float* x, float* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                  std::uint64_t seed) {
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolRowsF(x, out, slot, s, b, e, p, scale, seed); });
}
void reluMaxPool2(const Bf16* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                  std::uint64_t seed) {
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolRowsB(x, out, slot, s, b, e, p, scale, seed); });
}
void reluMaxPool2Rounding(const float* x, Bf16* out, std::uint8_t* slot, const PoolShape& s, float p, float scale,
                          std::uint64_t seed) {
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolRowsR(x, out, slot, s, b, e, p, scale, seed); });
}
void reluMaxPool2Backward(const float* dy, const std::uint8_t* slot, float* dx, const PoolShape& s, float scale) {
    zeroUncovered(dx, s);
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolBackRowsF(dy, slot, dx, s, b, e, scale); });
}
void reluMaxPool2Backward(const Bf16* dy, const std::uint8_t* slot, Bf16* dx, const PoolShape& s, float scale) {
    zeroUncovered(dx, s);
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolBackRowsB(dy, slot, dx, s, b, e, scale); });
}

void reluMaxPool2RoundingBackward(const Bf16* dy, const std::uint8_t* slot, float* dx, const PoolShape& s,
                                  float scale) {
    zeroUncovered(dx, s);
    at::parallel_for(0, outputRows(s), rowGrain(s),
                     [&](std::int64_t b, std::int64_t e) { poolBackRowsR(dy, slot, dx, s, b, e, scale); });
}

} // namespace devicerace::detail::cpu
