// The training loop of one lane (runs in the lane's thread). Timing rules: see
// ../shared/design/ARCHITECTURE.md — no host sync per step, CUDA synchronised only at
// report points, evaluation on the lane clock but outside throughput intervals.
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/functional/upsampling.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "devicerace/errors.h"
#include "lane_context.h"
#include "memory_tracker.h"
#include "devicerace/workload.h"
#include "models.h"

namespace devicerace::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Steps buffered on the device between report points; a report is forced when full.
constexpr std::int64_t kStepBuffer = 4096;
// Synthetic data larger than this (bytes) is a pool of examples reused through the epoch
// (tf_cnn_benchmarks style): an ImageNet-sized epoch cannot be resident.
constexpr std::int64_t kSyntheticPoolBytes = 256ll << 20;
// Characters generated at each charlstm evaluation, and the sampling temperature.
constexpr int kSampleChars = 200;
constexpr double kSampleTemperature = 0.5;
// A lane whose training loss exceeds this multiple of its first value is declared diverged.
constexpr double kDivergenceFactor = 1000.0;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double unixNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct DeviceData {
    torch::Tensor trainX, trainY, testX, testY; // X: uint8 images, float images or int64 tokens
    std::int64_t trainCount = 0, testCount = 0; // examples per epoch / per evaluation
    torch::Tensor mean, stddev;                 // per-channel normalisation (undefined: none)
};

// Real data: bytes/token ids copied to the lane's device as they are (images stay uint8 and
// become float per batch: 4x less memory). Synthetic: generated on the device from the
// lane's generator with labels fixed for the whole run (tf_cnn_benchmarks style), as a pool
// of examples when the whole set would not fit.
DeviceData toDevice(const Dataset& ds, const torch::Device& dev, at::Generator& gen, std::int64_t batch) {
    DeviceData d;
    auto make = [&](const DataSplit& set, torch::Tensor& x, torch::Tensor& y) {
        std::vector<std::int64_t> shape{set.count};
        shape.insert(shape.end(), set.shape.begin(), set.shape.end());
        auto opts = torch::TensorOptions().device(dev);
        if (ds.synthetic) {
            const std::int64_t bytesPer = set.exampleSize() * 4;
            shape[0] = std::min(set.count, std::max(8 * batch, kSyntheticPoolBytes / std::max<std::int64_t>(1, bytesPer)));
            x = ds.kind == DataKind::Images ? at::rand(shape, gen, opts)
                                            : at::randint(0, ds.vocabulary, shape, gen, opts.dtype(torch::kLong));
            y = at::randint(0, ds.classes, {shape[0]}, gen, opts.dtype(torch::kLong));
            return;
        }
        if (ds.kind == DataKind::Images) {
            auto* pixels = const_cast<std::uint8_t*>(set.pixels.data());
            // from_blob never writes; .to() copies into tensors the lane owns.
            x = torch::from_blob(pixels, shape, torch::kUInt8).to(dev);
        } else {
            auto* tokens = const_cast<std::int32_t*>(set.tokens.data());
            x = torch::from_blob(tokens, shape, torch::kInt32).to(dev, torch::kLong);
        }
        auto* labels = const_cast<std::int32_t*>(set.labels.data());
        y = torch::from_blob(labels, {set.count}, torch::kInt32).to(dev, torch::kLong);
    };
    make(ds.train, d.trainX, d.trainY);
    make(ds.test, d.testX, d.testY);
    d.trainCount = ds.train.count;
    d.testCount = ds.test.count;
    if (!ds.mean.empty()) {
        const auto c = static_cast<std::int64_t>(ds.mean.size());
        d.mean = torch::tensor(ds.mean).view({1, c, 1, 1}).to(dev);
        d.stddev = torch::tensor(ds.stddev).view({1, c, 1, 1}).to(dev);
    }
    return d;
}

