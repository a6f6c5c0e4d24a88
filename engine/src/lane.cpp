#include "devicerace/lane.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/workload.h"
#include "host_allocator.h"
#include "lane_context.h"

namespace devicerace {

namespace {

// Most threads a lane may ask for, as a multiple of the logical CPUs (oversubscription
// must be asked for explicitly, but not absurdly).
constexpr int kMaxThreadsPerCpu = 4;

std::string resolveDevice(const std::string& device) {
    if (device == "cpu") {
        return device;
    }
    const auto& report = deviceReport();
    const std::string name = device == "cuda" ? "cuda:0" : device;
    if (!report.cudaAvailable) {
        throw UsageError(fmt::format("device {}: CUDA is not available: {}", device, report.cudaUnavailableReason));
    }
    const int index = std::stoi(name.substr(5));
    if (index < 0 || index >= static_cast<int>(report.gpus.size())) {
        throw UsageError(fmt::format("device {}: this machine has {} CUDA device{} (cuda:0{})", device,
                                     report.gpus.size(), report.gpus.size() == 1 ? "" : "s",
                                     report.gpus.size() > 1 ? fmt::format(" to cuda:{}", report.gpus.size() - 1) : ""));
    }
    return name;
}

// Share of the GPU's memory a real data set may take before a lane keeps it on the host.
constexpr double kResidentShare = 0.25;

// The fast paths: on where they help unless the lane says otherwise (docs/BENCHMARKS.md).
void resolveFastPaths(const LaneSpec& spec, const WorkloadInfo& workload, const Dataset& data,
                      detail::LaneContext& ctx) {
    const bool cuda = spec.device != "cpu";
    if (spec.graph.value_or(false) && !cuda) {
        throw UsageError(fmt::format("lane {}: graph=true applies to CUDA lanes", spec.name));
    }
    if (spec.graph.value_or(false) && spec.precision == Precision::Fp16) {
        throw UsageError(fmt::format("lane {}: graph=true cannot capture fp16 loss scaling (it decides on the host "
                                     "whether to skip a step); use precision=bf16 or graph=false",
                                     spec.name));
    }
    if (spec.graph.value_or(false) && !spec.fused.value_or(true)) {
        throw UsageError(fmt::format("lane {}: graph=true needs fused=true (torch::optim keeps its step count on the "
                                     "host, which a captured graph cannot update)",
                                     spec.name));
    }
    if (spec.resident && !cuda) {
        throw UsageError(fmt::format("lane {}: resident= applies to CUDA lanes (a CPU lane's data is already in host "
                                     "memory)",
                                     spec.name));
    }
    if (spec.resident == false && data.synthetic) {
        throw UsageError(fmt::format("lane {}: resident=false applies to real data; synthetic data is generated on "
                                     "the GPU",
                                     spec.name));
    }
    ctx.fusedOptimizer = spec.fused.value_or(true);
    ctx.cudaGraph = spec.graph.value_or(cuda && workload.cudaGraphByDefault && spec.precision != Precision::Fp16 &&
                                        ctx.fusedOptimizer && spec.lstm.value_or("fused") == "fused");
    bool resident = true;
    if (cuda && !data.synthetic) {
        const auto& gpus = deviceReport().gpus;
        const auto index = static_cast<std::size_t>(std::stoi(spec.device.substr(5)));
        const double bytes = static_cast<double>(data.train.pixels.size() + data.test.pixels.size()) +
                             8.0 * static_cast<double>(data.train.tokens.size() + data.test.tokens.size());
        resident = index >= gpus.size() || bytes <= kResidentShare * static_cast<double>(gpus[index].totalMemoryBytes);
    }
    ctx.dataOnHost = cuda && !spec.resident.value_or(resident);
}

} // namespace

struct Lane::Impl {
    detail::LaneContext ctx;
    std::thread thread;
    bool started = false;

    mutable std::mutex mutex; // guards everything below
    std::condition_variable pauseCv;
    std::vector<MetricSample> pending;
    std::vector<MetricSample> history;
    LaneState state = LaneState::Pending;
    std::string message;
    std::string execution; // how the lane trains, once it has started
    std::atomic<double> cpuSeconds{0};

