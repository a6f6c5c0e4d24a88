// Training-mode batch norm + residual add + relu as one autograd node on CPUs (kernels/autograd_nodes.h,
// kernels/norm_kernels.h).
#include <ATen/Functions.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>

#include <cmath>
#include <vector>

#include "kernels/norm_kernels.h"
#include "kernels/autograd_nodes.h"
#include "kernels/fast_paths.h"

namespace devicerace::detail {

namespace {

template <class T>
auto* dataOf(const at::Tensor& t) {
    if constexpr (std::is_same_v<T, float>) {
        return t.data_ptr<float>();
    } else {
        return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>());
    }
}

template <class T>
auto* dataOrNull(const at::Tensor& t) {
    return t.defined() ? dataOf<T>(t) : nullptr;
}

cpu::NormShape shapeOf(const at::Tensor& x) { return {x.numel() / x.size(1), x.size(1)}; }

template <class T>
struct Storage {
    using type = T;
};

// Calls f(Storage<float>) or f(Storage<cpu::Bf16>) by x's dtype: one body for both types.
template <class F>
void byStorage(const at::Tensor& x, F&& f) {
    if (x.scalar_type() == at::kBFloat16) {
        f(Storage<cpu::Bf16>{});
    } else {
        f(Storage<float>{});
    }
}

struct BatchNormAddRelu : torch::autograd::Function<BatchNormAddRelu> {
    // x: NHWC-contiguous float or bf16; residual: x's shape, dtype and layout, read where
    // `withResidual` (else x again: a custom function's inputs cannot be undefined tensors);
    // gamma, beta: the module's float parameters. Updates bn's running statistics.
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& residual,
                              const at::Tensor& gamma, const at::Tensor& beta, torch::nn::BatchNorm2dImpl* bn,
                              bool withResidual) {
        const auto s = shapeOf(x);
        const auto c = static_cast<std::size_t>(s.channels);
        std::vector<double> mean(c), var(c);
        byStorage(x, [&](auto storage) {
            using T = typename decltype(storage)::type;
            cpu::channelMoments(dataOf<T>(x), s, mean.data(), var.data());
        });
        const double eps = bn->options.eps();
        auto meanT = at::empty({s.channels}, x.options().dtype(at::kFloat));
        auto invstdT = at::empty_like(meanT);
        std::vector<float> a(c), b(c);
        const auto g = gamma.contiguous(), bt = beta.contiguous();
        for (std::size_t i = 0; i < c; ++i) {
            const double invstd = 1.0 / std::sqrt(var[i] + eps);
            meanT.data_ptr<float>()[i] = static_cast<float>(mean[i]);
            invstdT.data_ptr<float>()[i] = static_cast<float>(invstd);
            a[i] = static_cast<float>(g.data_ptr<float>()[i] * invstd);
            b[i] = bt.data_ptr<float>()[i];
        }
        updateRunningStatistics(*bn, mean, var, s.rows);
        auto y = at::empty_like(x);
        byStorage(x, [&](auto storage) {
            using T = typename decltype(storage)::type;
            cpu::normalizeRelu(dataOf<T>(x), withResidual ? dataOf<T>(residual) : nullptr, dataOf<T>(y), s,
                               meanT.data_ptr<float>(), a.data(), b.data());
        });
        ctx->save_for_backward({x, y, g, meanT, invstdT});
        ctx->saved_data["residual"] = withResidual;
        return y;
    }

    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::tensor_list grads) {
        const auto saved = ctx->get_saved_variables();
        const auto &x = saved[0], &y = saved[1], &gamma = saved[2], &mean = saved[3], &invstd = saved[4];
        const auto dy = grads[0].contiguous(at::MemoryFormat::ChannelsLast);
        const auto s = shapeOf(x);
        const auto c = static_cast<std::size_t>(s.channels);
        std::vector<double> sumG(c), sumGx(c);
        const float* m = mean.data_ptr<float>();
        byStorage(x, [&](auto storage) {
            using T = typename decltype(storage)::type;
            cpu::reluNormGradSums(dataOf<T>(dy), dataOf<T>(y), dataOf<T>(x), s, m, sumG.data(), sumGx.data());
        });
        // dx = gamma * invstd / n * (n g - sum g - xhat sum(g xhat)), xhat = (x - mean) invstd.
        const double n = static_cast<double>(std::max<std::int64_t>(1, s.rows));
        std::vector<float> a(c), c0(c), c1(c);
        auto dgamma = at::empty({s.channels}, gamma.options());
        auto dbeta = at::empty_like(dgamma);
        for (std::size_t i = 0; i < c; ++i) {
            const double is = invstd.data_ptr<float>()[i];
            const double ai = gamma.data_ptr<float>()[i] * is;
            a[i] = static_cast<float>(ai);
            c0[i] = static_cast<float>(-ai * sumG[i] / n);
            c1[i] = static_cast<float>(-ai * is * is * sumGx[i] / n);
            dgamma.data_ptr<float>()[i] = static_cast<float>(sumGx[i] * is);
            dbeta.data_ptr<float>()[i] = static_cast<float>(sumG[i]);
        }
        auto dx = at::empty_like(x);
        at::Tensor dres = ctx->saved_data["residual"].toBool() ? at::empty_like(x) : at::Tensor();
        const cpu::NormGradCoefficients k{a.data(), c0.data(), c1.data(), m};
        byStorage(x, [&](auto storage) {
            using T = typename decltype(storage)::type;
            cpu::reluNormGrad(dataOf<T>(dy), dataOf<T>(y), dataOf<T>(x), dataOf<T>(dx), dataOrNull<T>(dres), s, k);
        });
        return {dx, dres, dgamma, dbeta, at::Tensor(), at::Tensor()};
    }

    // As BatchNorm2d in training: running = (1 - momentum) running + momentum batch, the
    // variance's unbiased; no momentum: the cumulative average over num_batches_tracked.
    static void updateRunningStatistics(torch::nn::BatchNorm2dImpl& bn, const std::vector<double>& mean,
                                        const std::vector<double>& var, std::int64_t rows) {
        at::NoGradGuard noGrad;
        auto& batches = bn.num_batches_tracked;
        batches.add_(1);
        const auto momentum = bn.options.momentum();
        const double f = momentum ? *momentum : 1.0 / static_cast<double>(batches.item<std::int64_t>());
        const double unbias = rows > 1 ? static_cast<double>(rows) / static_cast<double>(rows - 1) : 1.0;
        float* rm = bn.running_mean.data_ptr<float>();
        float* rv = bn.running_var.data_ptr<float>();
        for (std::size_t i = 0; i < mean.size(); ++i) {
            rm[i] = static_cast<float>((1.0 - f) * rm[i] + f * mean[i]);
            rv[i] = static_cast<float>((1.0 - f) * rv[i] + f * var[i] * unbias);
        }
    }
};

} // namespace

bool fusedBatchNormFits(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) {
    const auto& o = bn.options;
    return bn.is_training() && o.affine() && o.track_running_stats() && x.is_cpu() && x.dim() == 4 &&
           (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) && x.size(1) > 0 && x.numel() > 0 &&
           x.is_contiguous(at::MemoryFormat::ChannelsLast) && bn.weight.scalar_type() == at::kFloat &&
           bn.running_mean.scalar_type() == at::kFloat && bn.running_mean.is_contiguous() &&
           bn.running_var.is_contiguous();
}

at::Tensor batchNormReluNode(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual) {
    countFastPath();
    if (!residual.defined()) {
        return BatchNormAddRelu::apply(x, x, bn.weight, bn.bias, &bn, false);
    }
    const auto r = residual.to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    return BatchNormAddRelu::apply(x, r, bn.weight, bn.bias, &bn, true);
}

} // namespace devicerace::detail
