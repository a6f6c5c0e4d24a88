// The engine's GPT and attention loops under AddressSanitizer + UndefinedBehaviorSanitizer, alone:
// built by tests/sanitizers/sanitize_kernels.sh (seconds, where the full ASan build of the engine
// takes 13–45 minutes and CI skips it on slow machines). Odd shapes on purpose: 1–512 columns and
// 1–64 keys reach every vector body's tail, every row tile's remainder and the attention tiles of
// every ISA this CPU runs, and the ISAs' results are compared (the generic tiles are built in
// AVX-512's shape here, so that shape's logic is checked on any CPU). Exits non-zero on a
// non-finite or disagreeing result; the sanitizers abort on the rest.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/attention_kernels.h"
#include "kernels/gpt_kernels.h"

using namespace devicerace::detail::cpu;

namespace {

int failures = 0;

void expectFinite(const std::vector<float>& v, const char* what, long a, long b) {
    for (float x : v) {
        if (!std::isfinite(x)) {
            std::fprintf(stderr, "%s (%ld, %ld): a non-finite value\n", what, a, b);
            ++failures;
            return;
        }
    }
}

// Within 1e-4 of the largest |expected| (the ISAs' tiles sum in different orders).
void expectClose(const std::vector<float>& got, const std::vector<float>& expected, const char* what, long a, long b) {
    float largest = 0, worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        largest = std::max(largest, std::abs(expected[i]));
        worst = std::max(worst, std::abs(got[i] - expected[i]));
    }
    if (!(worst <= 1e-4f * std::max(largest, 1.0f))) {
        std::fprintf(stderr, "%s (%ld, %ld): off by %g (largest %g)\n", what, a, b, worst, largest);
        ++failures;
    }
}

} // namespace

int main() {
    std::mt19937 gen(3);
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& v) {
        for (auto& x : v) {
            x = normal(gen);
        }
    };
    for (long cols : {1L, 7L, 16L, 63L, 64L, 65L, 128L, 203L, 512L}) {
        for (long rows : {1L, 3L, 17L}) {
            const long n = rows * cols;
            std::vector<float> x(n), bias(cols), out(n), mean(rows), rstd(rows), gamma(cols), beta(cols), dx(n);
            std::vector<float> dlogits(n), sums(cols);
            std::vector<Bf16> outB(n);
            fill(x);
            fill(bias);
            fill(gamma);
            fill(beta);
            auto x2 = x;
            biasGelu(x.data(), bias.data(), rows, cols, out.data());
            biasGelu(x2.data(), bias.data(), rows, cols, outB.data());
            layerNormRows(out.data(), rows, cols, gamma.data(), beta.data(), dx.data(), mean.data(), rstd.data());
            layerNormRows(out.data(), rows, cols, gamma.data(), beta.data(), outB.data(), mean.data(), rstd.data());
            layerNormBackwardRows(x.data(), out.data(), mean.data(), rstd.data(), gamma.data(), rows, cols, dx.data());
            columnSums(dx.data(), rows, cols, sums.data(), outB.data());
            addBias(dx.data(), bias.data(), rows, cols);
            std::vector<std::int64_t> labels(rows);
            for (long r = 0; r < rows; ++r) {
                labels[r] = r % cols;
            }
            const auto ce = tokenCrossEntropy(out.data(), labels.data(), rows, cols, dlogits.data(), rows);
            expectFinite(out, "biasGelu", rows, cols);
            expectFinite(dx, "layer norm backward + bias", rows, cols);
            expectFinite(dlogits, "cross-entropy's gradient", rows, cols);
            if (!std::isfinite(ce.lossSum) || ce.badLabel) {
                std::fprintf(stderr, "cross-entropy (%ld, %ld): loss %g\n", rows, cols, ce.lossSum);
                ++failures;
            }
        }
    }
    for (long seq : {1L, 15L, 23L, 40L, 64L, 100L}) {
        const long mats = 3;
        std::vector<float> scores(mats * seq * seq), grad(mats * seq * seq);
        fill(scores);
        fill(grad);
        causalSoftmax(scores.data(), mats, seq, 0.3f);
        causalSoftmaxBackward(scores.data(), grad.data(), mats, seq, 0.3f);
        expectFinite(grad, "causal softmax backward", mats, seq);
        for (long head : {16L, 32L, 48L, 64L}) {
            const long batch = 2, heads = 2, width = heads * head;
            const AttentionShape shape{batch, heads, seq, head, 3 * width, width};
            std::vector<float> qkv(batch * seq * 3 * width), y(batch * seq * width), dy(batch * seq * width);
            std::vector<float> p(batch * heads * seq * attentionRowStride(seq)), dqkv(qkv.size());
            fill(qkv);
            fill(dy);
            std::vector<float> firstY, firstDqkv;
            for (TileIsa isa : tileIsas()) {
                causalAttentionForward(shape, qkv.data(), qkv.data() + width, qkv.data() + 2 * width, 0.25f, p.data(),
                                       y.data(), isa);
                causalAttentionBackward(shape, qkv.data(), qkv.data() + width, qkv.data() + 2 * width, p.data(),
                                        dy.data(), 0.25f, dqkv.data(), dqkv.data() + width, dqkv.data() + 2 * width,
                                        isa);
                expectFinite(y, "attention tiles forward", seq, head);
                expectFinite(dqkv, "attention tiles backward", seq, head);
                if (firstY.empty()) {
                    firstY = y;
                    firstDqkv = dqkv;
                } else { // the generic tiles here have AVX-512's shape (sanitize_kernels.sh)
                    expectClose(y, firstY, "attention tiles forward, ISA against ISA", seq, head);
                    expectClose(dqkv, firstDqkv, "attention tiles backward, ISA against ISA", seq, head);
                }
            }
        }
    }
    if (failures == 0) {
        std::printf("the GPT and attention loops ran clean under the sanitizers\n");
    }
    return failures == 0 ? 0 : 1;
}
