// charlstm's LSTM over token ids on a CPU (models.h tokenLstm, kernels/lstm_kernels.h) against
// torch::nn::LSTM over the one-hot vectors it replaces: the same final hidden state and the same
// gradients of all four parameters, odd sizes included; its exp, sigmoid and tanh against the C
// library's; a token outside the vocabulary refused with a message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "devicerace/errors.h"
#include "kernels/lstm_kernels.h"
#include "models/models.h"
#include "tensor_close.h"

using namespace devicerace;
using namespace devicerace::detail;
using devicerace::test::expectClose;

namespace {

struct Grads {
    torch::Tensor h, wIh, wHh, bIh, bHh;
};

Grads run(torch::nn::LSTM& lstm, const torch::Tensor& tokens, std::int64_t vocab, bool viaTokens) {
    for (auto& p : lstm->parameters()) {
        p.mutable_grad() = torch::Tensor();
    }
    auto params = lstm->named_parameters(false);
    torch::Tensor h;
    if (viaTokens) {
        h = tokenLstm(tokens, params["weight_ih_l0"], params["weight_hh_l0"], params["bias_ih_l0"],
                      params["bias_hh_l0"]);
    } else {
        auto out = lstm->forward(torch::one_hot(tokens, vocab).to(torch::kFloat32));
        h = std::get<0>(std::get<1>(out))[0];
    }
    // A gradient that differs for every unit.
    (h * torch::linspace(-1.5, 2.0, h.numel()).view(h.sizes())).sum().backward();
    return {h.detach(), params["weight_ih_l0"].grad(), params["weight_hh_l0"].grad(), params["bias_ih_l0"].grad(),
            params["bias_hh_l0"].grad()};
}

} // namespace

TEST(TokenLstm, MatchesTorchsLstmOverOneHotInputs) {
    torch::manual_seed(5);
    torch::set_num_threads(2);
    for (const auto& [batch, steps, vocab, hidden] :
         {std::array<std::int64_t, 4>{5, 7, 11, 6}, {33, 12, 60, 40}, {8, 1, 3, 17}}) {
        torch::nn::LSTM lstm(torch::nn::LSTMOptions(vocab, hidden).batch_first(true));
        {
            torch::NoGradGuard noGrad;
            for (auto& p : lstm->parameters()) {
                p.uniform_(-0.6, 0.6); // gates away from saturation: the gradients mean something
            }
        }
        const auto tokens = torch::randint(vocab, {batch, steps}, torch::kLong);
        const auto want = run(lstm, tokens, vocab, false);
        const auto got = run(lstm, tokens, vocab, true);
        SCOPED_TRACE(testing::Message() << batch << "x" << steps << " tokens of " << vocab << ", hidden " << hidden);
        expectClose(got.h, want.h, "final hidden state");
        devicerace::test::expectLstmParameterGradsClose(got, want);
    }
}

TEST(TokenLstm, RefusesATokenOutsideItsInputs) {
    torch::nn::LSTM lstm(torch::nn::LSTMOptions(4, 3).batch_first(true));
    auto p = lstm->named_parameters(false);
    const auto tokens = torch::tensor({0, 1, 4}, torch::kLong).view({1, 3});
    try {
        tokenLstm(tokens, p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"]);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "a token outside the LSTM's 4 inputs");
    }
    EXPECT_THROW(
        tokenLstm(tokens.to(torch::kInt), p["weight_ih_l0"], p["weight_hh_l0"], p["bias_ih_l0"], p["bias_hh_l0"]),
        Error);
}

TEST(TokenLstm, ExpSigmoidAndTanhMatchTheCLibrary) {
    double worstExp = 0, worstSigmoid = 0, worstTanh = 0;
    for (float x = -86.0f; x <= 86.0f; x += 0.0137f) {
        worstExp = std::max(worstExp, std::abs(cpu::lstmExp(x) / std::exp(static_cast<double>(x)) - 1.0));
    }
    for (float x = -30.0f; x <= 30.0f; x += 0.00071f) {
        worstSigmoid =
            std::max(worstSigmoid, std::abs(cpu::lstmSigmoid(x) - 1.0 / (1.0 + std::exp(-static_cast<double>(x)))));
        worstTanh = std::max(worstTanh, std::abs(cpu::lstmTanh(x) - std::tanh(static_cast<double>(x))));
    }
    EXPECT_LT(worstExp, 3e-7);
    EXPECT_LT(worstSigmoid, 2e-7);
    EXPECT_LT(worstTanh, 3e-7);
    // Saturation, not overflow or NaN, far outside.
    EXPECT_LT(cpu::lstmSigmoid(-1000.0f), 1e-37f);
    EXPECT_EQ(cpu::lstmSigmoid(1000.0f), 1.0f);
    EXPECT_EQ(cpu::lstmTanh(1000.0f), 1.0f);
    EXPECT_EQ(cpu::lstmTanh(-1000.0f), -1.0f);
    std::printf("worst: exp %.2e (relative), sigmoid %.2e, tanh %.2e\n", worstExp, worstSigmoid, worstTanh);
}
