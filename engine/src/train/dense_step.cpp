// The fused dense step (see dense_step.h).
#include "train/dense_step.h"
#include "train/step_timer.h"

#include <ATen/Functions.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include "devicerace/errors.h"
#include "kernels/cpu_kernels.h"
#include "train/lane_optimizer.h"

namespace devicerace::detail {

namespace {

cpu::Bf16* bf16Ptr(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); }

} // namespace

std::optional<std::string> DenseStep::whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused) {
    if (!fused) {
        return "fused=false";
    }
    if (!dev.is_cpu()) {
        return "not a CPU lane";
    }
    if (distributed) {
        return "a data-parallel rank";
    }
    if (precision == Precision::Fp16) {
        return "fp16";
    }
    if (task != Task::Classify) {
        return "not a softmax classifier";
    }
    const auto layers = net.denseStack();
    if (layers.empty()) {
        return "not a stack of dense layers";
    }
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const auto& l = layers[i];
        if (i + 1 < layers.size() && !l.relu) {
            return "a hidden layer without a ReLU";
        }
        if (i + 1 == layers.size() && (l.relu || l.dropout > 0)) {
            return "an activation on the logits";
        }
        if (l.weight.scalar_type() != at::kFloat || !l.bias.defined() ||
            (i > 0 && l.weight.size(1) != layers[i - 1].weight.size(0))) {
            return "layer shapes it does not handle";
        }
    }
    return std::nullopt;
}

DenseStep::DenseStep(Net& net, std::int64_t maxBatch, bool bf16, const DeviceData& data,
                     const std::vector<std::int64_t>& inputShape)
    : m_bf16(bf16), m_dropoutOff(dropoutOffForTests()), m_data(data), m_inputShape(inputShape) {
    torch::NoGradGuard noGrad;
    const auto views = net.denseStack();
    std::int64_t total = 0;
    for (const auto& v : views) {
        total += v.weight.numel() + v.bias.numel();
    }
    const auto f32 = at::TensorOptions().dtype(at::kFloat);
    const auto actType = at::TensorOptions().dtype(bf16 ? at::kBFloat16 : at::kFloat);
    m_params = at::empty({total}, f32);
    m_grads = at::zeros({total}, f32);
    if (bf16) {
        m_mirror = at::empty({total}, at::TensorOptions().dtype(at::kBFloat16));
    }
    std::int64_t offset = 0;
    std::int64_t largestWeight = 0;
    const auto slice = [&](at::Tensor& flat, std::int64_t n, at::IntArrayRef shape) {
        return flat.narrow(0, offset, n).view(shape);
    };
    for (const auto& v : views) {
        Layer l;
        l.out = v.weight.size(0);
        l.in = v.weight.size(1);
        l.relu = v.relu;
        l.dropout = static_cast<float>(v.dropout);
        l.w = slice(m_params, v.weight.numel(), v.weight.sizes());
        l.gw = slice(m_grads, v.weight.numel(), v.weight.sizes());
        if (bf16) {
            l.wb = slice(m_mirror, v.weight.numel(), v.weight.sizes());
        }
        offset += v.weight.numel();
        l.b = slice(m_params, v.bias.numel(), v.bias.sizes());
        l.gb = slice(m_grads, v.bias.numel(), v.bias.sizes());
        offset += v.bias.numel();
        l.w.copy_(v.weight);
        l.b.copy_(v.bias);
        // The module's parameters become views of the flat buffer (same tensors, new storage).
        auto weight = v.weight;
        auto bias = v.bias;
        weight.set_data(l.w);
        bias.set_data(l.b);
        l.act = at::empty({maxBatch, l.out}, actType);
        l.grad = at::empty({maxBatch, l.out}, actType);
        largestWeight = std::max(largestWeight, v.weight.numel());
        m_layers.push_back(std::move(l));
    }
    m_input = at::empty({maxBatch, m_layers.front().in}, actType);
    if (bf16) {
        m_mirror.copy_(m_params);
        m_weightTmp = at::empty({largestWeight}, at::TensorOptions().dtype(at::kBFloat16));
    }
    // Bytes straight to the network's input in one pass, when no per-channel step is needed.
    const bool oneChannel = !data.mean.defined() || data.mean.numel() == 1;
    m_byteInput = data.trainX.scalar_type() == at::kByte && oneChannel &&
                  data.trainX.numel() / std::max<std::int64_t>(1, data.trainX.size(0)) == m_layers.front().in;
    if (m_byteInput) {
        const float mean = data.mean.defined() ? data.mean.item<float>() : 0.0f;
        const float stddev = data.stddev.defined() ? data.stddev.item<float>() : 1.0f;
        m_scale = 1.0f / (255.0f * stddev);
        m_shift = -mean / stddev;
    }
}

