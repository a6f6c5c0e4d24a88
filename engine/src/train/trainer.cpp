// The training loop of one lane (runs in the lane's thread). Timing rules: see
// ../shared/design/ARCHITECTURE.md — no host sync per step, CUDA synchronised only at
// report points, evaluation on the lane clock but outside throughput intervals.
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "devicerace/errors.h"
#include "train/host_allocator.h"
#include "train/lane_context.h"
#include "data/lane_data.h"
#include "train/memory_tracker.h"
#include "devicerace/workload.h"
#include "models/models.h"

namespace devicerace::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Steps buffered on the device between report points; a report is forced when full.
constexpr std::int64_t kStepBuffer = 4096;
// Eager steps before a CUDA graph is captured: cuDNN autotuning, lazy initialisation and the
// optimizer's first step (SGD's momentum buffers start as a gradient) stay out of the graph.
constexpr std::int64_t kGraphWarmupSteps = 3;
// Characters generated at each charlstm evaluation, and the sampling temperature.
constexpr int kSampleChars = 200;
constexpr double kSampleTemperature = 0.5;
// A lane whose training loss exceeds this multiple of its first value is declared diverged.
constexpr double kDivergenceFactor = 1000.0;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double unixNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Turns autocast on for the lane's thread while alive (forward + loss only, never backward).
class AutocastScope {
public:
    AutocastScope(Precision p, c10::DeviceType device) : m_device(device) {
        if (p == Precision::Fp32) {
            return;
        }
        m_active = true;
        at::autocast::set_autocast_dtype(device, p == Precision::Bf16 ? at::kBFloat16 : at::kHalf);
        at::autocast::set_autocast_enabled(device, true);
    }
    ~AutocastScope() {
        if (m_active) {
            at::autocast::set_autocast_enabled(m_device, false);
        }
    }
    AutocastScope(const AutocastScope&) = delete;
    AutocastScope& operator=(const AutocastScope&) = delete;

private:
    c10::DeviceType m_device;
    bool m_active = false;
};

// Process-wide CUDA settings, made once when the first CUDA lane starts: cuDNN picks the
// fastest algorithm per shape, and fp32 convolutions and matrix products may use TF32 (the
// PyTorch peers in bench/ set the same).
void configureCudaOnce() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto& context = at::globalContext();
        context.setBenchmarkCuDNN(true);
        context.setAllowTF32CuDNN(true);
        context.setFloat32MatmulPrecision("high");
    });
}

class Trainer {
public:
    explicit Trainer(LaneContext& ctx) : m_ctx(ctx), m_dev(ctx.spec.device) {}

