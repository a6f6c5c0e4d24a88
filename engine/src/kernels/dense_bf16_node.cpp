// A bf16 autocast lane's dense layer as one autograd node whose three GEMMs each take the route
// timed fastest for its shape on this CPU (kernels/bf16_routes.h; see autograd_nodes.h).
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/autograd_nodes.h"
#include "kernels/bf16_routes.h"
#include "kernels/cpu_kernels.h"
#include "kernels/fast_paths.h"
#include "kernels/node_casts.h"

namespace devicerace::detail {

namespace {

using cpu::Bf16;
using cpu::Bf16Route;
using cpu::GemmShape;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const Bf16* bf16Data(const at::Tensor& t) { return reinterpret_cast<const Bf16*>(t.data_ptr<at::BFloat16>()); }

// The three GEMMs of y = x W^T + b (x [m x k], W [n x k]): the forward, the input's gradient
// dy W and the weight's dy^T x.
std::array<GemmShape, 3> shapesOf(std::int64_t m, std::int64_t n, std::int64_t k) {
    return {GemmShape{m, n, k, false, true}, GemmShape{m, k, n, false, false}, GemmShape{n, k, m, true, false}};
}

struct DenseBf16Routed : torch::autograd::Function<DenseBf16Routed> {
    // bias: the module's, read where `withBias` (else the weight again: a custom function's inputs
    // cannot be undefined tensors). routes: the three GEMMs' (shapesOf's order), as Bf16Route.
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias, bool withBias, std::vector<std::int64_t> routes) {
        const NoAutocast off;
        // autocast's casts (x is bf16 already when the layer before ran under autocast)
        const auto xb = x.to(at::kBFloat16).contiguous();
        const auto wb = weight.to(at::kBFloat16).contiguous();
        const auto m = xb.size(0), k = xb.size(1), n = wb.size(0);
        auto y = at::empty({m, n}, x.options().dtype(at::kFloat));
        cpu::gemmBf16Routed(static_cast<Bf16Route>(routes[0]), shapesOf(m, n, k)[0], bf16Data(xb), k, bf16Data(wb), k,
                            y.data_ptr<float>(), n);
        if (withBias) {
            y.add_(bias); // to the fp32 sums, before the one rounding to bf16 (as oneDNN's bf16 linear)
        }
        ctx->save_for_backward({xb, wb});
        ctx->saved_data["bias"] = withBias;
        ctx->saved_data["routes"] = routes;
        ctx->saved_data["xType"] = static_cast<std::int64_t>(x.scalar_type());
        return y.to(at::kBFloat16);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        countFastPath();
        const NoAutocast off;
        const auto saved = ctx->get_saved_variables();
        const auto& xb = saved[0];
        const auto& wb = saved[1];
        const auto routes = ctx->saved_data["routes"].toIntVector();
        const auto m = xb.size(0), k = xb.size(1), n = wb.size(0);
        const auto shapes = shapesOf(m, n, k);
        const auto dy = grads[0].to(at::kBFloat16).contiguous();
        at::Tensor dx;
        if (ctx->needs_input_grad(0)) {
            auto c = at::empty({m, k}, xb.options().dtype(at::kFloat));
            cpu::gemmBf16Routed(static_cast<Bf16Route>(routes[1]), shapes[1], bf16Data(dy), n, bf16Data(wb), k,
                                c.data_ptr<float>(), k);
            dx = c.to(static_cast<at::ScalarType>(ctx->saved_data["xType"].toInt()));
        }
        // The weight's gradient in fp32 from the sums on (autocast's would be rounded to bf16
        // first, then widened for the fp32 weight).
        auto dw = at::empty({n, k}, xb.options().dtype(at::kFloat));
        cpu::gemmBf16Routed(static_cast<Bf16Route>(routes[2]), shapes[2], bf16Data(dy), n, bf16Data(xb), k,
                            dw.data_ptr<float>(), k);
        at::Tensor db;
        if (ctx->saved_data["bias"].toBool()) {
            db = at::sum(dy, {0}, false, at::kFloat);
        }
        return {dx, dw, db, at::Tensor(), at::Tensor()};
    }
};

} // namespace

// Each lane's routes: one router on the lane's intra-op threads, made at its first dense layer
// (a lane keeps its thread count).
struct DenseRoutes {
    std::unique_ptr<cpu::Bf16Router> router;
};

std::shared_ptr<DenseRoutes> makeDenseRoutes() { return std::make_shared<DenseRoutes>(); }

std::string describeDenseRoutes(const DenseRoutes& routes) {
    return routes.router ? routes.router->summary() : std::string();
}

bool routedDenseFits(const torch::nn::LinearImpl& fc, const at::Tensor& x) {
    return routedDenseFits(fc.weight, fc.bias, x);
}

bool routedDenseFits(const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x) {
    return at::autocast::is_autocast_enabled(at::kCPU) && at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16 &&
           x.is_cpu() && x.dim() == 2 && x.size(0) > 0 &&
           (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && weight.is_cpu() &&
           weight.dim() == 2 && weight.scalar_type() == at::kFloat &&
           (!bias.defined() || bias.scalar_type() == at::kFloat);
}

namespace {
// An evaluation's forward on the fp32 route: x W^T + b in fp32 on the bf16 values, rounded once,
// the bf16 values returned in fp32.
at::Tensor evaluateInF32(const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x) {
    const NoAutocast off;
    const auto xr = bf16ValuesInF32(x), wr = bf16ValuesInF32(weight);
    const auto m = xr.size(0), k = xr.size(1), n = wr.size(0);
    auto sums = at::empty({m, n}, xr.options());
    cpu::gemmF32(shapesOf(m, n, k)[0], xr.data_ptr<float>(), k, wr.data_ptr<float>(), k, sums.data_ptr<float>(), n);
    if (bias.defined()) {
        const auto b = bias.contiguous();
        cpu::addBiasRoundingToBf16(sums.data_ptr<float>(), b.data_ptr<float>(), m, n); // one pass
    } else {
        cpu::roundToBf16InPlace(sums.data_ptr<float>(), sums.numel());
    }
    return sums;
}
} // namespace

at::Tensor routedDense(DenseRoutes& routes, torch::nn::LinearImpl& fc, const at::Tensor& x) {
    return routedDense(routes, fc.weight, fc.bias, x);
}

at::Tensor routedDense(DenseRoutes& routes, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& x) {
    countFastPath();
    std::vector<std::int64_t> chosen;
    const bool training = torch::GradMode::is_enabled();
    {
        const NoAutocast off; // a shape's first use times its routes, in their own precisions
        const torch::NoGradGuard noGrad;
        if (!routes.router) {
            routes.router = std::make_unique<cpu::Bf16Router>(at::get_num_threads());
        }
        const auto shapes = shapesOf(x.size(0), weight.size(0), x.size(1));
        // without gradients (evaluation) only the forward's shape is routed, and timed
        const auto forward = static_cast<std::int64_t>(routes.router->route(shapes[0]));
        chosen = {forward, forward, forward};
        if (training) {
            chosen[1] = static_cast<std::int64_t>(routes.router->route(shapes[1]));
            chosen[2] = static_cast<std::int64_t>(routes.router->route(shapes[2]));
        }
    }
    if (!training && static_cast<Bf16Route>(chosen[0]) == Bf16Route::Fp32) {
        return evaluateInF32(weight, bias, x);
    }
    const bool withBias = bias.defined();
    return DenseBf16Routed::apply(x, weight, withBias ? bias : weight, withBias, std::move(chosen));
}

} // namespace devicerace::detail
