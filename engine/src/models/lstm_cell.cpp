// One LSTMCell step on a CPU in fp32, the gates in one pass (imdb-bilstm's lstm=cells): what
// torch::nn::LSTMCell computes — x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh, then the four gates and the
// cell update — with the two GEMMs into one buffer and the gates, cell and hidden state in one
// pass each way (kernels/lstm_kernels.h). ATen's CPU lstm_cell runs the gate arithmetic as ~10
// elementwise ops forward and ~15 backward, each an autograd node over a few thousand floats;
// at imdb-bilstm's batch 32 × hidden 64 those nodes, not the GEMMs, were most of a cell step.
// On CUDA ATen has such a kernel (_thnn_fused_lstm_cell); the loop of cells stays a loop.
#include <ATen/Functions.h>

#include "kernels/lstm_kernels.h"
#include "models/autograd_function.h"
#include "models/models.h"

namespace devicerace::detail {

namespace {

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
