// relu + 2x2 max pool + dropout as one autograd node on CPUs (kernels/autograd_nodes.h,
// kernels/pool_kernels.h).
#include <ATen/Functions.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include <stdexcept>

#include "kernels/pool_kernels.h"
#include "kernels/autograd_nodes.h"
#include "kernels/fast_paths.h"

namespace devicerace::detail {

namespace {

cpu::Bf16* bf16(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); }

at::MemoryFormat formatOf(const at::Tensor& x) {
    return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast) ? at::MemoryFormat::ChannelsLast
                                                                                 : at::MemoryFormat::Contiguous;
}

cpu::PoolShape shapeOf(const at::Tensor& x, bool outNhwc) {
    const bool nhwc = formatOf(x) == at::MemoryFormat::ChannelsLast;
    return {x.size(0), x.size(1), x.size(2), x.size(3), nhwc, nhwc && outNhwc};
}

struct ReluPoolDropout : torch::autograd::Function<ReluPoolDropout> {
    // p: the drop probability; seed: the mask's (unused when p is 0); nchwOut: an NHWC input's
    // output in NCHW; rounding: an fp32 input read as its bf16 rounding, a bf16 output.
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, double p,
                              std::int64_t seed, bool nchwOut, bool rounding) {
        const auto x = input.contiguous(formatOf(input));
        const auto s = shapeOf(x, !nchwOut);
        const auto format = s.outNhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
        const auto outType = rounding ? at::kBFloat16 : x.scalar_type();
        auto out = at::empty({s.images, s.channels, s.height / 2, s.width / 2},
                             x.options().dtype(outType).memory_format(format));
        auto slot = at::empty(out.sizes(), x.options().dtype(at::kByte).memory_format(format));
        // The kept values' scale as laneDropout's mask holds it: 1/(1-p) in float, stored in the
        // tensor's precision (no tensor made on the step's path).
        const float keepScale = p > 0 ? 1.0f / (1.0f - static_cast<float>(p)) : 1.0f;
        const float scale = outType == at::kBFloat16 ? static_cast<float>(c10::BFloat16(keepScale)) : keepScale;
        const auto useed = static_cast<std::uint64_t>(seed);
        if (rounding) {
            cpu::reluMaxPool2Rounding(x.data_ptr<float>(), bf16(out), slot.data_ptr<std::uint8_t>(), s,
                                      static_cast<float>(p), scale, useed);
        } else if (x.scalar_type() == at::kBFloat16) {
            cpu::reluMaxPool2(bf16(x), bf16(out), slot.data_ptr<std::uint8_t>(), s, static_cast<float>(p), scale,
                              useed);
        } else {
            cpu::reluMaxPool2(x.data_ptr<float>(), out.data_ptr<float>(), slot.data_ptr<std::uint8_t>(), s,
                              static_cast<float>(p), scale, useed);
        }
        ctx->save_for_backward({slot});
        ctx->saved_data["scale"] = static_cast<double>(scale);
        ctx->saved_data["shape"] = x.sizes().vec();
        ctx->saved_data["nhwc"] = s.nhwc;
        ctx->saved_data["outNhwc"] = s.outNhwc;
        ctx->saved_data["rounding"] = rounding;
        return out;
    }

    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::tensor_list grads) {
        const auto slot = ctx->get_saved_variables()[0];
        const auto shape = ctx->saved_data["shape"].toIntVector();
        const bool nhwc = ctx->saved_data["nhwc"].toBool();
        const bool outNhwc = ctx->saved_data["outNhwc"].toBool();
        const auto layout = [](bool n) { return n ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous; };
        const bool rounding = ctx->saved_data["rounding"].toBool();
        // (a bf16 output's gradient is bf16: the guard is for a caller that widened it)
        const auto dy = (rounding ? grads[0].to(at::kBFloat16) : grads[0]).contiguous(layout(outNhwc));
        const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
        auto dx =
            at::empty(shape, dy.options().dtype(rounding ? at::kFloat : dy.scalar_type()).memory_format(layout(nhwc)));
        const cpu::PoolShape s{shape[0], shape[1], shape[2], shape[3], nhwc, outNhwc};
        if (rounding) {
            cpu::reluMaxPool2RoundingBackward(bf16(dy), slot.data_ptr<std::uint8_t>(), dx.data_ptr<float>(), s, scale);
        } else if (dy.scalar_type() == at::kBFloat16) {
            cpu::reluMaxPool2Backward(bf16(dy), slot.data_ptr<std::uint8_t>(), bf16(dx), s, scale);
        } else {
            cpu::reluMaxPool2Backward(dy.data_ptr<float>(), slot.data_ptr<std::uint8_t>(), dx.data_ptr<float>(), s,
                                      scale);
        }
        return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

} // namespace

bool reluMaxPoolFits(const at::Tensor& x) {
    return x.is_cpu() && x.dim() == 4 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
           x.size(2) >= 2 && x.size(3) >= 2;
}

at::Tensor reluMaxPoolDropoutNode(const at::Tensor& x, double p, std::uint64_t seed, bool nchwOut, bool roundToBf16) {
    if (roundToBf16 && x.scalar_type() != at::kFloat) {
        throw std::invalid_argument("reluMaxPoolDropoutNode: rounding to bf16 takes an fp32 input");
    }
    countFastPath();
    return ReluPoolDropout::apply(x, p, static_cast<std::int64_t>(seed), nchwOut, roundToBf16);
}

} // namespace devicerace::detail
