#include "lanes/thread_lane.h"

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
#include "train/host_allocator.h"
#include "train/lane_context.h"
#include "lanes/lane_record.h"

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

struct ThreadLane::Impl {
    detail::LaneContext ctx;
    std::unique_ptr<detail::LaneRecord> record;
    std::thread thread;
    std::atomic<std::thread::id> threadId{};
    bool started = false;
    std::mutex pauseMutex; // with pauseCv: the lane thread waits here while paused
    std::condition_variable pauseCv;
    std::atomic<double> cpuSeconds{0};

    void push(MetricSample s) {
        if (std::this_thread::get_id() == threadId.load()) {
            timespec ts{};
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
            cpuSeconds = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
        }
        record->push(std::move(s));
    }

    void run() {
        threadId = std::this_thread::get_id();
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
            record->finish(outcome.state, outcome.message);
        } catch (...) {
            record->finish(LaneState::Failed, detail::describeException(std::current_exception()));
        }
        if (ctx.spec.device == "cpu") {
            detail::releaseHostCache(); // the lane's tensors are gone (paired with start())
        }
    }
};

ThreadLane::ThreadLane(LaneSpec spec, LaneRunSettings settings) : m_impl(std::make_unique<Impl>()) {
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
    const std::int64_t world = settings.dist ? settings.dist->world : 1;
    if (settings.dist && settings.dist->fixedGlobalBatch) {
        // global_batch=fixed: batch= is the lane's global batch, split over the ranks.
        if (ctx.batch % world != 0) {
            throw UsageError(fmt::format("lane {}: global_batch=fixed splits batch={} over {} workers: make it a "
                                         "multiple of {}",
                                         spec.name, ctx.batch, world, world));
        }
        ctx.batch /= world;
    }
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
    if (settings.dist) {
        ctx.cudaGraph = false; // the gradient hooks launch collectives from inside the backward pass
    }
    // Graph lanes drop an epoch's last partial batch (one captured batch shape); data-parallel
    // steps take world × batch examples.
    const std::int64_t stepBatch = ctx.batch * world;
    ctx.stepsPerEpoch = ctx.cudaGraph ? trainCount / ctx.batch : (trainCount + stepBatch - 1) / stepBatch;
    if (settings.steps) {
        ctx.totalSteps = *settings.steps;
    } else {
        ctx.totalSteps = ctx.stepsPerEpoch * settings.epochs.value_or(workload.defaultEpochs);
    }
    if (ctx.totalSteps < 1) {
        throw UsageError("a race needs at least 1 step (epochs and steps must be 1 or more)");
    }
    if (spec.fault) {
        ctx.fault = detail::parseFault(*spec.fault);
        if (ctx.fault.kind != "throw" && !settings.allowProcessFaults) {
            throw UsageError(fmt::format("lane {}: fault={} would take down this whole process with every lane in it; "
                                         "add isolate=process",
                                         spec.name, *spec.fault));
        }
    }
    ctx.spec = std::move(spec);
    ctx.settings = std::move(settings);
    m_impl->record = std::make_unique<detail::LaneRecord>(ctx.spec.name);
    ctx.emit = [impl = m_impl.get()](MetricSample s) { impl->push(std::move(s)); };
    ctx.describeExecution = [impl = m_impl.get()](std::string text) { impl->record->setExecution(std::move(text)); };
    ctx.waitWhilePaused = [impl = m_impl.get()] {
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_lock lock(impl->pauseMutex);
        impl->pauseCv.wait(lock, [impl] {
            return !impl->ctx.pauseRequested.load() || impl->ctx.stopRequested.load();
        });
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
}

ThreadLane::~ThreadLane() {
    requestStop();
    if (m_impl->thread.joinable()) {
        m_impl->thread.join();
    }
}

const LaneSpec& ThreadLane::spec() const { return m_impl->ctx.spec; }
std::int64_t ThreadLane::batch() const { return m_impl->ctx.batch; }
std::int64_t ThreadLane::totalSteps() const { return m_impl->ctx.totalSteps; }
std::shared_ptr<const Dataset> ThreadLane::dataset() const { return m_impl->ctx.settings.data; }

void ThreadLane::start() {
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

void ThreadLane::requestStop() {
    {
        std::lock_guard lock(m_impl->pauseMutex);
        m_impl->ctx.stopRequested = true;
    }
    if (!m_impl->started) {
        m_impl->record->stopIfPending("stopped before it started");
    }
    m_impl->pauseCv.notify_all();
}

void ThreadLane::setPaused(bool paused) {
    {
        std::lock_guard lock(m_impl->pauseMutex);
        m_impl->ctx.pauseRequested = paused;
    }
    m_impl->pauseCv.notify_all();
}

void ThreadLane::wait() {
    if (m_impl->thread.joinable()) {
        m_impl->thread.join();
    }
}

LaneState ThreadLane::state() const { return m_impl->record->state(); }
std::string ThreadLane::message() const { return m_impl->record->message(); }
std::vector<MetricSample> ThreadLane::takeSamples() { return m_impl->record->take(); }
std::vector<MetricSample> ThreadLane::history() const { return m_impl->record->history(); }
double ThreadLane::cpuSeconds() const { return m_impl->cpuSeconds.load(); }

LaneSummary ThreadLane::summary() const {
    auto s = m_impl->record->summary(m_impl->ctx.spec, m_impl->ctx.batch, m_impl->ctx.settings.targetAccuracy);
    s.datasetName = m_impl->ctx.settings.data->name;
    s.synthetic = m_impl->ctx.settings.data->synthetic;
    return s;
}

} // namespace devicerace