// One batch as the network eats it: float images scaled to [0,1] (and normalised where the
// data set says so), channel-expanded and padded/resized to the network's input shape
// (Fashion-MNIST into a CIFAR or ImageNet network); token ids as they are.
torch::Tensor prepareInput(torch::Tensor x, const DeviceData& d, const std::vector<std::int64_t>& want,
                           bool channelsLast) {
    if (x.scalar_type() == torch::kLong) {
        return x;
    }
    if (x.scalar_type() == torch::kUInt8) {
        x = x.to(torch::kFloat32).div_(255.0);
    }
    if (d.mean.defined()) {
        x = (x - d.mean) / d.stddev;
    }
    if (want.size() == 3) {
        if (x.size(1) != want[0]) {
            x = x.expand({x.size(0), want[0], x.size(2), x.size(3)});
        }
        const auto h = want[1], w = want[2];
        if (x.size(2) != h || x.size(3) != w) {
            if (h - x.size(2) > 0 && h - x.size(2) <= 8 && w - x.size(3) > 0 && w - x.size(3) <= 8) {
                const auto top = (h - x.size(2)) / 2, left = (w - x.size(3)) / 2;
                namespace F = torch::nn::functional;
                x = F::pad(x, F::PadFuncOptions({left, w - x.size(3) - left, top, h - x.size(2) - top}));
            } else {
                namespace F = torch::nn::functional;
                x = F::interpolate(x, F::InterpolateFuncOptions()
                                          .size(std::vector<std::int64_t>{h, w})
                                          .mode(torch::kBilinear)
                                          .align_corners(false));
            }
        }
        x = x.contiguous(channelsLast ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
    }
    return x;
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
            deviceGuard.emplace(m_dev);
            // One pool stream per lane, so a report-point sync waits for this lane only.
            streamGuard.emplace(c10::cuda::getStreamFromPool(false, m_dev.index()));
            c10::cuda::CUDACachingAllocator::resetPeakStats(m_dev.index());
        } else {
            cpuMemory.emplace();
            m_cpuMemory = &cpuMemory->tracker();
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
        m_data = toDevice(*m_ctx.settings.data, m_dev, m_gen, m_ctx.batch);
        OptimizerSettings opt;
        opt.lr = m_ctx.lr;
        opt.weightDecay = m_ctx.weightDecay;
        opt.momentum = m_ctx.momentum;
        m_optimizer = m_workload->makeOptimizer(m_model->parameters(), opt);

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
            if (pos >= n) {
                perm = torch::randperm(n, m_gen, torch::TensorOptions().device(m_dev).dtype(torch::kLong));
                pos = 0;
            }
            if (m_ctx.settings.failAtStep > 0 && m_step + 1 == m_ctx.settings.failAtStep) {
                throw Error(fmt::format("injected fault at step {}", m_step + 1));
            }
            const std::int64_t take = std::min(b, n - pos);
            auto idx = perm.narrow(0, pos, take);
            if (pool < n) {
                idx = idx.remainder(pool);
            }
            if (scheduled) {
                const double lr = m_ctx.lr * scheduleFactor(m_ctx.schedule, m_step, m_ctx.totalSteps);
                for (auto& group : m_optimizer->param_groups()) {
                    group.options().set_lr(lr);
                }
            }
            trainStep(m_data.trainX.index_select(0, idx), m_data.trainY.index_select(0, idx));
            pos += take;
            ++m_step;
            m_samples += take;

            const bool epochEnd = pos >= n;
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

    void trainStep(const torch::Tensor& rawX, const torch::Tensor& y) {
        const auto x = prepareInput(rawX, m_data, m_workload->info.inputShape, m_ctx.channelsLast);
        torch::Tensor logits, loss;
        {
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            logits = m_model->forward(x).to(torch::kFloat32);
            loss = lossOf(logits, y, false);
        }
        m_optimizer->zero_grad(/*set_to_none=*/true);
        if (m_scale.defined()) {
            fp16Step(loss);
        } else {
            loss.backward();
            m_optimizer->step();
        }
        m_lossBuf.select(0, m_inBuf).copy_(loss.detach());
        m_correctBuf.select(0, m_inBuf).copy_(correctOf(logits.detach(), y));
        ++m_inBuf;
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
            auto x = prepareInput(m_data.testX.narrow(0, i, take), m_data, m_workload->info.inputShape,
                                  m_ctx.channelsLast);
            auto y = m_data.testY.narrow(0, i, take);
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
    std::unique_ptr<torch::optim::Optimizer> m_optimizer;
    DeviceData m_data;
    const CpuMemoryTracker* m_cpuMemory = nullptr;
    torch::Tensor m_lossBuf, m_correctBuf;
    torch::Tensor m_scale, m_growth, m_foundInf; // fp16 loss scaling
    std::int64_t m_inBuf = 0;
    std::int64_t m_step = 0, m_samples = 0, m_epochsDone = 0;
    std::int64_t m_reportedStep = 0, m_reportedSamples = 0;
    Clock::time_point m_start, m_intervalStart;
    double m_paused = 0; // seconds spent paused, excluded from the lane clock
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
