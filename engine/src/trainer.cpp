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

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "devicerace/errors.h"
#include "lane_context.h"
#include "memory_tracker.h"
#include "models.h"

namespace devicerace::detail {

namespace {

using Clock = std::chrono::steady_clock;

// Steps buffered on the device between report points; a report is forced when full.
constexpr std::int64_t kStepBuffer = 4096;
// Examples per forward pass during evaluation (no gradients, so larger than training).
constexpr std::int64_t kEvalBatch = 1000;
// A lane whose training loss exceeds this multiple of its first value is declared diverged.
constexpr double kDivergenceFactor = 1000.0;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double unixNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct DeviceData {
    torch::Tensor trainX, trainY, testX, testY;
};

// Real data: bytes -> float [0,1] on the lane's device. Synthetic: generated on the device
// from the lane's generator, labels fixed for the whole run (tf_cnn_benchmarks style).
DeviceData toDevice(const ImageDataset& ds, const torch::Device& dev, at::Generator& gen) {
    DeviceData d;
    auto make = [&](const ImageSet& set, torch::Tensor& x, torch::Tensor& y) {
        const auto shape = std::vector<std::int64_t>{set.count, set.channels, set.height, set.width};
        if (ds.synthetic) {
            x = at::rand(shape, gen, torch::TensorOptions().device(dev));
            y = at::randint(0, ds.classes, {set.count}, gen, torch::TensorOptions().device(dev).dtype(torch::kLong));
        } else {
            auto* pixels = const_cast<std::uint8_t*>(set.pixels.data());
            auto* labels = const_cast<std::uint8_t*>(set.labels.data());
            // from_blob never writes; .to() copies into tensors the lane owns.
            x = torch::from_blob(pixels, shape, torch::kUInt8).to(dev, torch::kFloat32).div_(255.0);
            y = torch::from_blob(labels, {set.count}, torch::kUInt8).to(dev, torch::kLong);
        }
    };
    make(ds.train, d.trainX, d.trainY);
    make(ds.test, d.testX, d.testY);
    return d;
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

        const auto& workload = workloadImpl(m_ctx.settings.workload);
        at::Generator initGen = at::detail::createCPUGenerator(m_ctx.settings.seed);
        m_gen = initGen;
        if (cuda) {
            m_gen = at::cuda::detail::createCUDAGenerator(m_dev.index());
            m_gen.set_current_seed(m_ctx.settings.seed);
        }
        m_model = workload.makeModel(initGen);
        m_model->to(m_dev);
        m_model->gen = m_gen;
        m_data = toDevice(*m_ctx.settings.data, m_dev, m_gen);
        m_optimizer = workload.makeOptimizer(m_model->parameters(), m_ctx.lr);

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
        const std::int64_t n = m_data.trainX.size(0);
        const std::int64_t b = m_ctx.batch;
        m_start = Clock::now();
        m_intervalStart = m_start;
        emitState(LaneState::Running, {});
        std::int64_t lastEvalStep = -1;
        torch::Tensor perm;
        std::int64_t pos = n; // position in the current epoch's permutation
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

    void trainStep(const torch::Tensor& x, const torch::Tensor& y) {
        torch::Tensor logits, loss;
        {
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            logits = m_model->forward(x);
            loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), y);
        }
        m_optimizer->zero_grad(/*set_to_none=*/true);
        if (m_scale.defined()) {
            fp16Step(loss);
        } else {
            loss.backward();
            m_optimizer->step();
        }
        m_lossBuf.select(0, m_inBuf).copy_(loss.detach());
        m_correctBuf.select(0, m_inBuf).copy_(logits.detach().argmax(1).eq(y).sum());
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
        for (std::int64_t i = 0; i < n; i += kEvalBatch) {
            const auto take = std::min(kEvalBatch, n - i);
            auto x = m_data.testX.narrow(0, i, take);
            auto y = m_data.testY.narrow(0, i, take);
            AutocastScope autocast(m_ctx.spec.precision, m_dev.type());
            auto logits = m_model->forward(x).to(torch::kFloat32);
            lossSum += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
            correct += logits.argmax(1).eq(y).sum();
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
        m_ctx.emit(std::move(s));
        emitState(LaneState::Running, {});
        // Evaluation is on the lane clock (time to accuracy) but not in throughput intervals.
        m_intervalStart = Clock::now();
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
