// The fused dense step (see dense_step.h).
#include "train/dense_step.h"
#include "train/step_timer.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include "devicerace/errors.h"
#include "kernels/cpu_kernels.h"
#include "kernels/mkl_gemm.h"
#include "train/lane_optimizer.h"

namespace devicerace::detail {

namespace {

cpu::Bf16* bf16Ptr(const at::Tensor& t) { return reinterpret_cast<cpu::Bf16*>(t.data_ptr<at::BFloat16>()); }

} // namespace

std::optional<std::string> DenseStep::whyNot(Net& net, Task task, const c10::Device& dev, Precision precision,
                                             bool distributed, bool fused) {
    if (auto why = FusedStep::whyNotAny(dev, precision, distributed, fused)) {
        return why;
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
    // DEVICERACE_DENSE_SPLIT=0 (benchmarks): the whole batch in each op, its GEMMs on MKL's threads.
    const char* split = std::getenv("DEVICERACE_DENSE_SPLIT");
    m_split = !(split && std::string_view(split) == "0");
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
    const auto slice = [&](at::Tensor& flat, std::int64_t n, at::IntArrayRef shape) {
        return flat.narrow(0, offset, n).view(shape);
    };
    for (const auto& v : views) {
        Layer l;
        l.out = v.weight.size(0);
        l.in = v.weight.size(1);
        l.relu = v.relu;
        l.dropout = static_cast<float>(v.dropout);
        l.offset = offset;
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
        m_layers.push_back(std::move(l));
    }
    m_input = at::empty({maxBatch, m_layers.front().in}, actType);
    if (bf16) {
        m_mirror.copy_(m_params);
        m_mkl = cpu::mklBf16Preferred();
        if (m_mkl) {
            for (const auto& l : m_layers) {
                m_sumsLd = std::max({m_sumsLd, l.in, l.out});
            }
            m_sums = at::empty({maxBatch, m_sumsLd}, f32);
        } else {
            m_weightTmp = at::empty({total}, at::TensorOptions().dtype(at::kBFloat16));
        }
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
    const auto prepared = prepareInput(x, m_data, m_inputShape, false).reshape({rows, -1});
    if (prepared.size(1) != in.size(1)) {
        throw Error(
            fmt::format("the batch has {} values per example; the network takes {}", prepared.size(1), in.size(1)));
    }
    in.copy_(prepared);
    return in;
}

namespace {

using Clock = std::chrono::steady_clock;

// Rows per worker below which splitting a batch costs more than it saves (a GEMM of fewer
// rows runs far below the core's peak).
constexpr std::int64_t kMinRowsPerWorker = 16;

// Share `k` of `parts` of n: [share(n, k, parts), share(n, k + 1, parts)).
std::int64_t share(std::int64_t n, std::int64_t k, std::int64_t parts) { return n * k / parts; }

// work(w) for every worker w < workers, one per thread of one parallel region (a thread runs
// several where the region got fewer threads). One worker runs on the calling thread outside
// any region, so the ops inside keep their own threading.
template <class F>
void eachWorker(std::int64_t workers, const F& work) {
    if (workers == 1) {
        work(0);
        return;
    }
    at::parallel_for(0, workers, 1, [&](std::int64_t begin, std::int64_t end) {
        for (auto w = begin; w < end; ++w) {
            work(w);
        }
    });
}

} // namespace

struct DenseStep::StepState {
    std::int64_t rows = 0, workers = 1;
    const std::uint8_t* bytes = nullptr; // the batch as stored, when the step converts it
    const std::int64_t* labels = nullptr;
    std::vector<std::uint64_t> seeds; // per layer
    std::vector<float> drop;          // per layer: its dropout probability this step (0: none)
    std::vector<cpu::CrossEntropy> losses;
    LaneOptimizer* optimizer = nullptr; // set when each worker steps its own slices
    // Worker 0's (the lane thread's) phase ends, for the step breakdown.
    Clock::time_point dataEnd, forwardEnd;
    double optimizerSeconds = 0;
};

DenseStep::~DenseStep() = default;

void DenseStep::rowsPass(StepState& s, std::int64_t worker) {
    const auto r0 = share(s.rows, worker, s.workers);
    const auto n = share(s.rows, worker + 1, s.workers) - r0;
    auto prev = m_input.narrow(0, r0, n);
    if (s.bytes) {
        const auto in = m_layers.front().in;
        if (m_bf16) {
            cpu::bytesToBf16(s.bytes + r0 * in, bf16Ptr(prev), n * in, m_scale, m_shift);
        } else {
            cpu::bytesToFloat(s.bytes + r0 * in, prev.data_ptr<float>(), n * in, m_scale, m_shift);
        }
    }
    if (worker == 0) {
        s.dataEnd = Clock::now();
    }
    // Forward: act_l = dropout(relu(act_{l-1} W_l^T + b_l)).
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        auto out = l.act.narrow(0, r0, n);
        if (m_mkl) {
            float* sums = m_sums.data_ptr<float>() + r0 * m_sumsLd;
            cpu::gemmBf16F32(false, true, n, l.out, l.in, bf16Ptr(prev), l.in, bf16Ptr(l.wb), l.in, 0.0f, sums,
                             m_sumsLd);
            cpu::biasReluDropout(sums, m_sumsLd, bf16Ptr(out), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i],
                                 s.seeds[i], r0);
        } else if (m_bf16) {
            at::mm_out(out, prev, l.wb.t());
            cpu::biasReluDropout(bf16Ptr(out), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i], s.seeds[i], r0);
        } else {
            at::mm_out(out, prev, l.w.t());
            cpu::biasReluDropout(out.data_ptr<float>(), l.b.data_ptr<float>(), n, l.out, l.relu, s.drop[i], s.seeds[i],
                                 r0);
        }
        prev = out;
    }
    // Loss and its gradient (of the whole batch's mean).
    auto& last = m_layers.back();
    auto dlogits = last.grad.narrow(0, r0, n);
    float* lastParts = last.biasParts.data() + worker * last.out;
    s.losses[static_cast<std::size_t>(worker)] =
        m_bf16
            ? cpu::softmaxCrossEntropy(bf16Ptr(prev), s.labels + r0, n, last.out, bf16Ptr(dlogits), lastParts, s.rows)
            : cpu::softmaxCrossEntropy(prev.data_ptr<float>(), s.labels + r0, n, last.out, dlogits.data_ptr<float>(),
                                       lastParts, s.rows);
    if (worker == 0) {
        s.forwardEnd = Clock::now();
    }
    // The input-gradient chain: d_{l-1} = relu/dropout'(d_l W_l).
    for (std::size_t i = m_layers.size() - 1; i > 0; --i) {
        auto& l = m_layers[i];
        auto& lower = m_layers[i - 1];
        const auto d = l.grad.narrow(0, r0, n);
        auto dBelow = lower.grad.narrow(0, r0, n);
        const auto below = lower.act.narrow(0, r0, n);
        const float scale = s.drop[i - 1] > 0 ? 1.0f / (1.0f - s.drop[i - 1]) : 1.0f;
        float* parts = lower.biasParts.data() + worker * lower.out;
        if (m_mkl) {
            float* sums = m_sums.data_ptr<float>() + r0 * m_sumsLd;
            cpu::gemmBf16F32(false, false, n, l.in, l.out, bf16Ptr(d), l.out, bf16Ptr(l.wb), l.in, 0.0f, sums,
                             m_sumsLd);
            cpu::reluDropoutBackward(sums, m_sumsLd, bf16Ptr(dBelow), bf16Ptr(below), n, lower.out, scale, parts);
            continue;
        }
        at::mm_out(dBelow, d, m_bf16 ? l.wb : l.w);
        if (m_bf16) {
            cpu::reluDropoutBackward(bf16Ptr(dBelow), bf16Ptr(below), n, lower.out, scale, parts);
        } else {
            cpu::reluDropoutBackward(dBelow.data_ptr<float>(), below.data_ptr<float>(), n, lower.out, scale, parts);
        }
    }
}

