// imdb-bilstm's lstm=cells on a CPU: the one-pass LSTMCell step (models.h lstmCellOnePass)
// against torch::nn::LSTMCell over a loop of steps — the same hidden state and the same
// gradients of the input, the initial state and all four parameters, odd sizes included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/models.h"
#include "tensor_close.h"

using namespace devicerace::detail;
using devicerace::test::expectClose;

namespace {

struct CellRun {
    torch::Tensor h, c, dx, dh0, dc0, wIh, wHh, bIh, bHh;
};

// `steps` cell steps over x (batch, steps, input) from (h0, c0), or from zeros where `zeroState`.
CellRun run(torch::nn::LSTMCell& cell, const torch::Tensor& xIn, const torch::Tensor& h0In, const torch::Tensor& c0In,
            bool zeroState, bool onePass) {
    for (auto& p : cell->parameters()) {
        p.mutable_grad() = torch::Tensor();
    }
    auto x = xIn.clone().requires_grad_(true);
    auto h0 = h0In.clone().requires_grad_(true);
    auto c0 = c0In.clone().requires_grad_(true);
    std::optional<std::tuple<torch::Tensor, torch::Tensor>> state;
    if (!zeroState) {
        state = std::make_tuple(h0, c0);
    }
    const auto bias = cell->bias_ih + cell->bias_hh; // once per sequence, as the network's loop
    for (std::int64_t t = 0; t < x.size(1); ++t) {
        const auto xt = x.select(1, t); // a strided view, as the network's loop passes it
        state = onePass ? lstmCellOnePass(xt, state, cell->weight_ih, cell->weight_hh, bias) : cell->forward(xt, state);
    }
    const auto& [h, c] = *state;
    // Gradients that differ for every unit, through both outputs.
    ((h * torch::linspace(-1.5, 2.0, h.numel()).view(h.sizes())).sum() + (c * 0.3).sum()).backward();
    return {h.detach(),
            c.detach(),
            x.grad(),
            h0.grad(),
            c0.grad(),
            cell->weight_ih.grad(),
            cell->weight_hh.grad(),
            cell->bias_ih.grad(),
            cell->bias_hh.grad()};
}

} // namespace

TEST(OnePassCell, MatchesTorchsLstmCellLoop) {
    torch::manual_seed(7);
    torch::set_num_threads(2);
    for (const auto& [batch, steps, input, hidden] :
         {std::array<std::int64_t, 4>{5, 7, 11, 6}, {32, 12, 128, 64}, {3, 1, 2, 17}}) {
        for (const bool zeroState : {true, false}) {
            torch::nn::LSTMCell cell(input, hidden);
            {
                torch::NoGradGuard noGrad;
                for (auto& p : cell->parameters()) {
                    p.uniform_(-0.6, 0.6); // gates away from saturation: the gradients mean something
                }
            }
            const auto x = torch::randn({batch, steps, input});
            const auto h0 = torch::randn({batch, hidden}) * 0.5;
            const auto c0 = torch::randn({batch, hidden}) * 0.5;
            const auto want = run(cell, x, h0, c0, zeroState, false);
            const auto got = run(cell, x, h0, c0, zeroState, true);
            SCOPED_TRACE(testing::Message() << batch << "x" << steps << "x" << input << ", hidden " << hidden
                                            << (zeroState ? ", zero state" : ", given state"));
            expectClose(got.h, want.h, "final hidden state");
            expectClose(got.c, want.c, "final cell state");
            expectClose(got.dx, want.dx, "dx");
            expectClose(got.dh0, want.dh0, "dh0");
            expectClose(got.dc0, want.dc0, "dc0");
            devicerace::test::expectLstmParameterGradsClose(got, want);
        }
    }
}

TEST(OnePassCell, RunsWithoutAGraphInEvaluation) {
    torch::nn::LSTMCell cell(4, 3);
    torch::NoGradGuard noGrad;
    const auto x = torch::randn({2, 4});
    const auto [h, c] =
        lstmCellOnePass(x, std::nullopt, cell->weight_ih, cell->weight_hh, cell->bias_ih + cell->bias_hh);
    const auto [wantH, wantC] = cell->forward(x);
    EXPECT_FALSE(h.requires_grad());
    EXPECT_TRUE(torch::allclose(h, wantH, 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(c, wantC, 1e-5, 1e-6));
}
