// Report points, evaluations and the samples a lane emits.
#include "train/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "devices/cpu_info.h"

namespace devicerace::detail {

// Reads the buffered step results once (the only host sync in steady state) and emits a
// Train sample. Returns an outcome when the loss became non-finite.
std::optional<LaneOutcome> Trainer::report() {
    if (m_inBuf == 0) {
        return std::nullopt;
    }
    if (m_dev.is_cuda()) {
        c10::cuda::getCurrentCUDAStream().synchronize();
    }
    const auto now = Clock::now();
    const double dt = seconds(now - m_intervalStart);
    auto losses = m_lossBuf.narrow(0, 0, m_inBuf).to(torch::kCPU);
    const auto correct = m_correctBuf.narrow(0, 0, m_inBuf).sum().item<std::int64_t>();
    const std::int64_t steps = m_step - m_reportedStep;
    const std::int64_t samples = m_samples - m_reportedSamples;
    const float* l = losses.data_ptr<float>();
    double sum = 0;
    std::int64_t summed = 0; // finite losses before any divergence
    std::optional<std::int64_t> badStep;
    std::string why;
    for (std::int64_t i = 0; i < m_inBuf; ++i) {
        if (!m_firstLoss && std::isfinite(l[i])) {
            m_firstLoss = l[i];
        }
        if (!std::isfinite(l[i])) {
            badStep = m_reportedStep + i + 1;
            why = fmt::format("the training loss became {}", std::isnan(l[i]) ? "NaN" : "infinite");
            break;
        }
        // A loss this far above its starting value never comes back (RMSprop/Adam keep huge
        // steps finite, so NaN alone misses many blow-ups).
        if (m_firstLoss && l[i] > kDivergenceFactor * std::max(1.0, *m_firstLoss)) {
            badStep = m_reportedStep + i + 1;
            why = fmt::format("the training loss reached {:.3g}, over {:.0f}x its first value {:.3g}", l[i],
                              kDivergenceFactor, *m_firstLoss);
            break;
        }
        sum += l[i];
        ++summed;
    }
    MetricSample s = base(SampleKind::Train);
    s.time = seconds(now - m_start) - m_paused;
    // Every rank takes its own breakdown (a data-parallel lane gathers them below).
    std::map<std::string, double> breakdown;
    if (m_timer && steps > 0) {
        breakdown = m_timer->take(dt / static_cast<double>(steps));
    }
    double lossSum = sum, lossCount = static_cast<double>(summed), correctAll = static_cast<double>(correct);
    if (m_dist) {
        // A report point is a barrier: every rank's figures, summed over the lane; rank 0's
        // clock times the interval (the ranks step together: each step ends in an allreduce).
        DistGroup::Stats mine{};
        mine[DistGroup::LossSum] = sum;
        mine[DistGroup::LossCount] = static_cast<double>(summed);
        mine[DistGroup::Correct] = static_cast<double>(correct);
        mine[DistGroup::Seconds] = dt;
        mine[DistGroup::WaitSeconds] = m_dist->takeWaitSeconds();
        for (std::size_t p = 0; p < kPhases; ++p) {
            const auto it = breakdown.find(phaseName(static_cast<Phase>(p)));
            mine[DistGroup::PhaseFirst + p] = it == breakdown.end() ? -1.0 : it->second;
        }
        const auto all = m_dist->gather(mine);
        lossSum = lossCount = correctAll = 0;
        double share = 0;
        for (const auto& r : all) {
            lossSum += r[DistGroup::LossSum];
            lossCount += r[DistGroup::LossCount];
            correctAll += r[DistGroup::Correct];
            const double t = r[DistGroup::Seconds];
            s.workerSamplesPerSec.push_back(t > 0 ? static_cast<double>(samples) / m_dist->world() / t : 0.0);
            share += t > 0 ? r[DistGroup::WaitSeconds] / t : 0.0;
            std::map<std::string, double> phases; // this rank's own breakdown
            for (std::size_t p = 0; p < kPhases; ++p) {
                if (r[DistGroup::PhaseFirst + p] >= 0) {
                    phases[phaseName(static_cast<Phase>(p))] = r[DistGroup::PhaseFirst + p];
                }
            }
            s.workerStepBreakdown.push_back(std::move(phases));
        }
        s.allreduceShare = share / m_dist->world();
    }
    s.loss = lossCount > 0 ? std::optional<double>(lossSum / lossCount) : std::nullopt;
    s.accuracy = correctAll / static_cast<double>(samples * targetsPerExample());
    s.samplesPerSec = dt > 0 ? std::optional<double>(samples / dt) : std::nullopt;
    s.stepsPerSec = dt > 0 ? std::optional<double>(steps / dt) : std::nullopt;
    s.intervalSeconds = dt;
    s.warmup = m_reportedStep < m_ctx.settings.warmupSteps;
    // The rate the last step trained with (the window marks a schedule's boundaries).
    s.lr = m_ctx.lr * scheduleFactor(m_ctx.schedule, std::max<std::int64_t>(0, m_step - 1), m_ctx.totalSteps);
    s.stepBreakdown = std::move(breakdown);
    if (m_fusedStep) {
        s.threadSpeeds = m_fusedStep->threadSpeeds();
    }
    if (m_energy) {
        s.energyJoules = m_energy->read();
    }
    if (m_load) {
        if (const auto load = m_load->read()) {
            s.otherCpus = load->otherCpus;
            s.stealShare = load->stealShare;
        }
    }
    if (isReporter()) {
        m_ctx.emit(std::move(s));
    }
    m_inBuf = 0;
    m_reportedStep = m_step;
    m_reportedSamples = m_samples;
    m_intervalStart = Clock::now();
    if (badStep) {
        return LaneOutcome{LaneState::Diverged, fmt::format("diverged at step {}: {}", *badStep, why)};
    }
    return std::nullopt;
}

void Trainer::evaluate() {
    emitState(LaneState::Evaluating, {});
    const auto evalStart = Clock::now();
    torch::NoGradGuard noGrad;
    m_model->eval();
    const std::int64_t n = m_data.testX.size(0);
    auto lossSum = torch::zeros({}, torch::TensorOptions().device(m_dev));
    auto correct = torch::zeros({}, torch::TensorOptions().device(m_dev).dtype(torch::kLong));
    const bool fused = fusedEvaluation();
    for (std::int64_t i = 0; i < n; i += m_ctx.evalBatch) {
        const auto take = std::min(m_ctx.evalBatch, n - i);
        auto x = m_data.testX.narrow(0, i, take).to(m_dev, /*non_blocking=*/true);
        x = prepareInput(x, m_data, m_workload->info.inputShape, m_ctx.channelsLast);
        auto y = m_data.testY.narrow(0, i, take).to(m_dev, /*non_blocking=*/true);
        splitTargets(x, y);
        if (fused) {
            if (const auto r = m_fusedStep->evaluate(x, y)) {
                lossSum += r->lossSum;
                correct += r->correct;
                continue;
            }
        }
        AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
        auto logits = m_model->forward(x).to(torch::kFloat32);
        lossSum += lossOf(logits, y, true);
        correct += correctOf(logits, y);
    }
    std::string text;
    if (m_workload->info.samplesText) {
        text = m_workload->task == Task::LanguageModel ? sampleLanguageModel() : sampleText();
    }
    m_model->train();
    const auto scored = static_cast<double>(n * targetsPerExample());
    const double loss = lossSum.item<double>() / scored;
    const double acc = static_cast<double>(correct.item<std::int64_t>()) / scored;
    const auto now = Clock::now();
    MetricSample s = base(SampleKind::Eval);
    s.time = seconds(now - m_start) - m_paused;
    s.loss = loss;
    s.accuracy = acc;
    s.intervalSeconds = seconds(now - evalStart);
    s.text = std::move(text);
    m_ctx.emit(std::move(s));
    emitState(LaneState::Running, {});
    // Evaluation is on the lane clock (time to accuracy) but not in throughput intervals.
    restartInterval();
}

bool Trainer::fusedEvaluation() const { return m_fusedEvaluation; }

void Trainer::restartInterval() {
    m_intervalStart = Clock::now();
    // The counters read per interval start again too: their next reading is the interval's.
    if (m_energy) {
        (void)m_energy->read();
    }
    if (m_load) {
        (void)m_load->read();
    }
}

// Generates text from a test window, one character at a time (the Keras example's loop),
// sampling with the lane's generator. Called inside evaluate() (no gradients, eval mode).
std::string Trainer::sampleText() {
    const auto& vocab = m_ctx.settings.data->tokenText;
    if (vocab.empty() || m_data.testX.size(0) == 0) {
        return {};
    }
    auto window = m_data.testX[0].unsqueeze(0).clone(); // (1, T) token ids
    std::string out;
    for (const auto id : std::vector<std::int64_t>(window[0].cpu().data_ptr<std::int64_t>(),
                                                   window[0].cpu().data_ptr<std::int64_t>() + window.size(1))) {
        out += vocab.at(static_cast<std::size_t>(id));
    }
    out += "\u2502"; // a bar between the seed and what the model wrote
    for (int i = 0; i < kSampleChars; ++i) {
        auto logits = m_model->forward(window).to(torch::kFloat32) / kSampleTemperature;
        auto next = at::multinomial(logits.softmax(1), 1, false, m_gen); // (1, 1)
        const auto id = next.item<std::int64_t>();
        out += vocab.at(static_cast<std::size_t>(id));
        window = torch::cat({window.narrow(1, 1, window.size(1) - 1), next}, 1);
    }
    return out;
}

std::string Trainer::sampleLanguageModel() {
    const auto& vocab = m_ctx.settings.data->tokenText;
    if (vocab.empty() || m_data.testX.size(0) == 0) {
        return {};
    }
    const auto context = m_workload->info.tokensPerSample;
    const auto newline = std::find(vocab.begin(), vocab.end(), "\n");
    std::vector<std::int64_t> ids{newline != vocab.end() ? newline - vocab.begin()
                                                         : m_data.testX[0][0].item<std::int64_t>()};
    auto gen = at::detail::createCPUGenerator(m_ctx.settings.seed);
    std::string out;
    for (int i = 0; i < kLmSampleChars; ++i) {
        const auto from = std::max<std::int64_t>(0, static_cast<std::int64_t>(ids.size()) - context);
        auto window = torch::tensor(std::vector<std::int64_t>(ids.begin() + from, ids.end()), torch::kLong)
                          .unsqueeze(0)
                          .to(m_dev);
        torch::Tensor logits;
        {
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            logits = m_model->forward(window).select(1, -1).to(torch::kFloat32);
        }
        auto probs = (logits / kLmSampleTemperature).softmax(1).to(torch::kCPU);
        const auto id = at::multinomial(probs, 1, false, gen).item<std::int64_t>();
        ids.push_back(id);
        out += vocab.at(static_cast<std::size_t>(id));
    }
    return out;
}

void Trainer::describeExecution() {
    std::string text = m_optimizer->describe();
    if (m_fusedStep) {
        text = m_fusedStep->describe() + ", " + text;
        if (const auto threads = m_fusedStep->describeThreads(); !threads.empty()) {
            text += ", " + threads;
        }
    } else if (!m_fusedStepOff.empty() && m_dev.is_cpu()) {
        text = "autograd step (" + m_fusedStepOff + "), " + text;
    }
    if (m_dev.is_cuda()) {
        text += m_ctx.cudaGraph ? ", CUDA graph" : ", eager";
        text += m_data.onHost ? ", pinned host data (prefetched)" : ", data on the GPU";
    }
    if (m_ctx.spec.precision != Precision::Fp32 && !m_fusedStep) {
        text += ", " + toString(m_ctx.spec.precision) + " autocast";
    }
    if (m_ctx.spec.precision == Precision::Bf16 && m_dev.is_cpu() && hostBf16Units().empty()) {
        text += ", bf16 emulated (this CPU has neither AMX nor AVX-512 BF16)";
    }
    if (!m_bf16SlowerNote.empty()) {
        text += ", " + m_bf16SlowerNote;
    }
    if (m_ctx.channelsLast) {
        text += ", channels_last";
    }
    // The plan's fast paths (kernels/fast_paths.h), each named where this network has the layer
    // it replaces (the network's flag is the plan's lever for the layers it has).
    if (m_model->fusedPool) {
        text += ", one-pass relu + max pool + dropout";
    }
    if (m_model->fusedNorm) {
        text += ", one-pass batch norm (+ residual add) + relu";
    }
    if (m_model->tunedConvs) {
        const bool bf16 = m_ctx.spec.precision == Precision::Bf16;
        const bool noUnits = hostBf16Units().empty();
        text += bf16 && noUnits ? ", convolutions on their bf16 values in fp32 arithmetic (no bf16 units), conv "
                                  "weight gradients by im2col + GEMM where timed faster than oneDNN"
                : bf16          ? ", conv weight gradients by the AVX-512 BF16 kernel where timed faster than oneDNN"
                                : ", conv weight gradients by im2col + GEMM where timed faster than oneDNN";
        if (m_ctx.spec.precision == Precision::Bf16 && !m_bf16SlowerNote.empty()) {
            // (kernels/conv_wgrad_node.cpp: timed per shape where the bf16 peak is below the fp32 one)
            text += ", convolutions on their bf16 values in fp32 arithmetic where timed faster than in bf16";
        }
    }
    if (fusedEvaluation()) {
        text += ", evaluated by the fused step's own forward";
    }
    if (m_model->denseRoutes && !fusedEvaluation()) {
        // (kernels/dense_bf16_node.cpp: each GEMM shape's route, chosen at its first use)
        const auto routes = describeDenseRoutes(*m_model->denseRoutes);
        // (a fused step trains without the modules' dense layers: only the evaluation runs them)
        text +=
            std::string(m_fusedStep ? ", evaluation's dense layers' bf16 GEMMs: " : ", dense layers' bf16 GEMMs: ") +
            (routes.empty() ? std::string("each shape's fastest route, timed at its first use") : routes);
    }
    if (m_model->tokenLstm) {
        text += ", LSTM over token ids (input as a row gather, gates in one pass)";
    }
    if (m_model->onePassCells) {
        text += ", LSTM cells with their gates in one pass";
    }
    if (m_model->hashedDropout && !m_fusedStep) {
        text += m_ctx.fast.optimizer ? ", hashed dropout masks" : ", the fast paths' hashed dropout masks (tests)";
    }
    if (!m_ctx.fast.any()) {
        text += ", plain LibTorch";
    }
    if (m_ctx.augment) {
        text += ", crop-flip augmentation (each example, in the data phase)";
    }
    if (m_flushDenormals) {
        text += ", denormals flushed";
    }
    if (m_cachingHostAllocator) {
        text += ", caching host allocator";
    }
    if (m_dist) {
        text += ", " + m_dist->describe();
    }
    if (m_ctx.describeExecution) {
        m_ctx.describeExecution(std::move(text));
    }
}

MetricSample Trainer::base(SampleKind kind) const {
    MetricSample s;
    s.kind = kind;
    s.lane = m_ctx.spec.name;
    s.step = m_step;
    s.samples = m_samples;
    s.epoch = m_ctx.stepsPerEpoch > 0 ? static_cast<double>(m_step) / static_cast<double>(m_ctx.stepsPerEpoch) : 0;
    s.time = seconds(Clock::now() - m_start) - m_paused;
    s.wallTime = wallClockNow();
    s.memoryBytes = peakMemory();
    return s;
}

std::optional<std::uint64_t> Trainer::peakMemory() const {
    if (m_dev.is_cuda()) {
        auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(m_dev.index());
        return static_cast<std::uint64_t>(stats.allocated_bytes[0].peak); // index 0: all pools
    }
    if (m_cpuMemory) {
        return static_cast<std::uint64_t>(std::max<std::int64_t>(0, m_cpuMemory->peak()));
    }
    return std::nullopt;
}

void Trainer::emitState(LaneState state, std::string message) {
    MetricSample s = base(SampleKind::State);
    if (state == LaneState::Running && !m_explainSent) {
        s.flopsPerSample = m_explain.flopsPerSample;
        s.peakFlopsPerSec = m_explain.peakFlopsPerSec;
        s.peakSource = m_explain.peakSource;
        s.energySource = m_explain.energySource;
        s.machineCpus = m_explain.machineCpus;
        m_explainSent = true;
        if (m_energy) {
            (void)m_energy->read(); // the count starts here
        }
        if (m_load) {
            (void)m_load->read();
        }
    }
    s.state = state;
    s.message = std::move(message);
    m_ctx.emit(std::move(s));
}

} // namespace devicerace::detail
