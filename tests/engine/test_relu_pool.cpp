// The CPU's one-pass relu + 2x2 max pool + dropout (models.h reluMaxPoolDropout) against the three
// ATen ops it replaces: the same outputs and input gradients, bit for bit, in fp32 and bf16,
// NCHW and channels_last (either output layout), with and without dropout, odd sizes included,
// and the same draws from the lane's generator.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/models.h"

using namespace devicerace::detail;

namespace {

struct Result {
    torch::Tensor out, grad;
    std::uint64_t nextDraw;
};

Result run(const torch::Tensor& input, double p, bool fused, bool flattenNext) {
    auto gen = at::detail::createCPUGenerator(11);
    auto x =
        input.detach().clone(input.is_contiguous() ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast);
    x.requires_grad_(true);
    auto out = reluMaxPoolDropout(x, p, true, gen, fused, true, flattenNext);
    // A gradient that differs everywhere, in the flattened (NCHW) order.
    auto weight = torch::linspace(-1.0, 2.0, out.numel()).view(out.sizes()).to(out.scalar_type());
    (out.contiguous() * weight).sum().backward();
    return {out.contiguous(), x.grad().contiguous(), dropoutSeed(gen)};
}

} // namespace

TEST(ReluMaxPool, MatchesReluPoolAndDropoutBitForBit) {
    auto gen = at::detail::createCPUGenerator(3);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
        for (const bool nhwc : {false, true}) {
            for (const double p : {0.0, 0.25}) {
                for (const bool flattenNext : {false, true}) {
                    for (const auto& shape : {std::vector<std::int64_t>{3, 5, 8, 6}, {2, 16, 7, 9}}) {
                        auto x = torch::randn(shape, gen).to(dtype);
                        // Ties: repeated values, and windows all <= 0.
                        x.select(1, 0).fill_(0.5);
                        x.select(1, 1).clamp_max_(0.0);
                        if (nhwc) {
                            x = x.contiguous(at::MemoryFormat::ChannelsLast);
                        }
                        const auto plain = run(x, p, false, flattenNext);
                        const auto fused = run(x, p, true, flattenNext);
                        const auto what = ::testing::Message()
                                          << (dtype == torch::kFloat ? "fp32" : "bf16") << (nhwc ? " nhwc" : " nchw")
                                          << " p " << p << (flattenNext ? " nchw out" : "") << " " << shape[2] << "x"
                                          << shape[3];
                        EXPECT_TRUE(torch::equal(plain.out, fused.out)) << what;
                        // Dropped and zero units give +0 here, -0 (0 x a negative gradient) there.
                        EXPECT_TRUE(torch::equal(plain.grad + 0.0, fused.grad + 0.0)) << what;
                        EXPECT_EQ(plain.nextDraw, fused.nextDraw) << what;
                        EXPECT_GT(fused.grad.abs().sum().item<double>(), 0.0) << what;
                    }
                }
            }
        }
    }
}

// Where it does not apply (fused=false, or float64), the plain ops run; fused, one autograd node.
TEST(ReluMaxPool, FallsBackToThePlainOps) {
    auto gen = at::detail::createCPUGenerator(4);
    const auto nodeOf = [&](const torch::Tensor& x, bool fused) {
        auto in = x.clone().requires_grad_(true);
        return reluMaxPoolDropout(in, 0.25, true, gen, fused, true).grad_fn()->name();
    };
    const auto x = torch::randn({2, 3, 4, 4}, gen);
    EXPECT_NE(nodeOf(x, true).find("ReluPoolDropout"), std::string::npos) << nodeOf(x, true);
    EXPECT_EQ(nodeOf(x, false).find("ReluPoolDropout"), std::string::npos) << nodeOf(x, false);
    EXPECT_EQ(nodeOf(x.to(torch::kDouble), true).find("ReluPoolDropout"), std::string::npos);
}
