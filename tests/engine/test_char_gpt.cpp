// char-gpt's network: its parameter count by formula, causal masking, the tied head, and the
// cosine schedule (engine internals: models/models.h).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "models/models.h"

using namespace devicerace;
using namespace devicerace::detail;

namespace {

std::int64_t countOf(const std::string& workload, int vocabulary) {
    ModelOptions o;
    o.vocabulary = vocabulary;
    auto net = workloadImpl(workload).makeModel(at::detail::createCPUGenerator(1), o);
    std::int64_t n = 0;
    for (const auto& p : net->parameters()) {
        n += p.numel();
    }
    return n;
}

} // namespace

TEST(CharGpt, ParameterCountsFollowTheFormula) {
    for (const int v : {65, 113}) {
        EXPECT_EQ(countOf("char-gpt", v), gptParameterCount(4, 128, 64, v)) << v;
        EXPECT_EQ(countOf("char-gpt-6l", v), gptParameterCount(6, 384, 256, v)) << v;
    }
    // nanoGPT prints "number of parameters: 10.65M" for train_shakespeare_char: its train.py
    // defaults to bias=False and the count leaves out the position embedding. With biases on
    // (the GPT-2 layout this workload follows) the same count is 10.67M.
    const auto withBiases = gptParameterCount(6, 384, 256, 65);
    const auto biases = 6 * (3 * 384 + 384 + 4 * 384 + 384 + 2 * 384) + 384; // Linear and LayerNorm biases
    EXPECT_EQ(withBiases - 256 * 384 - biases, 10646784);                    // nanoGPT's 10.65M
    EXPECT_EQ(findWorkload("char-gpt").parameters, gptParameterCount(4, 128, 64, 65));
    EXPECT_EQ(findWorkload("char-gpt").tokensPerSample, 64);
    EXPECT_EQ(findWorkload("char-gpt").inputShape, (std::vector<std::int64_t>{65}));
}

TEST(CharGpt, ATokenNeverChangesTheLogitsBeforeIt) {
    torch::NoGradGuard noGrad;
    ModelOptions o;
    o.vocabulary = 50;
    auto net = workloadImpl("char-gpt").makeModel(at::detail::createCPUGenerator(3), o);
    net->eval();
    auto gen = at::detail::createCPUGenerator(4);
    auto x = torch::randint(0, 50, {2, 64}, gen, torch::kLong);
    const auto before = net->forward(x);
    ASSERT_EQ(before.sizes(), (std::vector<std::int64_t>{2, 64, 50}));
    for (const std::int64_t t : {0, 17, 62}) {
        auto y = x.clone();
        y.index_put_({torch::indexing::Slice(), t + 1}, (x.index({torch::indexing::Slice(), t + 1}) + 7) % 50);
        const auto after = net->forward(y);
        // Positions 0..t see only tokens 0..t: bit for bit the same.
        EXPECT_TRUE(torch::equal(after.narrow(1, 0, t + 1), before.narrow(1, 0, t + 1))) << "t = " << t;
        // Position t+1 sees the change.
        EXPECT_FALSE(torch::allclose(after.select(1, t + 1), before.select(1, t + 1))) << "t = " << t;
    }
}

TEST(CharGpt, TheOutputHeadIsTheTokenEmbedding) {
    ModelOptions o;
    o.vocabulary = 65;
    auto net = workloadImpl("char-gpt").makeModel(at::detail::createCPUGenerator(5), o);
    torch::Tensor wte;
    for (const auto& p : net->named_parameters()) {
        if (p.key() == "wte.weight") {
            wte = p.value();
        }
    }
    ASSERT_TRUE(wte.defined());
    auto x = torch::tensor({{1, 2, 3}}, torch::kLong);
    net->forward(x).sum().backward();
    // The head's gradient lands in the embedding: rows of tokens never seen still get one.
    EXPECT_GT(wte.grad()[40].abs().sum().item<double>(), 0);
    // nanoGPT's initialisation: N(0, 0.02).
    EXPECT_NEAR(wte.std().item<double>(), 0.02, 0.002);
}

