// An LSTM layer over token ids on a CPU, for networks that feed it one-hot vectors (charlstm):
// what torch::nn::LSTM computes on one_hot(tokens), with the input projection as a row gather
// (one-hot × W_ih picks a column of W_ih; its gradient is a scatter-add), the gates and the cell
// update in one pass per time step and their backward in one (kernels/lstm_kernels.h), and the
// recurrent weights' gradient as one GEMM over every step. oneDNN's LSTM, which torch::nn::LSTM
// runs on a CPU, multiplies the one-hot input as a dense matrix both ways (about a third of
// charlstm's multiply-adds) and computes the input's gradient, which a token never needs.
#include <ATen/Functions.h>

#include <fmt/format.h>

#include "devicerace/errors.h"
#include "kernels/lstm_kernels.h"
#include "models/autograd_function.h"
#include "models/models.h"

namespace devicerace::detail {

namespace {

struct TokenLstmFunction : torch::autograd::Function<TokenLstmFunction> {
    // tokens (batch, steps) int64; PyTorch's LSTM parameters, gates [i, f, g, o]. -> h_T (batch, hidden).
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& tokens, const at::Tensor& wIh,
                              const at::Tensor& wHh, const at::Tensor& bIh, const at::Tensor& bHh) {
        const auto batch = tokens.size(0), steps = tokens.size(1);
        const auto hidden = wHh.size(1), vocab = wIh.size(1), width = 4 * hidden;
        const auto ids = tokens.t().contiguous(); // (steps, batch): a step's ids side by side
        const auto table = wIh.t().contiguous();  // (vocab, 4·hidden): a token's row of gate inputs
        const auto bias = (bIh + bHh).contiguous();
        const auto opts = wIh.options();
        auto gates = at::empty({steps, batch, width}, opts);
        auto cs = at::empty({steps, batch, hidden}, opts);
        auto hs = at::empty({steps, batch, hidden}, opts);
        const auto recurrent = wHh.t(); // (hidden, 4·hidden)
        for (std::int64_t t = 0; t < steps; ++t) {
            auto g = gates[t];
            if (!cpu::gatherRowsPlusBias(f32(table), vocab, ids.data_ptr<std::int64_t>() + t * batch, 1, f32(bias),
                                         f32(g), batch, width)) {
                throw Error(fmt::format("a token outside the LSTM's {} inputs", vocab));
            }
            if (t > 0) {
                g.addmm_(hs[t - 1], recurrent);
            }
            cpu::lstmStepForward(f32(g), t > 0 ? f32(cs[t - 1]) : nullptr, f32(cs[t]), f32(hs[t]), batch, hidden);
        }
        ctx->save_for_backward({ids, wHh, gates, cs, hs});
        ctx->saved_data["vocab"] = vocab;
        return hs[steps - 1].clone();
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const auto &ids = saved[0], &wHh = saved[1], &gates = saved[2], &cs = saved[3], &hs = saved[4];
        const auto vocab = ctx->saved_data["vocab"].toInt();
        const auto steps = gates.size(0), batch = gates.size(1), width = gates.size(2), hidden = width / 4;
        auto dh = grads[0].contiguous().clone();
        auto dc = at::zeros({batch, hidden}, dh.options());
        auto dGates = at::empty_like(gates);
        for (std::int64_t t = steps; t-- > 0;) {
            cpu::lstmStepBackward(f32(gates[t]), t > 0 ? f32(cs[t - 1]) : nullptr, f32(cs[t]), f32(dh), f32(dc),
                                  f32(dGates[t]), batch, hidden);
            if (t > 0) {
                at::mm_out(dh, dGates[t], wHh);
            }
        }
        // h_{t-1} multiplies W_hh at step t (h_{-1} = 0): one GEMM over steps 1..T-1.
        const auto dWhh = steps > 1 ? at::mm(dGates.narrow(0, 1, steps - 1).reshape({-1, width}).t(),
                                             hs.narrow(0, 0, steps - 1).reshape({-1, hidden}))
                                    : at::zeros_like(wHh);
        const auto dBias = dGates.sum(at::IntArrayRef{0, 1});
        auto dTable = at::zeros({vocab, width}, dGates.options());
        cpu::scatterAddRows(f32(dGates), ids.data_ptr<std::int64_t>(), 1, f32(dTable), steps * batch, width);
        return {at::Tensor(), dTable.t().contiguous(), dWhh, dBias, dBias.clone()};
    }
};

} // namespace

at::Tensor tokenLstm(const at::Tensor& tokens, const at::Tensor& wIh, const at::Tensor& wHh, const at::Tensor& bIh,
                     const at::Tensor& bHh) {
    if (tokens.dim() != 2 || tokens.size(1) == 0 || tokens.scalar_type() != at::kLong) {
        throw Error("the LSTM takes a (batch, steps) tensor of int64 token ids");
    }
    countFastPath();
    return TokenLstmFunction::apply(tokens, wIh, wHh, bIh, bHh);
}

} // namespace devicerace::detail