at::Tensor DenseStep::input(const at::Tensor& x) {
    const auto rows = x.size(0);
    auto in = m_input.narrow(0, 0, rows);
    if (m_byteInput) {
        const auto bytes = x.contiguous();
        if (m_bf16) {
            cpu::bytesToBf16(bytes.data_ptr<std::uint8_t>(), bf16Ptr(in), in.numel(), m_scale, m_shift);
        } else {
            cpu::bytesToFloat(bytes.data_ptr<std::uint8_t>(), in.data_ptr<float>(), in.numel(), m_scale, m_shift);
        }
        return in;
    }
    const auto prepared = prepareInput(x, m_data, m_inputShape, false).reshape({rows, -1});
    if (prepared.size(1) != in.size(1)) {
        throw Error(
            fmt::format("the batch has {} values per example; the network takes {}", prepared.size(1), in.size(1)));
    }
    in.copy_(prepared);
    return in;
}

void DenseStep::step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer,
                     at::Tensor& loss, at::Tensor& correct, StepTimer* timer) {
    const auto rows = x.size(0);
    // Forward: act_l = dropout(relu(act_{l-1} W_l^T + b_l)).
    at::Tensor prev = input(x);
    if (timer) {
        timer->mark(Phase::Data); // bytes to normalised floats: input work
    }
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        auto out = l.act.narrow(0, 0, rows);
        at::mm_out(out, prev, (m_bf16 ? l.wb : l.w).t());
        const float p = m_dropoutOff ? 0.0f : l.dropout;
        // One seed per dropout layer in forward order, as laneDropout draws them.
        const std::uint64_t layerSeed = p > 0 ? dropoutSeed(gen) : 0;
        if (m_bf16) {
            cpu::biasReluDropout(bf16Ptr(out), l.b.data_ptr<float>(), rows, l.out, l.relu, p, layerSeed);
        } else {
            cpu::biasReluDropout(out.data_ptr<float>(), l.b.data_ptr<float>(), rows, l.out, l.relu, p, layerSeed);
        }
        prev = out;
    }
    // Loss and its gradient.
    auto& last = m_layers.back();
    const auto labels = y.contiguous();
    auto dlogits = last.grad.narrow(0, 0, rows);
    const auto ce = m_bf16 ? cpu::softmaxCrossEntropy(bf16Ptr(prev), labels.data_ptr<std::int64_t>(), rows, last.out,
                                                      bf16Ptr(dlogits), last.gb.data_ptr<float>())
                           : cpu::softmaxCrossEntropy(prev.data_ptr<float>(), labels.data_ptr<std::int64_t>(), rows,
                                                      last.out, dlogits.data_ptr<float>(), last.gb.data_ptr<float>());
    if (ce.badLabel) {
        throw Error(fmt::format("a label outside the network's {} classes", last.out));
    }
    loss.fill_(ce.lossSum / static_cast<double>(rows));
    correct.fill_(ce.correct);
    if (timer) {
        timer->mark(Phase::Forward);
    }
    // Backward: dW_l = d_l^T act_{l-1}; d_{l-1} = relu/dropout'(d_l W_l).
    for (std::size_t i = m_layers.size(); i-- > 0;) {
        auto& l = m_layers[i];
        const auto d = l.grad.narrow(0, 0, rows);
        const auto below = i > 0 ? m_layers[i - 1].act.narrow(0, 0, rows) : m_input.narrow(0, 0, rows);
        if (m_bf16) {
            auto tmp = m_weightTmp.narrow(0, 0, l.out * l.in).view({l.out, l.in});
            at::mm_out(tmp, d.t(), below);
            cpu::toFloat(bf16Ptr(tmp), l.gw.data_ptr<float>(), tmp.numel());
        } else {
            at::mm_out(l.gw, d.t(), below);
        }
        if (i == 0) {
            break;
        }
        auto& lower = m_layers[i - 1];
        auto dBelow = lower.grad.narrow(0, 0, rows);
        at::mm_out(dBelow, d, m_bf16 ? l.wb : l.w);
        const float p = m_dropoutOff ? 0.0f : lower.dropout;
        const float scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
        if (m_bf16) {
            cpu::reluDropoutBackward(bf16Ptr(dBelow), bf16Ptr(below), rows, lower.out, scale,
                                     lower.gb.data_ptr<float>());
        } else {
            cpu::reluDropoutBackward(dBelow.data_ptr<float>(), below.data_ptr<float>(), rows, lower.out, scale,
                                     lower.gb.data_ptr<float>());
        }
    }
    if (timer) {
        timer->mark(Phase::Backward);
    }
    optimizer.step();
    if (timer) {
        timer->mark(Phase::Optimizer);
    }
}

std::string DenseStep::describe() const {
    return m_bf16 ? "fused dense step (bf16 GEMMs, fp32 master weights)" : "fused dense step";
}

} // namespace devicerace::detail
