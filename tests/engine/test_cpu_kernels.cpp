// The one-pass CPU loops (engine kernels/cpu_kernels.h) against plain formulas: hashed dropout
// masks keep 1 - p of the units and differ between seeds, RMSprop matches torch.optim's
// update, bf16 rounds to nearest even, softmax cross-entropy and its gradient are right.
#include <gtest/gtest.h>

#include <thread>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu_kernels.h"
#include "kernels/mkl_gemm.h"

using namespace devicerace::detail;

TEST(CpuKernels, DropoutMasksKeepTheirShareAndDifferBetweenSeeds) {
    constexpr std::int64_t n = 1 << 20;
    for (const float p : {0.2f, 0.5f}) {
        std::vector<float> a(n), b(n);
        cpu::dropoutMask(a.data(), n, p, 1234);
        cpu::dropoutMask(b.data(), n, p, 1235);
        std::int64_t keptA = 0, same = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            keptA += a[i] > 0;
            same += (a[i] > 0) == (b[i] > 0);
            ASSERT_TRUE(a[i] == 0.0f || a[i] == 1.0f / (1.0f - p));
            ASSERT_EQ(a[i] > 0, cpu::dropoutKeeps(1234, static_cast<std::uint64_t>(i), p));
        }
        EXPECT_NEAR(static_cast<double>(keptA) / n, 1.0 - p, 0.005) << "p " << p;
        // Independent masks agree on p^2 + (1-p)^2 of the units.
        EXPECT_NEAR(static_cast<double>(same) / n, p * p + (1 - p) * (1 - p), 0.005) << "p " << p;
    }
}

// A bf16 mask and an NHWC mask (channels_last activations) drop the units the flat fp32 mask
// drops: element (n, c, position) is NCHW index (n * C + c) * HW + position in every layout.
TEST(CpuKernels, DropoutMasksInBf16AndNhwcDropTheSameUnits) {
    constexpr std::int64_t images = 3, channels = 37, spatial = 50, n = images * channels * spatial;
    constexpr float p = 0.25f;
    std::vector<float> flat(n), nhwc(n);
    std::vector<cpu::Bf16> flatB(n), nhwcB(n);
    cpu::dropoutMask(flat.data(), n, p, 99);
    cpu::dropoutMask(flatB.data(), n, p, 99);
    cpu::dropoutMaskNhwc(nhwc.data(), images, channels, spatial, p, 99);
    cpu::dropoutMaskNhwc(nhwcB.data(), images, channels, spatial, p, 99);
    std::vector<float> back(n);
    cpu::toFloat(flatB.data(), back.data(), n);
    std::vector<float> backNhwc(n);
    cpu::toFloat(nhwcB.data(), backNhwc.data(), n);
    std::int64_t kept = 0;
    for (std::int64_t img = 0; img < images; ++img) {
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t s = 0; s < spatial; ++s) {
                const auto nchwIndex = (img * channels + c) * spatial + s;
                const auto nhwcIndex = (img * spatial + s) * channels + c;
                ASSERT_EQ(nhwc[nhwcIndex], flat[nchwIndex]) << img << " " << c << " " << s;
                ASSERT_EQ(back[nchwIndex] > 0, flat[nchwIndex] > 0);
                ASSERT_EQ(backNhwc[nhwcIndex], back[nchwIndex]);
                kept += flat[nchwIndex] > 0;
            }
        }
    }
    EXPECT_GT(kept, n / 2);
    EXPECT_LT(kept, n);
}