TEST(CharGpt, CosineScheduleWarmsUpThenDecaysToOneTenth) {
    const std::int64_t total = 2000; // nanoGPT's CPU run: 100 warm-up iterations, decay to 2,000
    EXPECT_NEAR(scheduleFactor("cosine", 0, total), 1.0 / 101, 1e-12);
    EXPECT_NEAR(scheduleFactor("cosine", 99, total), 100.0 / 101, 1e-12);
    EXPECT_NEAR(scheduleFactor("cosine", 100, total), 1.0, 1e-12);
    EXPECT_NEAR(scheduleFactor("cosine", 1050, total), 0.55, 1e-12); // half way: (1 + 0.1) / 2
    EXPECT_NEAR(scheduleFactor("cosine", total, total), 0.1, 1e-12);
    for (std::int64_t s = 101; s < total; s += 97) {
        EXPECT_LT(scheduleFactor("cosine", s, total), scheduleFactor("cosine", s - 1, total));
    }
}

// causalAttention(q, k, v) as a bf16 CPU lane runs it: under bf16 autocast.
static torch::Tensor attendUnderBf16Autocast(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    auto y = causalAttention(q, k, v);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    return y;
}

// A bf16 CPU lane attends in fp32 (PyTorch's CPU flash attention is slower in bf16): under bf16
// autocast the attention of bf16 queries, keys and values is the fp32 kernel's result on the same
// values, bit for bit, and its gradients reach the bf16 inputs in bf16. Without autocast, and
// under fp32, the inputs' own precision is kept.
TEST(CharGpt, Bf16CpuLanesAttendInFp32) {
    auto gen = at::detail::createCPUGenerator(5);
    const auto make = [&] { return torch::randn({2, 4, 16, 32}, gen).to(torch::kBFloat16).requires_grad_(true); };
    auto q = make(), k = make(), v = make();
    const auto reference = at::scaled_dot_product_attention(q.detach().to(torch::kFloat), k.detach().to(torch::kFloat),
                                                            v.detach().to(torch::kFloat), {}, 0.0, true);
    const auto y = attendUnderBf16Autocast(q, k, v);
    EXPECT_EQ(y.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(y, reference));
    y.sum().backward();
    ASSERT_TRUE(q.grad().defined());
    EXPECT_EQ(q.grad().scalar_type(), torch::kBFloat16);
    EXPECT_GT(q.grad().abs().sum().item<float>(), 0.0f);
    // No autocast: the bf16 kernel, in bf16.
    EXPECT_EQ(causalAttention(q.detach(), k.detach(), v.detach()).scalar_type(), torch::kBFloat16);
}

// Long sequences with heads of 64 (char-gpt-6l's 256 x 64) attend in bf16 under bf16 autocast: there
// the bf16 kernel is faster than the fp32 one with the casts. Short sequences or heads of 32 do not.
TEST(CharGpt, Bf16CpuLanesAttendInBf16WhereThatKernelIsFaster) {
    EXPECT_TRUE(bf16AttentionPays(256, 64));
    EXPECT_TRUE(bf16AttentionPays(256, 96));
    EXPECT_FALSE(bf16AttentionPays(64, 64));  // char-gpt's context with wider heads
    EXPECT_FALSE(bf16AttentionPays(64, 32));  // char-gpt
    EXPECT_FALSE(bf16AttentionPays(256, 32)); // long, but heads of 32
    auto gen = at::detail::createCPUGenerator(6);
    const auto make = [&] { return torch::randn({1, 2, 256, 64}, gen).to(torch::kBFloat16).requires_grad_(true); };
    auto q = make(), k = make(), v = make();
    const auto reference = at::scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), {}, 0.0, true);
    const auto y = attendUnderBf16Autocast(q, k, v);
    EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(y, reference));
    y.to(torch::kFloat).sum().backward();
    ASSERT_TRUE(q.grad().defined());
    EXPECT_EQ(q.grad().scalar_type(), torch::kBFloat16);
}