void DenseStep::unitsPass(StepState& s, std::int64_t worker) {
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
        auto& l = m_layers[i];
        const auto o0 = share(l.out, worker, s.workers);
        const auto units = share(l.out, worker + 1, s.workers) - o0;
        if (units == 0) {
            continue;
        }
        // dW = d^T act_{l-1}, these units' rows of it, over the whole batch.
        const auto below = i > 0 ? m_layers[i - 1].act.narrow(0, 0, s.rows) : m_input.narrow(0, 0, s.rows);
        const auto weights = l.offset + o0 * l.in;
        if (m_mkl) {
            cpu::gemmBf16F32(true, false, units, l.in, s.rows, bf16Ptr(l.grad) + o0, l.out, bf16Ptr(below), l.in, 0.0f,
                             l.gw.data_ptr<float>() + o0 * l.in, l.in);
        } else if (m_bf16) {
            const auto d = l.grad.narrow(0, 0, s.rows).narrow(1, o0, units);
            auto tmp = m_weightTmp.narrow(0, weights, units * l.in).view({units, l.in});
            at::mm_out(tmp, d.t(), below);
            cpu::toFloat(bf16Ptr(tmp), l.gw.data_ptr<float>() + o0 * l.in, units * l.in);
        } else {
            const auto d = l.grad.narrow(0, 0, s.rows).narrow(1, o0, units);
            auto gw = l.gw.narrow(0, o0, units);
            at::mm_out(gw, d.t(), below);
        }
        float* gb = l.gb.data_ptr<float>() + o0;
        std::copy_n(l.biasParts.data() + o0, units, gb);
        for (std::int64_t k = 1; k < s.workers; ++k) {
            const float* part = l.biasParts.data() + k * l.out + o0;
            for (std::int64_t c = 0; c < units; ++c) {
                gb[c] += part[c];
            }
        }
        if (s.optimizer) {
            const auto start = worker == 0 ? Clock::now() : Clock::time_point{};
            s.optimizer->stepRange(weights, weights + units * l.in);
            const auto bias = l.offset + l.out * l.in + o0;
            s.optimizer->stepRange(bias, bias + units);
            if (worker == 0) {
                s.optimizerSeconds += std::chrono::duration<double>(Clock::now() - start).count();
            }
        }
    }
}