TEST(CpuKernels, BiasReluDropoutMatchesTheFormulaAndItsBackward) {
    const std::int64_t rows = 5, cols = 37; // not a multiple of any vector width
    std::vector<float> x(rows * cols), bias(cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        x[i] = std::sin(static_cast<float>(i));
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        bias[c] = 0.1f * static_cast<float>(c % 3) - 0.1f;
    }
    auto h = x;
    cpu::biasReluDropout(h.data(), bias.data(), rows, cols, true, 0.25f, 99);
    std::vector<float> d(rows * cols, 1.0f), dbias(cols, 7.0f);
    cpu::reluDropoutBackward(d.data(), h.data(), rows, cols, 1.0f / 0.75f, dbias.data());
    std::vector<float> wantBias(cols, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            const auto i = r * cols + c;
            const float z = std::max(0.0f, x[i] + bias[c]);
            const float want = cpu::dropoutKeeps(99, static_cast<std::uint64_t>(i), 0.25f) ? z / 0.75f : 0.0f;
            EXPECT_FLOAT_EQ(h[i], want) << i;
            const float grad = want > 0 ? 1.0f / 0.75f : 0.0f;
            EXPECT_FLOAT_EQ(d[i], grad) << i;
            wantBias[c] += grad;
        }
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        EXPECT_FLOAT_EQ(dbias[c], wantBias[c]) << c;
    }
}

// From fp32 GEMM sums (a wider buffer: leading dimension ld) to bf16: the in-place bf16 result
// of the same values, and its backward from fp32 sums the in-place backward of their bf16.
TEST(CpuKernels, OutOfPlaceBf16PassesMatchTheInPlaceOnes) {
    const std::int64_t rows = 4, cols = 37, ld = 53, first = 3;
    std::vector<float> sums(rows * ld, 99.0f), bias(cols);
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            sums[r * ld + c] = std::sin(static_cast<float>(r * cols + c)) * 3.0f;
        }
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        bias[c] = 0.01f * static_cast<float>(c) - 0.2f;
    }
    for (const bool relu : {true, false}) {
        for (const float p : {0.0f, 0.3f}) {
            std::vector<cpu::Bf16> out(rows * cols), inPlace(rows * cols);
            cpu::biasReluDropout(sums.data(), ld, out.data(), bias.data(), rows, cols, relu, p, 5, first);
            // In place, the bias added in fp32 to the sums before the one rounding.
            std::vector<float> dense(rows * cols);
            for (std::int64_t r = 0; r < rows; ++r) {
                std::copy_n(sums.data() + r * ld, cols, dense.data() + r * cols);
            }
            cpu::biasReluDropout(dense.data(), bias.data(), rows, cols, relu, p, 5, first);
            cpu::toBf16(dense.data(), inPlace.data(), rows * cols);
            for (std::int64_t i = 0; i < rows * cols; ++i) {
                ASSERT_EQ(out[i].bits, inPlace[i].bits) << "relu " << relu << " p " << p << " at " << i;
            }
        }
    }
    std::vector<cpu::Bf16> h(rows * cols), d(rows * cols), want(rows * cols);
    cpu::biasReluDropout(sums.data(), ld, h.data(), bias.data(), rows, cols, true, 0.0f, 0);
    std::vector<float> dbias(cols, 5.0f), wantBias(cols);
    cpu::reluDropoutBackward(sums.data(), ld, d.data(), h.data(), rows, cols, 2.0f, dbias.data());
    std::vector<float> dense(rows * cols);
    for (std::int64_t r = 0; r < rows; ++r) {
        std::copy_n(sums.data() + r * ld, cols, dense.data() + r * cols);
    }
    std::vector<float> hf(rows * cols);
    cpu::toFloat(h.data(), hf.data(), rows * cols);
    cpu::reluDropoutBackward(dense.data(), hf.data(), rows, cols, 2.0f, wantBias.data());
    cpu::toBf16(dense.data(), want.data(), rows * cols);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        ASSERT_EQ(d[i].bits, want[i].bits) << i;
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        EXPECT_FLOAT_EQ(dbias[c], wantBias[c]) << c;
    }
}