    LaneOutcome run() {
        const bool cuda = m_dev.is_cuda();
        // Per-lane CPU threads: the first call forces the lazy per-thread init that would
        // otherwise re-apply the global value later (measured, see LIBTORCH.md).
        (void)at::get_num_threads();
        at::set_num_threads(m_ctx.threads);
        std::optional<CpuMemoryScope> cpuMemory;
        std::optional<c10::cuda::CUDAGuard> deviceGuard;
        std::optional<c10::cuda::CUDAStreamGuard> streamGuard;
        if (cuda) {
            // CUDA's lazy initialisation (the caching allocator among it) must precede the first
            // allocator call below; C++ has no torch.cuda.init() doing it for us.
            at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
            configureCudaOnce();
            deviceGuard.emplace(m_dev);
            // One pool stream per lane, so a report-point sync waits for this lane only.
            streamGuard.emplace(c10::cuda::getStreamFromPool(false, m_dev.index()));
            c10::cuda::CUDACachingAllocator::resetPeakStats(m_dev.index());
        } else {
            cpuMemory.emplace();
            m_cpuMemory = &cpuMemory->tracker();
            if (!std::getenv("DEVICERACE_KEEP_DENORMALS")) {
                m_flushDenormals = at::globalContext().setFlushDenormal(true);
            }
            m_cachingHostAllocator = useCachingHostAllocator();
        }
        // The autocast weight cache is process-global; lanes must not share it.
        at::autocast::set_autocast_cache_enabled(false);

        m_workload = &workloadImpl(m_ctx.settings.workload);
        at::Generator initGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
        m_gen = initGen;
        if (cuda) {
            m_gen = at::cuda::detail::createCUDAGenerator(m_dev.index());
            m_gen.set_current_seed(m_ctx.settings.seed);
        }
        ModelOptions modelOptions;
        modelOptions.fusedLstm = m_ctx.fusedLstm;
        modelOptions.vocabulary = m_ctx.settings.data->vocabulary;
        m_model = m_workload->makeModel(initGen, modelOptions);
        m_model->to(m_dev);
        if (m_ctx.channelsLast) {
            // Before the optimizer is built, so its state follows the same layout.
            torch::NoGradGuard noGrad;
            for (auto& p : m_model->parameters()) {
                if (p.dim() == 4) {
                    p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
                }
            }
        }
        m_model->gen = m_gen;
        m_data = loadLaneData(*m_ctx.settings.data, m_dev, m_gen, m_ctx.batch, m_ctx.dataOnHost);
        // Epoch orders come from a host generator seeded like the lane's own, so every lane with
        // one seed sees the batches in the same order, wherever its data lives.
        m_hostGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
        if (m_data.onHost) {
            m_batcher = std::make_unique<PinnedBatcher>(m_data, m_ctx.batch);
        }
        if (m_data.onHost || m_ctx.cudaGraph) {
            // One device batch, refilled every step (a graph's inputs must stay at one address).
            auto xShape = m_data.trainX.sizes().vec();
            xShape[0] = m_ctx.batch;
            m_batchX = at::empty(xShape, m_data.trainX.options().device(m_dev).pinned_memory(false));
            m_batchY = at::empty({m_ctx.batch}, m_data.trainY.options().device(m_dev).pinned_memory(false));
        }
        OptimizerSettings opt;
        opt.lr = m_ctx.lr;
        opt.weightDecay = m_ctx.weightDecay;
        opt.momentum = m_ctx.momentum;
        m_optimizer = makeLaneOptimizer(m_workload->optimizer, m_model->parameters(), opt, m_ctx.fusedOptimizer);
        if (m_ctx.cudaGraph && !m_optimizer->captureSafe()) {
            throw UsageError(fmt::format("lane {}: graph=true needs fused=true ({} reads its step count on the host)",
                                         m_ctx.spec.name, m_optimizer->describe()));
        }
        describeExecution();

        auto bufOpts = torch::TensorOptions().device(m_dev);
        m_lossBuf = torch::zeros({kStepBuffer}, bufOpts.dtype(torch::kFloat32));
        m_correctBuf = torch::zeros({kStepBuffer}, bufOpts.dtype(torch::kLong));
        if (m_ctx.spec.precision == Precision::Fp16) {
            m_scale = torch::full({1}, 65536.0, bufOpts.dtype(torch::kFloat32));
            m_growth = torch::zeros({1}, bufOpts.dtype(torch::kInt32));
            m_foundInf = torch::zeros({1}, bufOpts.dtype(torch::kFloat32));
        }
        m_model->train();
        return loop();
    }

private:
    LaneOutcome loop() {
        const std::int64_t n = m_data.trainCount;
        const std::int64_t pool = m_data.trainX.size(0); // < n for pooled synthetic data
        const std::int64_t b = m_ctx.batch;
        m_start = Clock::now();
        m_intervalStart = m_start;
        emitState(LaneState::Running, {});
        std::int64_t lastEvalStep = -1;
        torch::Tensor perm;
        std::int64_t pos = n; // position in the current epoch's permutation
        // A captured step has one batch shape: graph lanes drop an epoch's last partial batch.
        const auto epochDone = [&] { return pos >= n || (m_ctx.cudaGraph && n - pos < b); };
        const bool scheduled = m_ctx.schedule != "constant";
        while (m_step < m_ctx.totalSteps) {
            if (m_ctx.stopRequested.load(std::memory_order_relaxed)) {
                if (auto d = report()) {
                    return *d;
                }
                return {LaneState::Stopped, fmt::format("stopped at step {}", m_step)};
            }
            if (m_ctx.pauseRequested.load(std::memory_order_relaxed)) {
                if (auto d = report()) {
                    return *d;
                }
                emitState(LaneState::Paused, {});
                m_paused += m_ctx.waitWhilePaused();
                m_intervalStart = Clock::now();
                emitState(LaneState::Running, {});
                continue;
            }
            if (epochDone()) {
                perm = torch::randperm(n, m_hostGen, torch::TensorOptions().dtype(torch::kLong));
                if (!m_data.onHost) {
                    perm = perm.to(m_dev);
                }
                pos = 0;
            }
            if (m_ctx.settings.failAtStep > 0 && m_step + 1 == m_ctx.settings.failAtStep) {
                throw Error(fmt::format("injected fault at step {}", m_step + 1));
            }
            if (!m_ctx.fault.kind.empty() && m_step + 1 == m_ctx.fault.step) {
                injectFault(m_ctx.fault);
            }
            const std::int64_t take = std::min(b, n - pos);
            auto idx = perm.narrow(0, pos, take);
            if (pool < n) {
                idx = idx.remainder(pool);
            }
            if (scheduled) {
                m_optimizer->setLr(m_ctx.lr * scheduleFactor(m_ctx.schedule, m_step, m_ctx.totalSteps));
            }
            trainStep(idx);
            pos += take;
            ++m_step;
            m_samples += take;

            const bool epochEnd = epochDone();
            const bool last = m_step == m_ctx.totalSteps;
            const bool evalDue = epochEnd || (m_ctx.settings.evalEverySteps > 0 &&
                                              m_step % m_ctx.settings.evalEverySteps == 0);
            if (epochEnd) {
                ++m_epochsDone;
            }
            if (m_inBuf == kStepBuffer || m_step == m_ctx.settings.warmupSteps || evalDue || last ||
                seconds(Clock::now() - m_intervalStart) >= m_ctx.settings.reportIntervalSeconds) {
                if (auto d = report()) {
                    return *d;
                }
            }
            if (evalDue || (last && lastEvalStep != m_step)) {
                evaluate();
                lastEvalStep = m_step;
            }
        }
        return {LaneState::Finished, {}};
    }