void DenseStep::step(const at::Tensor& x, const at::Tensor& y, at::Generator& gen, LaneOptimizer& optimizer,
                     at::Tensor& loss, at::Tensor& correct, StepTimer* timer) {
    if (!m_step) {
        m_step = std::make_unique<StepState>();
    }
    auto& s = *m_step;
    s.drop.clear();
    s.seeds.clear();
    s.optimizerSeconds = 0;
    s.rows = x.size(0);
    s.workers =
        m_split ? std::clamp<std::int64_t>(s.rows / kMinRowsPerWorker, 1, std::max(1, at::get_num_threads())) : 1;
    at::Tensor bytes;
    if (m_byteInput) {
        bytes = x.contiguous();
        s.bytes = bytes.data_ptr<std::uint8_t>();
    } else {
        input(x);
    }
    const auto labels = y.contiguous();
    s.labels = labels.data_ptr<std::int64_t>();
    // One seed per dropout layer in forward order, as laneDropout draws them.
    for (auto& l : m_layers) {
        s.drop.push_back(m_dropoutOff ? 0.0f : l.dropout);
        s.seeds.push_back(s.drop.back() > 0 ? dropoutSeed(gen) : 0);
        l.biasParts.resize(static_cast<std::size_t>(s.workers * l.out));
    }
    s.losses.assign(static_cast<std::size_t>(s.workers), cpu::CrossEntropy{});
    eachWorker(s.workers, [&](std::int64_t w) { rowsPass(s, w); });
    cpu::CrossEntropy ce;
    for (const auto& part : s.losses) {
        ce.lossSum += part.lossSum;
        ce.correct += part.correct;
        ce.badLabel = ce.badLabel || part.badLabel;
    }
    if (ce.badLabel) {
        throw Error(fmt::format("a label outside the network's {} classes", m_layers.back().out));
    }
    loss.fill_(ce.lossSum / static_cast<double>(s.rows));
    correct.fill_(ce.correct);
    if (timer) {
        timer->markAt(Phase::Data, s.dataEnd); // bytes to normalised floats: input work
        timer->markAt(Phase::Forward, s.forwardEnd);
    }
    s.optimizer = s.workers > 1 && optimizer.steppedInRanges() ? &optimizer : nullptr;
    eachWorker(s.workers, [&](std::int64_t w) { unitsPass(s, w); });
    if (timer) {
        // The lane thread's optimizer slices, timed inside the region, are the optimizer phase.
        timer->markAt(Phase::Backward, Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(s.optimizerSeconds)));
    }
    if (!s.optimizer) {
        optimizer.step();
    }
    if (timer) {
        timer->mark(Phase::Optimizer);
    }
}

std::string DenseStep::describe() const {
    if (m_mkl) {
        return "fused dense step (bf16 GEMMs by MKL with fp32 sums, fp32 master weights)";
    }
    return m_bf16 ? "fused dense step (bf16 GEMMs, fp32 master weights)" : "fused dense step";
}

std::string DenseStep::describeThreads() const {
    const int threads = at::get_num_threads();
    return threads > 1 && m_split
               ? fmt::format("each step's batch rows, then its units, split over {} threads", threads)
               : "";
}

} // namespace devicerace::detail