    void push(MetricSample s) {
        if (std::this_thread::get_id() == thread.get_id()) {
            timespec ts{};
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
            cpuSeconds = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
        }
        if (s.wallTime == 0) {
            s.wallTime = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        }
        std::lock_guard lock(mutex);
        if (s.kind == SampleKind::State) {
            state = s.state;
            if (!s.message.empty()) {
                message = s.message;
            }
        }
        history.push_back(s);
        pending.push_back(std::move(s));
    }

    void finish(LaneState finalState, std::string text, double time) {
        MetricSample s;
        s.kind = SampleKind::State;
        s.lane = ctx.spec.name;
        s.state = finalState;
        s.message = std::move(text);
        s.time = time;
        s.wallTime = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        {
            std::lock_guard lock(mutex);
            // Carry progress forward so the final record stands on its own.
            for (auto it = history.rbegin(); it != history.rend(); ++it) {
                if (it->kind != SampleKind::State || it->step > 0) {
                    s.step = it->step;
                    s.samples = it->samples;
                    s.epoch = it->epoch;
                    s.time = std::max(s.time, it->time);
                    s.memoryBytes = it->memoryBytes;
                    break;
                }
            }
        }
        push(std::move(s));
    }

    void run() {
        push([&] {
            MetricSample s;
            s.kind = SampleKind::State;
            s.lane = ctx.spec.name;
            s.state = LaneState::Preparing;
            return s;
        }());
        // Everything a lane throws ends here: the lane fails, the others race on.
        try {
            auto outcome = detail::runTraining(ctx);
            finish(outcome.state, outcome.message, 0);
        } catch (...) {
            finish(LaneState::Failed, detail::describeException(std::current_exception()), 0);
        }
        if (ctx.spec.device == "cpu") {
            detail::releaseHostCache(); // the lane's tensors are gone (paired with start())
        }
    }
};

Lane::Lane(LaneSpec spec, LaneRunSettings settings) : m_impl(std::make_unique<Impl>()) {
    auto& ctx = m_impl->ctx;
    const auto& workload = findWorkload(settings.workload);
    if (!settings.data) {
        throw UsageError("lane has no data set");
    }
    spec.device = resolveDevice(spec.device);
    const auto& cpu = deviceReport().cpu;
    if (spec.threads && *spec.threads > cpu.logicalCpus * kMaxThreadsPerCpu) {
        throw UsageError(fmt::format("lane {}: threads={} is far more than the {} CPUs present (at most {})",
                                     spec.name, *spec.threads, cpu.logicalCpus, cpu.logicalCpus * kMaxThreadsPerCpu));
    }
    if (spec.precision == Precision::Fp16 && spec.device == "cpu") {
        throw UsageError(fmt::format("lane {}: precision=fp16 needs a CUDA device; use bf16 on the CPU", spec.name));
    }
    if (spec.lstm && !workload.hasLstm) {
        throw UsageError(fmt::format("lane {}: lstm={} applies to the LSTM workloads (imdb-bilstm, charlstm), not {}",
                                     spec.name, *spec.lstm, workload.name));
    }
    if (spec.channelsLast.value_or(false) && workload.input != DataKind::Images) {
        throw UsageError(fmt::format("lane {}: channels_last applies to image workloads, not {}", spec.name,
                                     workload.name));
    }
    ctx.batch = spec.batch.value_or(workload.defaultBatch);
    const auto trainCount = settings.data->train.count;
    if (ctx.batch > trainCount) {
        throw UsageError(fmt::format("lane {}: batch={} is larger than the {} training examples", spec.name, ctx.batch,
                                     trainCount));
    }
    ctx.lr = spec.lr.value_or(workload.defaultLr);
    ctx.weightDecay = spec.weightDecay.value_or(workload.weightDecay);
    ctx.momentum = spec.momentum.value_or(workload.momentum);
    ctx.schedule = spec.schedule.value_or(workload.schedule);
    ctx.fusedLstm = spec.lstm.value_or("fused") == "fused";
    // NHWC convolutions (oneDNN) were 9-35% faster on the CPU for the 3-channel networks and
    // 24% slower for fashion-cnn's 1-channel input: a per-workload CPU default.
    ctx.channelsLast = spec.channelsLast.value_or(spec.device == "cpu" && workload.channelsLastOnCpu);
    resolveFastPaths(spec, workload, *settings.data, ctx);
    // Evaluation passes hold ~3 MB of input each by default (1,000 Fashion-MNIST or CIFAR images,
    // 20 ImageNet ones), never fewer examples than a training batch.
    std::int64_t exampleSize = 1;
    for (auto d : workload.inputShape) {
        exampleSize *= d;
    }
    ctx.evalBatch = spec.evalBatch.value_or(std::max(ctx.batch, std::min<std::int64_t>(1000, 3072000 / exampleSize)));
    ctx.threads = spec.threads.value_or(spec.device == "cpu" ? std::max(1, cpu.physicalCores) : 1);
    // Graph lanes drop an epoch's last partial batch (one captured batch shape).
    ctx.stepsPerEpoch = ctx.cudaGraph ? trainCount / ctx.batch : (trainCount + ctx.batch - 1) / ctx.batch;
    if (settings.steps) {
        ctx.totalSteps = *settings.steps;
    } else {
        ctx.totalSteps = ctx.stepsPerEpoch * settings.epochs.value_or(workload.defaultEpochs);
    }
    if (ctx.totalSteps < 1) {
        throw UsageError("a race needs at least 1 step (epochs and steps must be 1 or more)");
    }
    ctx.spec = std::move(spec);
    ctx.settings = std::move(settings);
    ctx.emit = [impl = m_impl.get()](MetricSample s) { impl->push(std::move(s)); };
    ctx.describeExecution = [impl = m_impl.get()](std::string text) {
        std::lock_guard lock(impl->mutex);
        impl->execution = std::move(text);
    };
    ctx.waitWhilePaused = [impl = m_impl.get()] {
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_lock lock(impl->mutex);
        impl->pauseCv.wait(lock, [impl] {
            return !impl->ctx.pauseRequested.load() || impl->ctx.stopRequested.load();
        });
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
}

Lane::~Lane() {
    requestStop();
    if (m_impl->thread.joinable()) {
        m_impl->thread.join();
    }
}

const LaneSpec& Lane::spec() const { return m_impl->ctx.spec; }
std::int64_t Lane::batch() const { return m_impl->ctx.batch; }
std::int64_t Lane::totalSteps() const { return m_impl->ctx.totalSteps; }

void Lane::start() {
    if (m_impl->started) {
        return;
    }
    m_impl->started = true;
    if (m_impl->ctx.spec.device == "cpu") {
        // Installed before the lane's thread allocates anything.
        detail::holdHostCache();
    }
    m_impl->thread = std::thread([impl = m_impl.get()] { impl->run(); });
}

void Lane::requestStop() {
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->ctx.stopRequested = true;
        if (!m_impl->started && m_impl->state == LaneState::Pending) {
            m_impl->state = LaneState::Stopped;
            m_impl->message = "stopped before it started";
        }
    }
    m_impl->pauseCv.notify_all();
}

void Lane::setPaused(bool paused) {
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->ctx.pauseRequested = paused;
    }
    m_impl->pauseCv.notify_all();
}

void Lane::wait() {
    if (m_impl->thread.joinable()) {
        m_impl->thread.join();
    }
}

LaneState Lane::state() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->state;
}

std::string Lane::message() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->message;
}

std::vector<MetricSample> Lane::takeSamples() {
    std::lock_guard lock(m_impl->mutex);
    std::vector<MetricSample> out;
    out.swap(m_impl->pending);
    return out;
}

double Lane::cpuSeconds() const { return m_impl->cpuSeconds.load(); }

std::vector<MetricSample> Lane::history() const {
    std::lock_guard lock(m_impl->mutex);
    return m_impl->history;
}

LaneSummary Lane::summary() const {
    auto samples = history();
    auto s = summarize(m_impl->ctx.spec, m_impl->ctx.batch, samples, m_impl->ctx.settings.targetAccuracy);
    s.datasetName = m_impl->ctx.settings.data->name;
    s.synthetic = m_impl->ctx.settings.data->synthetic;
    std::lock_guard lock(m_impl->mutex);
    s.state = m_impl->state;
    s.error = m_impl->message;
    s.execution = m_impl->execution;
    return s;
}

} // namespace devicerace
