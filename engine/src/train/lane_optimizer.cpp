// Plain and multi-tensor optimizers (see lane_optimizer.h). The fast paths follow PyTorch's
// own torch/optim/{adam,sgd,rmsprop}.py fused/foreach implementations, so a lane with
// fused=true computes the same update as fused=false up to float rounding (tested).
#include "train/lane_optimizer.h"

#include <ATen/Functions.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <fmt/format.h>

#include "kernels/cpu_kernels.h"
#include "kernels/fast_paths.h"

namespace devicerace::detail {

namespace {

// Adam's first-moment decay rate: torch::optim::Adam's, Keras' and nanoGPT's (the second is
// the recipe's beta2).
constexpr double kBeta1 = 0.9;
// Added to the global gradient norm before dividing, as torch.nn.utils.clip_grad_norm_.
constexpr double kClipEps = 1e-6;

bool decays(const OptimizerRecipe& r, const at::Tensor& p) { return !r.decayMatricesOnly || p.dim() >= 2; }

// nanoGPT's two parameter groups: matrices decay, biases and LayerNorm gains do not.
std::vector<torch::optim::OptimizerParamGroup> adamwGroups(const OptimizerRecipe& r, std::vector<at::Tensor> params,
                                                           const OptimizerSettings& s) {
    std::vector<at::Tensor> decay, keep;
    for (auto& p : params) {
        (decays(r, p) ? decay : keep).push_back(std::move(p));
    }
    auto options = [&](double wd) {
        return std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(s.lr).betas({kBeta1, r.beta2}).eps(r.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    if (!decay.empty()) {
        groups.emplace_back(std::move(decay), options(s.weightDecay));
    }
    if (!keep.empty()) {
        groups.emplace_back(std::move(keep), options(0));
    }
    return groups;
}

// Scales `grads` so their global L2 norm is at most `maxNorm`, with device work only (no host
// read, so it runs inside a captured CUDA graph): torch.nn.utils.clip_grad_norm_'s foreach path.
void clipOnDevice(const std::vector<at::Tensor>& grads, double maxNorm) {
    auto norms = at::_foreach_norm(grads, 2);
    auto total = at::linalg_vector_norm(at::stack(norms), 2);
    auto coef = (maxNorm / (total + kClipEps)).clamp_max(1.0);
    at::_foreach_mul_(grads, coef);
}

const char* kindName(OptimizerRecipe::Kind k) {
    switch (k) {
    case OptimizerRecipe::Kind::Adam: return "Adam";
    case OptimizerRecipe::Kind::AdamW: return "AdamW";
    case OptimizerRecipe::Kind::Sgd: return "SGD";
    case OptimizerRecipe::Kind::RmsProp: return "RMSprop";
    }
    return "?";
}

/// torch::optim: one parameter at a time, step counts on the host.
class PlainOptimizer final : public LaneOptimizer {
public:
    PlainOptimizer(const OptimizerRecipe& r, std::vector<at::Tensor> params, const OptimizerSettings& s)
        : m_kind(r.kind), m_clipNorm(r.clipNorm) {
        if (m_clipNorm > 0) {
            m_params = params;
        }
        switch (r.kind) {
        case OptimizerRecipe::Kind::Adam:
            m_opt = std::make_unique<torch::optim::Adam>(
                std::move(params),
                torch::optim::AdamOptions(s.lr).betas({kBeta1, r.beta2}).eps(r.eps).weight_decay(s.weightDecay));
            break;
        case OptimizerRecipe::Kind::AdamW:
            m_opt = std::make_unique<torch::optim::AdamW>(adamwGroups(r, std::move(params), s),
                                                          torch::optim::AdamWOptions(s.lr));
            break;
        case OptimizerRecipe::Kind::Sgd:
            m_opt = std::make_unique<torch::optim::SGD>(
                std::move(params),
                torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weightDecay).nesterov(r.nesterov));
            break;
        case OptimizerRecipe::Kind::RmsProp:
            m_opt = std::make_unique<torch::optim::RMSprop>(
                std::move(params),
                torch::optim::RMSpropOptions(s.lr).alpha(r.alpha).eps(r.eps).weight_decay(s.weightDecay));
            break;
        }
        m_lr = s.lr;
    }
    void setLr(double lr) override {
        if (lr == m_lr) {
            return;
        }
        m_lr = lr;
        for (auto& group : m_opt->param_groups()) {
            group.options().set_lr(lr);
        }
    }
    void zeroGrad() override { m_opt->zero_grad(/*set_to_none=*/true); }
    void step() override {
        if (m_clipNorm > 0) {
            torch::nn::utils::clip_grad_norm_(m_params, m_clipNorm);
        }
        m_opt->step();
    }
    bool captureSafe() const override { return false; }
    std::string describe() const override { return fmt::format("torch::optim {}", kindName(m_kind)); }

private:
    OptimizerRecipe::Kind m_kind;
    double m_clipNorm = 0;
    std::vector<at::Tensor> m_params; // clipped over all of them
    std::unique_ptr<torch::optim::Optimizer> m_opt;
    double m_lr = 0;
};

/// Fused Adam/SGD kernels and foreach RMSprop: every parameter in a few launches, all state
/// (moments, step counts, optionally the learning rate) in device tensors.
class FastOptimizer final : public LaneOptimizer {
public:
    FastOptimizer(const OptimizerRecipe& r, std::vector<at::Tensor> params, const OptimizerSettings& s)
        : m_recipe(r), m_settings(s), m_params(std::move(params)) {
        torch::NoGradGuard noGrad;
        const auto dev = m_params.at(0).device();
        for (const auto& p : m_params) {
            switch (r.kind) {
            case OptimizerRecipe::Kind::Adam:
            case OptimizerRecipe::Kind::AdamW:
                m_state1.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
                m_state2.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
                m_steps.push_back(at::zeros({}, at::TensorOptions().device(dev).dtype(at::kFloat)));
                break;
            case OptimizerRecipe::Kind::Sgd:
                if (s.momentum > 0) {
                    m_state1.push_back(at::empty_like(p, at::MemoryFormat::Preserve));
                }
                break;
            case OptimizerRecipe::Kind::RmsProp:
                m_state1.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
                break;
            }
        }
        // float32, like the learning-rate tensors PyTorch's fused kernels read.
        m_lrTensor = at::full({}, s.lr, at::TensorOptions().device(dev).dtype(at::kFloat));
    }

    void setLr(double lr) override {
        if (lr == m_settings.lr) {
            return;
        }
        m_settings.lr = lr;
        m_lrTensor.fill_(lr); // device work only: no host sync, replayed graphs read it
    }

    void zeroGrad() override {
        for (auto& p : m_params) {
            p.mutable_grad().reset();
        }
    }

    bool captureSafe() const override { return true; }

    std::string describe() const override {
        if (m_recipe.kind == OptimizerRecipe::Kind::RmsProp) {
            return m_params[0].is_cpu() ? "one-pass RMSprop" : "foreach RMSprop";
        }
        return fmt::format("fused {}", kindName(m_recipe.kind));
    }

    void step() override {
        countFastPath();
        torch::NoGradGuard noGrad;
        // Parameters without a gradient this step are left alone, as torch::optim does.
        std::vector<at::Tensor> params, grads, s1, s2, steps;
        for (std::size_t i = 0; i < m_params.size(); ++i) {
            const auto& g = m_params[i].grad();
            if (!g.defined()) {
                continue;
            }
            params.push_back(m_params[i]);
            grads.push_back(g);
            if (i < m_state1.size()) {
                s1.push_back(m_state1[i]);
            }
            if (i < m_state2.size()) {
                s2.push_back(m_state2[i]);
                steps.push_back(m_steps[i]);
            }
        }
        if (params.empty()) {
            return;
        }
        const bool deviceLr = m_params[0].is_cuda();
        const auto& s = m_settings;
        if (m_recipe.clipNorm > 0) {
            clipOnDevice(grads, m_recipe.clipNorm);
        }
        switch (m_recipe.kind) {
        case OptimizerRecipe::Kind::Adam:
            at::_foreach_add_(steps, 1);
            if (deviceLr) {
                at::_fused_adam_(params, grads, s1, s2, {}, steps, m_lrTensor, kBeta1, m_recipe.beta2, s.weightDecay,
                                 m_recipe.eps, false, false);
            } else {
                at::_fused_adam_(params, grads, s1, s2, {}, steps, s.lr, kBeta1, m_recipe.beta2, s.weightDecay,
                                 m_recipe.eps, false, false);
            }
            break;
        case OptimizerRecipe::Kind::AdamW:
            at::_foreach_add_(steps, 1);
            // Two calls: the decaying matrices, then the rest with no decay.
            for (const bool decaying : {true, false}) {
                std::vector<at::Tensor> gp, gg, g1, g2, gs;
                for (std::size_t i = 0; i < params.size(); ++i) {
                    if (decays(m_recipe, params[i]) == decaying) {
                        gp.push_back(params[i]);
                        gg.push_back(grads[i]);
                        g1.push_back(s1[i]);
                        g2.push_back(s2[i]);
                        gs.push_back(steps[i]);
                    }
                }
                if (gp.empty()) {
                    continue;
                }
                const double wd = decaying ? s.weightDecay : 0.0;
                if (deviceLr) {
                    at::_fused_adamw_(gp, gg, g1, g2, {}, gs, m_lrTensor, kBeta1, m_recipe.beta2, wd, m_recipe.eps,
                                      false, false);
                } else {
                    at::_fused_adamw_(gp, gg, g1, g2, {}, gs, s.lr, kBeta1, m_recipe.beta2, wd, m_recipe.eps, false,
                                      false);
                }
            }
            break;
        case OptimizerRecipe::Kind::Sgd:
            if (deviceLr) {
                at::_fused_sgd_(params, grads, s1, s.weightDecay, s.momentum, m_lrTensor, 0.0, m_recipe.nesterov, false,
                                m_firstStep);
            } else {
                at::_fused_sgd_(params, grads, s1, s.weightDecay, s.momentum, s.lr, 0.0, m_recipe.nesterov, false,
                                m_firstStep);
            }
            m_firstStep = false;
            break;
        case OptimizerRecipe::Kind::RmsProp: {
            // torch/optim/rmsprop.py _multi_tensor_rmsprop, without centring or momentum.
            if (!deviceLr && oneCpuPass(params, grads, s1)) {
                // One pass per tensor instead of six foreach ops and two temporaries.
                for (std::size_t i = 0; i < params.size(); ++i) {
                    cpu::rmspropStep(params[i].data_ptr<float>(), grads[i].data_ptr<float>(), s1[i].data_ptr<float>(),
                                     params[i].numel(), static_cast<float>(s.lr), static_cast<float>(m_recipe.alpha),
                                     static_cast<float>(m_recipe.eps), static_cast<float>(s.weightDecay), nullptr);
                }
                break;
            }
            if (s.weightDecay != 0) {
                grads = at::_foreach_add(grads, params, s.weightDecay);
            }
            at::_foreach_mul_(s1, m_recipe.alpha);
            at::_foreach_addcmul_(s1, grads, grads, 1.0 - m_recipe.alpha);
            auto avg = at::_foreach_sqrt(s1);
            at::_foreach_add_(avg, m_recipe.eps);
            if (deviceLr) {
                auto update = at::_foreach_div(grads, avg);
                at::_foreach_mul_(update, m_lrTensor);
                at::_foreach_sub_(params, update);
            } else {
                at::_foreach_addcdiv_(params, grads, avg, -s.lr);
            }
            break;
        }
        }
    }

private:
    // CPU float tensors, each dense and in its parameter's layout (channels_last too): one
    // pass per tensor over memory in order (cpu::rmspropStep).
    static bool oneCpuPass(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                           const std::vector<at::Tensor>& state) {
        for (std::size_t i = 0; i < params.size(); ++i) {
            for (const auto* t : {&params[i], &grads[i], &state[i]}) {
                if (!t->is_cpu() || t->scalar_type() != at::kFloat || !t->is_non_overlapping_and_dense() ||
                    t->strides() != params[i].strides()) {
                    return false;
                }
            }
        }
        return true;
    }

    OptimizerRecipe m_recipe;
    OptimizerSettings m_settings;
    std::vector<at::Tensor> m_params;
    std::vector<at::Tensor> m_state1, m_state2,
        m_steps; // Adam: exp_avg, exp_avg_sq, step; SGD: momentum; RMSprop: square_avg
    at::Tensor m_lrTensor;
    bool m_firstStep = true; // SGD: the momentum buffers start as the first gradient
};

/// One flat parameter buffer (train/fused/flat_params.h): see makeFlatOptimizer.
class FlatOptimizer final : public LaneOptimizer {
public:
    FlatOptimizer(const OptimizerRecipe& r, const FlatParams& flat, const OptimizerSettings& s,
                  std::int64_t decayedCount)
        : m_recipe(r), m_settings(s), m_params(flat.params), m_grads(flat.grads), m_mirror(flat.mirror) {
        m_decayed = r.decayMatricesOnly ? decayedCount : m_params.numel();
        if (m_decayed < 0 || m_decayed > m_params.numel()) {
            throw std::logic_error("a flat optimizer that decays matrices only needs them first in the buffer");
        }
        if (r.kind != OptimizerRecipe::Kind::Sgd || s.momentum > 0) {
            m_state1 = at::zeros_like(m_params);
        }
        if (r.kind == OptimizerRecipe::Kind::Adam || r.kind == OptimizerRecipe::Kind::AdamW) {
            m_state2 = at::zeros_like(m_params);
            m_steps = at::zeros({}, at::TensorOptions().dtype(at::kFloat));
        }
    }
    void setLr(double lr) override { m_settings.lr = lr; }
    void zeroGrad() override {}
    bool captureSafe() const override { return false; }
    std::string describe() const override {
        return m_recipe.kind == OptimizerRecipe::Kind::RmsProp ? std::string("one-pass RMSprop")
                                                               : fmt::format("fused {}", kindName(m_recipe.kind));
    }

    // Not when clipping: that needs every gradient's norm before any update.
    bool steppedInRanges() const override {
        return m_recipe.kind == OptimizerRecipe::Kind::RmsProp && m_recipe.clipNorm <= 0;
    }
    void stepRange(std::int64_t begin, std::int64_t end) override {
        const auto& s = m_settings;
        auto* mirror = m_mirror.defined() ? reinterpret_cast<cpu::Bf16*>(m_mirror.data_ptr<at::BFloat16>()) : nullptr;
        cpu::rmspropStep(m_params.data_ptr<float>() + begin, m_grads.data_ptr<float>() + begin,
                         m_state1.data_ptr<float>() + begin, end - begin, static_cast<float>(s.lr),
                         static_cast<float>(m_recipe.alpha), static_cast<float>(m_recipe.eps),
                         static_cast<float>(s.weightDecay), mirror ? mirror + begin : nullptr);
    }

    void step() override {
        countFastPath();
        torch::NoGradGuard noGrad;
        const auto& s = m_settings;
        const bool adamw = m_recipe.kind == OptimizerRecipe::Kind::AdamW;
        float gradScale = 1; // AdamW: the clipping coefficient, applied inside its one pass
        if (m_recipe.clipNorm > 0 && adamw) {
            const double norm = at::linalg_vector_norm(m_grads, 2).item<double>();
            gradScale = static_cast<float>(std::min(1.0, m_recipe.clipNorm / (norm + kClipEps)));
        } else if (m_recipe.clipNorm > 0) {
            clipOnDevice({m_grads}, m_recipe.clipNorm);
        }
        switch (m_recipe.kind) {
        case OptimizerRecipe::Kind::RmsProp:
            stepRange(0, m_params.numel());
            return; // the mirror is written in the same pass
        case OptimizerRecipe::Kind::Adam:
            m_steps.add_(1);
            at::_fused_adam_({m_params}, {m_grads}, {m_state1}, {m_state2}, {}, {m_steps}, s.lr, kBeta1, m_recipe.beta2,
                             s.weightDecay, m_recipe.eps, false, false);
            break;
        case OptimizerRecipe::Kind::AdamW: {
            // One pass (cpu::adamwStep: torch's fused AdamW arithmetic, the clipping and the bf16
            // mirror in it) per group, as FastOptimizer's: [0, m_decayed) decays, the rest not.
            ++m_stepCount;
            cpu::AdamW a;
            a.lr = static_cast<float>(s.lr);
            a.beta1 = static_cast<float>(kBeta1);
            a.beta2 = static_cast<float>(m_recipe.beta2);
            a.eps = static_cast<float>(m_recipe.eps);
            a.biasCorrection1 = static_cast<float>(1.0 - std::pow(kBeta1, static_cast<double>(m_stepCount)));
            a.biasCorrection2 = static_cast<float>(1.0 - std::pow(m_recipe.beta2, static_cast<double>(m_stepCount)));
            a.gradScale = gradScale;
            auto* mirror =
                m_mirror.defined() ? reinterpret_cast<cpu::Bf16*>(m_mirror.data_ptr<at::BFloat16>()) : nullptr;
            const auto total = m_params.numel();
            for (const bool decaying : {true, false}) {
                const auto begin = decaying ? 0 : m_decayed;
                const auto count = decaying ? m_decayed : total - m_decayed;
                a.weightDecay = decaying ? static_cast<float>(s.weightDecay) : 0.0f;
                cpu::adamwStep(m_params.data_ptr<float>() + begin, m_grads.data_ptr<float>() + begin,
                               m_state1.data_ptr<float>() + begin, m_state2.data_ptr<float>() + begin, count, a,
                               mirror ? mirror + begin : nullptr);
            }
            return; // the mirror is written in the same pass
        }
        case OptimizerRecipe::Kind::Sgd: {
            std::vector<at::Tensor> momentum;
            if (m_state1.defined()) {
                momentum.push_back(m_state1);
            }
            at::_fused_sgd_({m_params}, {m_grads}, momentum, s.weightDecay, s.momentum, s.lr, 0.0, m_recipe.nesterov,
                            false, m_firstStep);
            m_firstStep = false;
            break;
        }
        }
        if (m_mirror.defined()) {
            cpu::toBf16(m_params.data_ptr<float>(), reinterpret_cast<cpu::Bf16*>(m_mirror.data_ptr<at::BFloat16>()),
                        m_params.numel());
        }
    }

private:
    OptimizerRecipe m_recipe;
    OptimizerSettings m_settings;
    at::Tensor m_params, m_grads, m_mirror;
    at::Tensor m_state1, m_state2, m_steps;
    std::int64_t m_decayed = 0;   // the weight decay applies to params [0, m_decayed)
    std::int64_t m_stepCount = 0; // AdamW's steps taken
    bool m_firstStep = true;
};

} // namespace

std::unique_ptr<LaneOptimizer> makeFlatOptimizer(const OptimizerRecipe& recipe, const FlatParams& flat,
                                                 const OptimizerSettings& settings, std::int64_t decayedCount) {
    return std::make_unique<FlatOptimizer>(recipe, flat, settings, decayedCount);
}

std::unique_ptr<LaneOptimizer> makeLaneOptimizer(const OptimizerRecipe& recipe, std::vector<at::Tensor> params,
                                                 const OptimizerSettings& settings, bool fast) {
    if (fast && !params.empty()) {
        return std::make_unique<FastOptimizer>(recipe, std::move(params), settings);
    }
    return std::make_unique<PlainOptimizer>(recipe, std::move(params), settings);
}

} // namespace devicerace::detail
