// A residual block's input as two tensors, one for the block's first convolution and one for its
// shortcut (x itself, or an option-A shortcut: every stride-th pixel, channels zero-padded), so
// that their two gradients reach one node and are added by the engine's loop (kernels/norm_kernels.h
// sumGradients, sumShortcutGradients) instead of autograd's accumulation (ATen's bf16 add: AVX2
// code widening and rounding each value, 5-6% of a bf16 CIFAR ResNet step on an AVX-512 CPU; and
// for a strided shortcut two zero-filled NCHW gradients from slice's backward, added across
// layouts). See kernels/autograd_nodes.h.
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

// The option-A shortcut of x (channels_last): every stride-th pixel, `pad` zero channels around
// x's (pad / 2 before).
at::Tensor shortcutOf(const at::Tensor& x, std::int64_t stride, std::int64_t pad) {
    const auto h = (x.size(2) + stride - 1) / stride, w = (x.size(3) + stride - 1) / stride;
    auto out = at::zeros({x.size(0), x.size(1) + pad, h, w}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
    out.narrow(1, pad / 2, x.size(1)).copy_(x.slice(2, 0, x.size(2), stride).slice(3, 0, x.size(3), stride));
    return out;
}

struct ResidualFork : torch::autograd::Function<ResidualFork> {
    static variable_list forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t stride, std::int64_t pad) {
        ctx->saved_data["stride"] = stride;
        ctx->saved_data["pad"] = pad;
        ctx->saved_data["sizes"] = x.sizes().vec();
        if (stride == 1 && pad == 0) {
            return {x, x};
        }
        return {x, shortcutOf(x, stride, pad)};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto stride = ctx->saved_data["stride"].toInt(), pad = ctx->saved_data["pad"].toInt();
        const auto& a = grads[0];
        const auto& b = grads[1];
        if (stride != 1 || pad != 0) {
            return {shortcutBackward(a, b, ctx->saved_data["sizes"].toIntVector(), stride, pad), {}, {}};
        }
        if (!a.defined() || !b.defined()) {
            return {a.defined() ? a : b, {}, {}};
        }
        const auto format = a.suggest_memory_format();
        if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || !a.is_contiguous(format) ||
            !b.is_contiguous(format) || a.sizes() != b.sizes() || a.strides() != b.strides()) {
            return {a + b, {}, {}};
        }
        auto sum = at::empty_like(a, format);
        cpu::sumGradients(bf16Data(a), bf16Data(b), reinterpret_cast<cpu::Bf16*>(sum.data_ptr<at::BFloat16>()),
                          a.numel());
        return {sum, {}, {}};
    }

    // x's gradient from its convolution's (a) and its option-A shortcut's (b); either may be undefined.
    static at::Tensor shortcutBackward(const at::Tensor& a, const at::Tensor& b, const std::vector<std::int64_t>& sizes,
                                       std::int64_t stride, std::int64_t pad) {
        if (!b.defined()) {
            return a;
        }
        const auto fromB = [&] {
            const auto part = b.narrow(1, pad / 2, sizes[1]);
            auto dx = at::zeros(sizes, b.options().memory_format(at::MemoryFormat::ChannelsLast));
            dx.slice(2, 0, sizes[2], stride).slice(3, 0, sizes[3], stride).copy_(part);
            return dx;
        };
        if (!a.defined()) {
            return fromB();
        }
        const auto cl = at::MemoryFormat::ChannelsLast;
        if (a.scalar_type() != at::kBFloat16 || b.scalar_type() != at::kBFloat16 || !a.is_contiguous(cl) ||
            !b.is_contiguous(cl)) {
            return a + fromB();
        }
        auto sum = at::empty_like(a, cl);
        cpu::sumShortcutGradients(bf16Data(a), bf16Data(b), reinterpret_cast<cpu::Bf16*>(sum.data_ptr<at::BFloat16>()),
                                  {sizes[0], sizes[2], sizes[3], sizes[1], stride, b.size(1), pad / 2});
        return sum;
    }
};

} // namespace

bool residualForkFits(const at::Tensor& x) {
    return torch::GradMode::is_enabled() && x.requires_grad() && x.is_cpu() && x.scalar_type() == at::kBFloat16 &&
           x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

std::pair<at::Tensor, at::Tensor> residualForkNode(const at::Tensor& x, std::int64_t stride, std::int64_t pad) {
    countFastPath();
    auto out = ResidualFork::apply(x, stride, pad);
    return {out[0], out[1]};
}

} // namespace devicerace::detail