// The dense step's passes with bf16 values kept in fp32 storage (cpu::Bf16InF32) write what their
// bf16 forms write, widened, bit for bit; the bias gradients and the loss are the same sums.
TEST(CpuKernels, Bf16InF32PassesWriteTheBf16PassesValues) {
    const std::int64_t rows = 4, cols = 37, ld = 53;
    std::vector<float> sums(rows * ld, 99.0f), bias(cols);
    for (std::int64_t i = 0; i < rows * ld; ++i) {
        sums[i] = std::sin(static_cast<float>(i)) * 3.0f;
    }
    for (std::int64_t c = 0; c < cols; ++c) {
        bias[c] = 0.01f * static_cast<float>(c) - 0.2f;
    }
    const auto widened = [](const std::vector<cpu::Bf16>& b) {
        std::vector<float> f(b.size());
        cpu::toFloat(b.data(), f.data(), static_cast<std::int64_t>(b.size()));
        return f;
    };
    const auto values = [](const std::vector<cpu::Bf16InF32>& w) {
        std::vector<float> f;
        for (const auto& v : w) {
            f.push_back(v.v);
        }
        return f;
    };
    std::vector<cpu::Bf16> hB(rows * cols), dB(rows * cols), zB(rows * cols), gB(rows * cols);
    std::vector<cpu::Bf16InF32> hW(rows * cols), dW(rows * cols), zW(rows * cols), gW(rows * cols);
    for (const float p : {0.0f, 0.3f}) {
        cpu::biasReluDropout(sums.data(), ld, hB.data(), bias.data(), rows, cols, true, p, 5, 2);
        cpu::biasReluDropout(sums.data(), ld, hW.data(), bias.data(), rows, cols, true, p, 5, 2);
        EXPECT_EQ(widened(hB), values(hW)) << "bias + relu + dropout, p " << p;
    }
    std::vector<float> dbB(cols), dbW(cols);
    cpu::reluDropoutBackward(sums.data(), ld, dB.data(), hB.data(), rows, cols, 2.0f, dbB.data());
    cpu::reluDropoutBackward(sums.data(), ld, dW.data(), hW.data(), rows, cols, 2.0f, dbW.data());
    EXPECT_EQ(widened(dB), values(dW)) << "relu + dropout backward";
    EXPECT_EQ(dbB, dbW);
    const std::vector<std::int64_t> labels{3, 0, 36, 7};
    cpu::biasReluDropout(sums.data(), ld, zB.data(), bias.data(), rows, cols, false, 0.0f, 0);
    cpu::biasReluDropout(sums.data(), ld, zW.data(), bias.data(), rows, cols, false, 0.0f, 0);
    std::vector<float> inPlace(rows * cols); // the evaluation's bias + rounding, in place on dense rows
    for (std::int64_t r = 0; r < rows; ++r) {
        std::copy_n(sums.data() + r * ld, cols, inPlace.data() + r * cols);
    }
    cpu::addBiasRoundingToBf16(inPlace.data(), bias.data(), rows, cols);
    EXPECT_EQ(widened(zB), inPlace) << "bias + rounding in place";
    const auto ceB = cpu::softmaxCrossEntropy(zB.data(), labels.data(), rows, cols, gB.data(), dbB.data());
    const auto ceW = cpu::softmaxCrossEntropy(zW.data(), labels.data(), rows, cols, gW.data(), dbW.data());
    EXPECT_EQ(ceB.lossSum, ceW.lossSum);
    EXPECT_EQ(ceB.correct, ceW.correct);
    EXPECT_EQ(widened(gB), values(gW)) << "cross-entropy gradient";
    EXPECT_EQ(dbB, dbW);
    std::vector<std::uint8_t> bytes(rows * cols);
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<std::uint8_t>(i * 37);
    }
    cpu::bytesToBf16(bytes.data(), hB.data(), rows * cols, 1.0f / 255 / 0.35f, -0.29f / 0.35f);
    cpu::bytesToBf16(bytes.data(), hW.data(), rows * cols, 1.0f / 255 / 0.35f, -0.29f / 0.35f);
    EXPECT_EQ(widened(hB), values(hW)) << "bytes to the network's input";
}

