// One training step: eager, replayed from a captured CUDA graph, or with fp16 loss scaling.
#include "train/trainer.h"

#include <thread>

#include "data/augment.h"
#include "train/fault.h"

namespace devicerace::detail {

torch::Tensor Trainer::lossOf(const torch::Tensor& logits, const torch::Tensor& y, bool sum) const {
    const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
    if (m_workload->task == Task::Binary) {
        return at::binary_cross_entropy_with_logits(logits.squeeze(1), y.to(torch::kFloat32), {}, {}, reduction);
    }
    if (m_workload->task == Task::LanguageModel) {
        return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), y.reshape(-1), {}, reduction);
    }
    return at::cross_entropy_loss(logits, y, {}, reduction);
}

torch::Tensor Trainer::correctOf(const torch::Tensor& logits, const torch::Tensor& y) const {
    if (m_workload->task == Task::Binary) {
        return logits.squeeze(1).gt(0).eq(y).sum();
    }
    return logits.argmax(-1).eq(y).sum();
}

void Trainer::splitTargets(torch::Tensor& x, torch::Tensor& y) const {
    if (m_workload->task != Task::LanguageModel) {
        return;
    }
    // T+1 tokens per example: the first T are the input, the last T (shifted by one) the
    // targets. Views: a captured graph reads them from the reused batch buffer.
    const auto t = x.size(1) - 1;
    y = x.narrow(1, 1, t);
    x = x.narrow(1, 0, t);
}

std::int64_t Trainer::targetsPerExample() const {
    return m_workload->task == Task::LanguageModel ? m_workload->info.tokensPerSample : 1;
}

// One training step on the batch `idx` (rows of the training set; on the host when the
// data is), eager or replayed from the captured graph.
void Trainer::trainStep(const torch::Tensor& idx) {
    const bool capturing = !m_graph && m_ctx.cudaGraph && m_step >= kGraphWarmupSteps;
    if (!capturing) { // (no timing events inside a graph capture)
        m_timer->begin(m_step);
    }
    torch::Tensor x, y;
    if (m_batcher) {
        m_batcher->fetch(idx, m_batchX, m_batchY);
        x = m_batchX;
        y = m_batchY;
    } else if (m_batchX.defined()) {
        at::index_select_out(m_batchX, m_data.trainX, 0, idx);
        at::index_select_out(m_batchY, m_data.trainY, 0, idx);
        x = m_batchX;
        y = m_batchY;
    } else {
        x = m_data.trainX.index_select(0, idx);
        y = m_data.trainY.index_select(0, idx);
    }
    if (m_ctx.augment) {
        x.copy_(cropFlip(x, m_augmentGen)); // in place: a graph reads the batch buffer
    }
    splitTargets(x, y);
    if (m_slowData && m_step + 1 >= m_ctx.fault.step) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kSlowDataMilliseconds));
    }
    m_timer->mark(Phase::Data);
    StepOutput out;
    if (m_graph) {
        m_graph->replay();
        m_timer->mark(Phase::Compute); // forward, backward and optimizer: one launch
        out = m_graphOutput;
    } else if (m_ctx.cudaGraph && m_step >= kGraphWarmupSteps) {
        capture(x, y);
        m_graph->replay(); // capturing records the work without running it
        out = m_graphOutput;
    } else {
        out = computeStep(x, y);
    }
    m_lossBuf.select(0, m_inBuf).copy_(out.loss);
    m_correctBuf.select(0, m_inBuf).copy_(out.correct);
    ++m_inBuf;
    m_timer->end();
}

Trainer::StepOutput Trainer::computeStep(const torch::Tensor& rawX, const torch::Tensor& y) {
    if (m_fusedStep) {
        m_fusedStep->step(rawX, y, m_gen, *m_optimizer, m_fusedLoss, m_fusedCorrect, m_timer.get());
        return {m_fusedLoss, m_fusedCorrect};
    }
    const auto x = prepareInput(rawX, m_data, m_workload->info.inputShape, m_ctx.channelsLast);
    m_timer->mark(Phase::Data); // bytes to normalised floats: input work
    torch::Tensor logits, loss;
    {
        AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
        logits = m_model->forward(x).to(torch::kFloat32);
        loss = lossOf(logits, y, false);
    }
    m_timer->mark(Phase::Forward);
    m_optimizer->zeroGrad();
    m_timer->mark(Phase::Optimizer);
    if (m_scale.defined()) {
        fp16Step(loss);
    } else {
        loss.backward();
        m_timer->mark(Phase::Backward);
        if (m_dist) {
            m_dist->finishGradients();
            m_timer->mark(Phase::Communication);
        }
        m_optimizer->step();
        m_timer->mark(Phase::Optimizer);
    }
    return {loss.detach(), correctOf(logits.detach(), y)};
}

// Records forward, backward and the optimizer step of one batch as a CUDA graph: every
// later step is one launch. The gradients are allocated inside the graph's memory pool and
// rewritten in place by each replay; dropout draws from the lane's registered generator.
void Trainer::capture(const torch::Tensor& x, const torch::Tensor& y) {
    m_graph = std::make_unique<at::cuda::CUDAGraph>();
    m_graph->register_generator_state(m_gen);
    m_optimizer->zeroGrad();
    bool capturing = false;
    try {
        // Thread-local: other lanes' threads may use CUDA while this one captures.
        m_graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        capturing = true;
        m_graphOutput = computeStep(x, y);
        capturing = false;
        m_graph->capture_end();
    } catch (...) {
        const auto why = describeException(std::current_exception());
        if (capturing) {
            try {
                m_graph->capture_end();
            } catch (...) {
            }
        }
        m_graph.reset();
        throw Error(fmt::format("CUDA graph capture of the training step failed: {} (run this lane with "
                                "graph=false)",
                                why));
    }
}

// fp16 needs dynamic loss scaling; skipping a step on overflow needs the flag on the host,
// so fp16 lanes sync once per step (prefer bf16, which needs none).
void Trainer::fp16Step(const torch::Tensor& loss) {
    (loss * m_scale).backward();
    m_timer->mark(Phase::Backward);
    if (m_dist) {
        m_dist->finishGradients();
        m_timer->mark(Phase::Communication);
    }
    std::vector<torch::Tensor> grads;
    for (auto& p : m_model->parameters()) {
        if (p.grad().defined()) {
            grads.push_back(p.grad());
        }
    }
    m_foundInf.zero_();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, m_foundInf, m_scale.reciprocal());
    if (m_foundInf.item<float>() == 0.0f) {
        m_optimizer->step();
    }
    // Growth factor 2, backoff 0.5, growth interval 2000: torch.amp.GradScaler's defaults.
    at::_amp_update_scale_(m_scale, m_growth, m_foundInf, 2.0, 0.5, 2000);
    m_timer->mark(Phase::Optimizer);
}

} // namespace devicerace::detail
