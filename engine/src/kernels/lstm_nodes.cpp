// The LSTM's two one-pass autograd nodes on a CPU in fp32 (kernels/autograd_nodes.h).
//
// tokenLstm, an LSTM layer over token ids on a CPU, for networks that feed it one-hot vectors (charlstm):
// what torch::nn::LSTM computes on one_hot(tokens), with the input projection as a row gather
// (one-hot × W_ih picks a column of W_ih; its gradient is a scatter-add), the gates and the cell
// update in one pass per time step and their backward in one (kernels/lstm_kernels.h), and the
// recurrent weights' gradient as one GEMM over every step. oneDNN's LSTM, which torch::nn::LSTM
// runs on a CPU, multiplies the one-hot input as a dense matrix both ways (about a third of
// charlstm's multiply-adds) and computes the input's gradient, which a token never needs.
//
// lstmCellOnePass, one LSTMCell step, the gates in one pass (imdb-bilstm's lstm=cells): what
// torch::nn::LSTMCell computes — x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh, then the four gates and the
// cell update — with the two GEMMs into one buffer and the gates, cell and hidden state in one
// pass each way (kernels/lstm_kernels.h). ATen's CPU lstm_cell runs the gate arithmetic as ~10
// elementwise ops forward and ~15 backward, each an autograd node over a few thousand floats;
// at imdb-bilstm's batch 32 × hidden 64 those nodes, not the GEMMs, were most of a cell step.
// On CUDA ATen has such a kernel (_thnn_fused_lstm_cell); the loop of cells stays a loop.
#include <ATen/Functions.h>
#include <fmt/format.h>
#include <torch/autograd.h>

#include "devicerace/errors.h"
#include "kernels/autograd_nodes.h"
#include "kernels/fast_paths.h"
#include "kernels/lstm_kernels.h"

namespace devicerace::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The float data of an fp32 tensor (throws for another dtype).
float* f32(const at::Tensor& t) { return t.data_ptr<float>(); }

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

struct LstmCellFunction : torch::autograd::Function<LstmCellFunction> {
    // x (batch, input); h, c (batch, hidden), both empty (no elements) for a zero state; PyTorch's
    // LSTMCell weights, gates [i, f, g, o], and its two biases' sum. -> {h', c'}.
    static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h, const at::Tensor& c,
                                 const at::Tensor& wIh, const at::Tensor& wHh, const at::Tensor& bias) {
        const auto batch = x.size(0), hidden = wHh.size(1);
        auto gates = at::addmm(bias, x, wIh.t()); // (batch, 4·hidden)
        const bool zeroState = h.numel() == 0;
        if (!zeroState) {
            gates.addmm_(h, wHh.t());
        }
        const auto cPrev = zeroState ? c : c.contiguous();
        auto cNext = at::empty({batch, hidden}, x.options());
        auto hNext = at::empty({batch, hidden}, x.options());
        cpu::lstmStepForward(f32(gates), zeroState ? nullptr : f32(cPrev), f32(cNext), f32(hNext), batch, hidden);
        ctx->save_for_backward({x, h, cPrev, wIh, wHh, gates, cNext});
        return {hNext, cNext};
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const auto &x = saved[0], &h = saved[1], &cPrev = saved[2], &wIh = saved[3], &wHh = saved[4], &gates = saved[5],
                   &c = saved[6];
        const auto batch = c.size(0), hidden = c.size(1);
        const bool zeroState = h.numel() == 0;
        // An output nobody used has no gradient: zero (c' of the last step, h' of a cell whose
        // hidden state only fed the next step's cell state).
        const auto dh = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(c);
        auto dc = grads[1].defined() ? grads[1].contiguous().clone() : at::zeros_like(c); // in: dc', out: dc
        auto dGates = at::empty_like(gates);
        cpu::lstmStepBackward(f32(gates), zeroState ? nullptr : f32(cPrev), f32(c), f32(dh), f32(dc), f32(dGates),
                              batch, hidden);
        const auto dx = ctx->needs_input_grad(0) ? at::mm(dGates, wIh) : at::Tensor();
        const auto dhPrev = zeroState ? at::Tensor() : at::mm(dGates, wHh);
        // A zero state still gives W_hh a (zero) gradient, as ATen's cell does: an optimizer
        // skips a parameter without one (a one-step loop would leave Adam's moments untouched).
        const auto dWhh = zeroState ? at::zeros_like(wHh) : at::mm(dGates.t(), h);
        return {dx, dhPrev, zeroState ? at::Tensor() : dc, at::mm(dGates.t(), x), dWhh, dGates.sum(0)};
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

std::tuple<at::Tensor, at::Tensor> lstmCellOnePass(const at::Tensor& x,
                                                   const std::optional<std::tuple<at::Tensor, at::Tensor>>& state,
                                                   const at::Tensor& wIh, const at::Tensor& wHh,
                                                   const at::Tensor& bias) {
    countFastPath();
    // Function::apply takes no undefined tensors: an empty one stands for the zero state.
    const auto none = state ? at::Tensor() : at::empty({0}, x.options());
    const auto h = state ? std::get<0>(*state) : none;
    const auto c = state ? std::get<1>(*state) : none;
    auto out = LstmCellFunction::apply(x, h, c, wIh, wHh, bias);
    return {out[0], out[1]};
}

} // namespace devicerace::detail