// MKL's bf16 GEMM, as the fused step calls it (both transposes, leading dimensions wider than
// the matrices, beta 0 and 1), against float sums of the same bf16 values.
TEST(CpuKernels, MklsBf16GemmSumsInFp32) {
    if (!cpu::haveMklBf16Gemm()) {
        GTEST_SKIP() << "this LibTorch has no MKL bf16 GEMM (cblas_gemm_bf16bf16f32)";
    }
    const std::int64_t m = 7, n = 19, k = 33, pad = 5;
    const auto value = [](std::int64_t i) { return std::cos(static_cast<float>(i) * 0.37f); };
    for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
            for (const float beta : {0.0f, 1.0f}) {
                // a' is m x k: stored [m][k] or, transposed, [k][m]; b' is k x n likewise.
                const std::int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
                std::vector<cpu::Bf16> a((ta ? k : m) * lda), b((tb ? n : k) * ldb);
                std::vector<float> af(a.size()), bf(b.size());
                for (std::size_t i = 0; i < a.size(); ++i) {
                    af[i] = value(static_cast<std::int64_t>(i));
                }
                for (std::size_t i = 0; i < b.size(); ++i) {
                    bf[i] = value(static_cast<std::int64_t>(i) + 1000);
                }
                cpu::toBf16(af.data(), a.data(), static_cast<std::int64_t>(a.size()));
                cpu::toBf16(bf.data(), b.data(), static_cast<std::int64_t>(b.size()));
                cpu::toFloat(a.data(), af.data(), static_cast<std::int64_t>(a.size()));
                cpu::toFloat(b.data(), bf.data(), static_cast<std::int64_t>(b.size()));
                std::vector<float> c(m * ldc, 0.5f);
                cpu::gemmBf16F32(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
                for (std::int64_t i = 0; i < m; ++i) {
                    for (std::int64_t j = 0; j < n; ++j) {
                        double want = beta * 0.5;
                        for (std::int64_t q = 0; q < k; ++q) {
                            const float x = ta ? af[q * lda + i] : af[i * lda + q];
                            const float y = tb ? bf[j * ldb + q] : bf[q * ldb + j];
                            want += static_cast<double>(x) * y;
                        }
                        ASSERT_NEAR(c[i * ldc + j], want, 1e-4) << ta << tb << beta << " at " << i << "," << j;
                    }
                    for (std::int64_t j = n; j < ldc; ++j) {
                        ASSERT_EQ(c[i * ldc + j], 0.5f) << "wrote past the row";
                    }
                }
            }
        }
    }
}

// A worker of the fused step's rows pass sees rows [first, first + n) of the batch: the same
// mask as the whole batch's, and its share of the mean loss's gradient.
TEST(CpuKernels, ABatchsRowsGiveTheWholeBatchsResult) {
    const std::int64_t rows = 6, cols = 19, first = 4;
    std::vector<float> x(rows * cols), bias(cols, 0.05f);
    for (std::int64_t i = 0; i < rows * cols; ++i) {
        x[i] = std::cos(static_cast<float>(i) * 0.7f);
    }
    auto whole = x;
    cpu::biasReluDropout(whole.data(), bias.data(), rows, cols, true, 0.4f, 1234);
    std::vector<float> tail(x.begin() + first * cols, x.end());
    cpu::biasReluDropout(tail.data(), bias.data(), rows - first, cols, true, 0.4f, 1234, first);
    for (std::size_t i = 0; i < tail.size(); ++i) {
        EXPECT_EQ(tail[i], whole[first * cols + static_cast<std::int64_t>(i)]) << i;
    }
    std::vector<cpu::Bf16> wholeB(rows * cols), tailB((rows - first) * cols);
    cpu::toBf16(x.data(), wholeB.data(), rows * cols);
    cpu::toBf16(x.data() + first * cols, tailB.data(), (rows - first) * cols);
    cpu::biasReluDropout(wholeB.data(), bias.data(), rows, cols, false, 0.4f, 77);
    cpu::biasReluDropout(tailB.data(), bias.data(), rows - first, cols, false, 0.4f, 77, first);
    for (std::size_t i = 0; i < tailB.size(); ++i) {
        EXPECT_EQ(tailB[i].bits, wholeB[first * cols + static_cast<std::int64_t>(i)].bits) << i;
    }

    const float logits[] = {1.0f, 2.0f, 3.0f, 0.5f, 0.0f, -1.0f, 2.0f, 2.0f, 0.0f};
    const std::int64_t labels[] = {2, 0, 1};
    float d[9], dbias[3], dRows[6], dbiasRows[3];
    const auto all = cpu::softmaxCrossEntropy(logits, labels, 3, 3, d, dbias);
    const auto part = cpu::softmaxCrossEntropy(logits + 3, labels + 1, 2, 3, dRows, dbiasRows, 3);
    for (int i = 0; i < 6; ++i) {
        EXPECT_FLOAT_EQ(dRows[i], d[3 + i]) << i;
    }
    EXPECT_FLOAT_EQ(dbiasRows[0], d[3] + d[6]);
    const auto first1 = cpu::softmaxCrossEntropy(logits, labels, 1, 3, dRows, dbiasRows, 3);
    EXPECT_NEAR(first1.lossSum + part.lossSum, all.lossSum, 1e-9);
    EXPECT_EQ(first1.correct + part.correct, all.correct);
}

