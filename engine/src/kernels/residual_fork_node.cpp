// A residual block's input as two tensors, one for the block's first convolution and one for its
// shortcut, so that their two gradients reach one node and are added by the engine's loop
// (kernels/norm_kernels.h sumGradients) instead of autograd's accumulation (ATen's bf16 add:
// AVX2 code widening and rounding each value, 5-6% of a bf16 CIFAR ResNet step on an AVX-512
// CPU). See kernels/autograd_nodes.h.
#include <ATen/Functions.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include "kernels/autograd_nodes.h"
#include "kernels/fast_paths.h"
#include "kernels/norm_kernels.h"

namespace devicerace::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const cpu::Bf16* bf16Data(const at::Tensor& t) {
    return reinterpret_cast<const cpu::Bf16*>(t.const_data_ptr<at::BFloat16>());
}

struct ResidualFork : torch::autograd::Function<ResidualFork> {
    static variable_list forward(AutogradContext*, const at::Tensor& x) { return {x, x}; }
    static variable_list backward(AutogradContext*, variable_list grads) {
        const auto& a = grads[0];
        const auto& b = grads[1];
        if (!a.defined() || !b.defined()) {
            return {a.defined() ? a : b};
        }
        const auto format = a.suggest_memory_format();
        if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || !a.is_contiguous(format) ||
            !b.is_contiguous(format) || a.sizes() != b.sizes() || a.strides() != b.strides()) {
            return {a + b};
        }
        auto sum = at::empty_like(a, format);
        cpu::sumGradients(bf16Data(a), bf16Data(b), reinterpret_cast<cpu::Bf16*>(sum.data_ptr<at::BFloat16>()),
                          a.numel());
        return {sum};
    }
};

} // namespace

bool residualForkFits(const at::Tensor& x) {
    return torch::GradMode::is_enabled() && x.requires_grad() && x.is_cpu() && x.scalar_type() == at::kBFloat16;
}

std::pair<at::Tensor, at::Tensor> residualForkNode(const at::Tensor& x) {
    countFastPath();
    auto out = ResidualFork::apply(x);
    return {out[0], out[1]};
}

} // namespace devicerace::detail