    torch::Tensor lossOf(const torch::Tensor& logits, const torch::Tensor& y, bool sum) const {
        const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
        if (m_workload->task == Task::Binary) {
            return at::binary_cross_entropy_with_logits(logits.squeeze(1), y.to(torch::kFloat32), {}, {}, reduction);
        }
        return at::cross_entropy_loss(logits, y, {}, reduction);
    }

    torch::Tensor correctOf(const torch::Tensor& logits, const torch::Tensor& y) const {
        if (m_workload->task == Task::Binary) {
            return logits.squeeze(1).gt(0).eq(y).sum();
        }
        return logits.argmax(1).eq(y).sum();
    }

    struct StepOutput {
        torch::Tensor loss, correct; // 0-dim, on the device
    };

    // One training step on the batch `idx` (rows of the training set; on the host when the
    // data is), eager or replayed from the captured graph.
    void trainStep(const torch::Tensor& idx) {
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
        StepOutput out;
        if (m_graph) {
            m_graph->replay();
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
    }

    StepOutput computeStep(const torch::Tensor& rawX, const torch::Tensor& y) {
        const auto x = prepareInput(rawX, m_data, m_workload->info.inputShape, m_ctx.channelsLast);
        torch::Tensor logits, loss;
        {
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            logits = m_model->forward(x).to(torch::kFloat32);
            loss = lossOf(logits, y, false);
        }
        m_optimizer->zeroGrad();
        if (m_scale.defined()) {
            fp16Step(loss);
        } else {
            loss.backward();
            m_optimizer->step();
        }
        return {loss.detach(), correctOf(logits.detach(), y)};
    }

    // Records forward, backward and the optimizer step of one batch as a CUDA graph: every
    // later step is one launch. The gradients are allocated inside the graph's memory pool and
    // rewritten in place by each replay; dropout draws from the lane's registered generator.
    void capture(const torch::Tensor& x, const torch::Tensor& y) {
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
    void fp16Step(const torch::Tensor& loss) {
        (loss * m_scale).backward();
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
    }

    // Reads the buffered step results once (the only host sync in steady state) and emits a
    // Train sample. Returns an outcome when the loss became non-finite.
    std::optional<LaneOutcome> report() {
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
        s.loss = summed > 0 ? std::optional<double>(sum / static_cast<double>(summed)) : std::nullopt;
        s.accuracy = static_cast<double>(correct) / static_cast<double>(samples);
        s.samplesPerSec = dt > 0 ? std::optional<double>(samples / dt) : std::nullopt;
        s.stepsPerSec = dt > 0 ? std::optional<double>(steps / dt) : std::nullopt;
        s.intervalSeconds = dt;
        s.warmup = m_reportedStep < m_ctx.settings.warmupSteps;
        m_ctx.emit(std::move(s));
        m_inBuf = 0;
        m_reportedStep = m_step;
        m_reportedSamples = m_samples;
        m_intervalStart = Clock::now();
        if (badStep) {
            return LaneOutcome{LaneState::Diverged, fmt::format("diverged at step {}: {}", *badStep, why)};
        }
        return std::nullopt;
    }

    void evaluate() {
        emitState(LaneState::Evaluating, {});
        const auto evalStart = Clock::now();
        torch::NoGradGuard noGrad;
        m_model->eval();
        const std::int64_t n = m_data.testX.size(0);
        auto lossSum = torch::zeros({}, torch::TensorOptions().device(m_dev));
        auto correct = torch::zeros({}, torch::TensorOptions().device(m_dev).dtype(torch::kLong));
        for (std::int64_t i = 0; i < n; i += m_ctx.evalBatch) {
            const auto take = std::min(m_ctx.evalBatch, n - i);
            auto x = m_data.testX.narrow(0, i, take).to(m_dev, /*non_blocking=*/true);
            x = prepareInput(x, m_data, m_workload->info.inputShape, m_ctx.channelsLast);
            auto y = m_data.testY.narrow(0, i, take).to(m_dev, /*non_blocking=*/true);
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            auto logits = m_model->forward(x).to(torch::kFloat32);
            lossSum += lossOf(logits, y, true);
            correct += correctOf(logits, y);
        }
        std::string text;
        if (m_workload->info.samplesText) {
            text = sampleText();
        }
        m_model->train();
        const double loss = lossSum.item<double>() / static_cast<double>(n);
        const double acc = static_cast<double>(correct.item<std::int64_t>()) / static_cast<double>(n);
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
        m_intervalStart = Clock::now();
    }

    // Generates text from a test window, one character at a time (the Keras example's loop),
    // sampling with the lane's generator. Called inside evaluate() (no gradients, eval mode).
    std::string sampleText() {
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

    void describeExecution() {
        std::string text = m_optimizer->describe();
        if (m_dev.is_cuda()) {
            text += m_ctx.cudaGraph ? ", CUDA graph" : ", eager";
            text += m_data.onHost ? ", pinned host data (prefetched)" : ", data on the GPU";
        }
        if (m_ctx.spec.precision != Precision::Fp32) {
            text += ", " + toString(m_ctx.spec.precision) + " autocast";
        }
        if (m_ctx.channelsLast) {
            text += ", channels_last";
        }
        if (m_flushDenormals) {
            text += ", denormals flushed";
        }
        if (m_cachingHostAllocator) {
            text += ", caching host allocator";
        }
        if (m_ctx.describeExecution) {
            m_ctx.describeExecution(std::move(text));
        }
    }

    MetricSample base(SampleKind kind) const {
        MetricSample s;
        s.kind = kind;
        s.lane = m_ctx.spec.name;
        s.step = m_step;
        s.samples = m_samples;
        s.epoch = m_ctx.stepsPerEpoch > 0 ? static_cast<double>(m_step) / static_cast<double>(m_ctx.stepsPerEpoch) : 0;
        s.time = seconds(Clock::now() - m_start) - m_paused;
        s.wallTime = unixNow();
        s.memoryBytes = peakMemory();
        return s;
    }

    std::optional<std::uint64_t> peakMemory() const {
        if (m_dev.is_cuda()) {
            auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(m_dev.index());
            return static_cast<std::uint64_t>(stats.allocated_bytes[0].peak); // index 0: all pools
        }
        if (m_cpuMemory) {
            return static_cast<std::uint64_t>(std::max<std::int64_t>(0, m_cpuMemory->peak()));
        }
        return std::nullopt;
    }

    void emitState(LaneState state, std::string message) {
        MetricSample s = base(SampleKind::State);
        s.state = state;
        s.message = std::move(message);
        m_ctx.emit(std::move(s));
    }

    LaneContext& m_ctx;
    const WorkloadImpl* m_workload = nullptr;
    torch::Device m_dev;
    at::Generator m_gen;
    std::shared_ptr<Net> m_model;
    std::unique_ptr<LaneOptimizer> m_optimizer;
    DeviceData m_data;
    at::Generator m_hostGen;                  // epoch permutations (on the host)
    std::unique_ptr<PinnedBatcher> m_batcher; // resident=false
    torch::Tensor m_batchX, m_batchY;         // the reused device batch (graph or resident=false)
    std::unique_ptr<at::cuda::CUDAGraph> m_graph;
    StepOutput m_graphOutput;                 // the captured step's outputs, rewritten by each replay
    const CpuMemoryTracker* m_cpuMemory = nullptr;
    torch::Tensor m_lossBuf, m_correctBuf;
    torch::Tensor m_scale, m_growth, m_foundInf; // fp16 loss scaling
    std::int64_t m_inBuf = 0;
    std::int64_t m_step = 0, m_samples = 0, m_epochsDone = 0;
    std::int64_t m_reportedStep = 0, m_reportedSamples = 0;
    Clock::time_point m_start, m_intervalStart;
    double m_paused = 0; // seconds spent paused, excluded from the lane clock
    bool m_flushDenormals = false; // CPU lane thread: denormal floats flushed to zero
    bool m_cachingHostAllocator = false; // CPU lane: large blocks recycled (host_allocator.h)
    std::optional<double> m_firstLoss; // first finite training loss (divergence reference)
};

} // namespace

LaneOutcome runTraining(LaneContext& ctx) {
    Trainer trainer(ctx);
    return trainer.run();
}

std::string describeException(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const c10::OutOfMemoryError& err) {
        return fmt::format("out of memory: {} (try a smaller batch)", err.what_without_backtrace());
    } catch (const c10::Error& err) {
        std::string msg = err.what_without_backtrace();
        if (msg.find("out of memory") != std::string::npos) {
            return fmt::format("out of memory: {} (try a smaller batch)", msg);
        }
        return msg;
    } catch (const std::bad_alloc&) {
        return "out of memory (host allocation failed; try a smaller batch or fewer lanes)";
    } catch (const std::exception& err) {
        return err.what();
    } catch (...) {
        return "unknown error";
    }
}

} // namespace devicerace::detail