// Every bf16 mirror value is its weight rounded to the nearest even bf16 (the optimizers write it
// in their own loop, or by AVX-512 BF16's conversion in chunks after it: every chunk's edge is
// among the values).
namespace {
void expectMirrorIsNearestEven(const std::vector<float>& p, const std::vector<cpu::Bf16>& mirror) {
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &p[i], sizeof bits);
        const auto expected = static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
        wrong += mirror[i].bits != expected ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0) << "of " << p.size();
}
} // namespace

TEST(CpuKernels, RmspropMatchesTorchOptimsUpdateAndWritesTheMirror) {
    const std::int64_t n = 200003;
    std::vector<float> p(n), g(n), sq(n, 0.01f);
    for (std::int64_t i = 0; i < n; ++i) {
        p[i] = std::cos(static_cast<float>(i));
        g[i] = std::sin(static_cast<float>(i) * 0.5f);
    }
    auto p0 = p, sq0 = sq;
    std::vector<cpu::Bf16> mirror(n);
    cpu::rmspropStep(p.data(), g.data(), sq.data(), n, 1e-3f, 0.9f, 1e-7f, 0.01f, mirror.data());
    for (std::int64_t i = 0; i < n; i += 997) {
        const float grad = g[i] + 0.01f * p0[i];
        const float s = 0.9f * sq0[i] + 0.1f * grad * grad;
        EXPECT_NEAR(sq[i], s, 1e-6f * std::max(1.0f, s));
        EXPECT_NEAR(p[i], p0[i] - 1e-3f * grad / (std::sqrt(s) + 1e-7f), 1e-6f);
    }
    expectMirrorIsNearestEven(p, mirror);
}

// torch.optim.AdamW (torch/optim/adamw.py, not amsgrad), three steps, the gradient scaled first
// as clip_grad_norm_ scales it; computed here in double.
TEST(CpuKernels, AdamwFollowsTorchsUpdateWithClippingAndWritesTheMirror) {
    const std::int64_t n = 100003;
    std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
        p[i] = std::cos(static_cast<float>(i));
        g[i] = std::sin(static_cast<float>(i) * 0.5f);
    }
    std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
    std::vector<cpu::Bf16> mirror(n);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, scale = 0.5;
    for (int step = 1; step <= 3; ++step) {
        cpu::AdamW a;
        a.lr = static_cast<float>(lr);
        a.beta1 = static_cast<float>(b1);
        a.beta2 = static_cast<float>(b2);
        a.eps = static_cast<float>(eps);
        a.weightDecay = static_cast<float>(wd);
        a.biasCorrection1 = static_cast<float>(1 - std::pow(b1, step));
        a.biasCorrection2 = static_cast<float>(1 - std::pow(b2, step));
        a.gradScale = static_cast<float>(scale);
        cpu::adamwStep(p.data(), g.data(), m.data(), v.data(), n, a, mirror.data());
        for (std::int64_t i = 0; i < n; ++i) {
            const double grad = g[i] * scale;
            rp[i] *= 1 - lr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * grad;
            rv[i] = b2 * rv[i] + (1 - b2) * grad * grad;
            const double mHat = rm[i] / (1 - std::pow(b1, step)), vHat = rv[i] / (1 - std::pow(b2, step));
            rp[i] -= lr * mHat / (std::sqrt(vHat) + eps);
        }
    }
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::abs(p[i] - rp[i]));
    }
    EXPECT_LT(worst, 1e-5);
    expectMirrorIsNearestEven(p, mirror);
}

TEST(CpuKernels, Bf16RoundsToNearestEvenAndKeepsNaN) {
    const float in[] = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, std::numeric_limits<float>::quiet_NaN()};
    cpu::Bf16 out[5];
    cpu::toBf16(in, out, 5);
    EXPECT_EQ(out[0].bits, 0x3F80);
    EXPECT_EQ(out[1].bits, 0x3F80); // a tie: to the even neighbour
    EXPECT_EQ(out[2].bits, 0x3F82); // a tie: to the even neighbour, upwards
    EXPECT_EQ(out[3].bits, 0xC020);
    float back[5];
    cpu::toFloat(out, back, 5);
    EXPECT_EQ(back[3], -2.5f);
    EXPECT_TRUE(std::isnan(back[4]));
}

TEST(CpuKernels, SoftmaxCrossEntropyAndItsGradient) {
    const float logits[] = {1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f};
    const std::int64_t labels[] = {2, 0};
    float d[6], dbias[3];
    const auto ce = cpu::softmaxCrossEntropy(logits, labels, 2, 3, d, dbias);
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    EXPECT_NEAR(ce.lossSum, (lse - 3.0) + std::log(3.0), 1e-6);
    EXPECT_EQ(ce.correct, 2); // row 1 is a tie: argmax takes the first, its label
    EXPECT_FALSE(ce.badLabel);
    EXPECT_NEAR(d[2], (std::exp(3.0 - lse) - 1.0) / 2, 1e-6);
    EXPECT_NEAR(d[3], (1.0 / 3 - 1.0) / 2, 1e-6);
    EXPECT_NEAR(dbias[0], d[0] + d[3], 1e-6);
    const std::int64_t bad[] = {3, 0};
    EXPECT_TRUE(cpu::softmaxCrossEntropy(logits, bad, 2, 3, d, dbias).badLabel);
}

TEST(CpuKernels, BytesBecomeTheNetworksInput) {
    const std::uint8_t px[] = {0, 51, 255};
    float out[3];
    cpu::bytesToFloat(px, out, 3, 1.0f / 255, 0.0f);
    EXPECT_FLOAT_EQ(out[1], 0.2f);
    EXPECT_FLOAT_EQ(out[2], 1.0f);
}

// The engine's own parallel loops open real OpenMP regions (built with -fopenmp: without it,
// ATen's parallel_for runs its whole range on the caller), on the lane thread's team, and a
// lane's denormal flushing reaches a team that existed before it flushed.
TEST(CpuKernels, ParallelLoopsRunOnTheTeamWhichFlushesDenormals) {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "under ThreadSanitizer the engine's loops run on the calling thread (engine/CMakeLists.txt)";
#elif !defined(__SSE__)
    GTEST_SKIP() << "MXCSR is x86's";
#else
    std::thread([] {
        EXPECT_EQ(cpu::checkTeam(2).threads, 2);
        EXPECT_FALSE(cpu::checkTeam(2).allFlushDenormals);
        _mm_setcsr(_mm_getcsr() | 0x8040); // FTZ and DAZ, as at::globalContext().setFlushDenormal
        EXPECT_FALSE(cpu::checkTeam(2).allFlushDenormals) << "the worker kept its word: the test proves nothing";
        cpu::shareFpControlWithTeam(2);
        EXPECT_TRUE(cpu::checkTeam(2).allFlushDenormals);
    }).join();
#endif
}
