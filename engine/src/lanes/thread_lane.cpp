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
#include "devicerace/peak_flops.h"
#include "devicerace/workload.h"
#include "kernels/host_allocator.h"
#include "train/lane_context.h"

namespace devicerace {

struct ThreadLane::Impl {
    detail::LaneContext ctx;
    detail::LaneRecord* record = nullptr; // the lane's (LaneBase)
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
            if (ctx.fast.hostCache) {
                detail::releaseHostCache(); // the lane's tensors are gone (paired with start())
            }
            if (!ctx.settings.dist) { // (a rank's peak is one share of the lane's)
                forgetAPeakItPassed();
            }
        }
    }

    // A peak is an upper bound: a lane that ran past its cached CPU peak proves that figure was
    // measured low, so it is dropped and measured again before the next race (never now: other
    // lanes may still be training). The race's summary says so (explainPeaksExceeded).
    void forgetAPeakItPassed() {
        const auto s = record->summary(ctx.spec, ctx.batch, {});
        if (s.achievedFlopsPerSec && s.peakFlopsPerSec && *s.achievedFlopsPerSec > *s.peakFlopsPerSec) {
            try {
                (void)forgetCpuPeak(ctx.spec.precision, ctx.threads, *s.achievedFlopsPerSec);
            } catch (const std::exception&) {
                // an unwritable cache: the next race reads the same figure and says so again
            }
        }
    }
};

ThreadLane::ThreadLane(LaneSpec spec, LaneRunSettings settings)
    : LaneBase(spec.name, {settings.targetAccuracy, settings.targetLoss}), m_impl(std::make_unique<Impl>()) {
    auto& ctx = m_impl->ctx;
    const auto& workload = findWorkload(settings.workload);
    if (!settings.data) {
        throw UsageError("lane has no data set");
    }
    const auto& data = *settings.data;
    detail::PlanData planData;
    planData.trainCount = data.train.count;
    planData.synthetic = data.synthetic;
    planData.deviceBytes = static_cast<double>(data.train.pixels.size() + data.test.pixels.size()) +
                           8.0 * static_cast<double>(data.train.tokens.size() + data.test.tokens.size());
    detail::PlanRun run;
    run.epochs = settings.epochs;
    run.steps = settings.steps;
    run.allowProcessFaults = settings.allowProcessFaults;
    if (settings.dist) {
        run.distributed = true;
        run.world = settings.dist->world;
        run.fixedGlobalBatch = settings.dist->fixedGlobalBatch;
    }
    static_cast<detail::RunPlan&>(ctx) = detail::planRun(spec, workload, planData, run);
    spec.device = ctx.device;
    ctx.spec = std::move(spec);
    ctx.settings = std::move(settings);
    m_impl->record = &record();
    ctx.emit = [impl = m_impl.get()](MetricSample s) { impl->push(std::move(s)); };
    ctx.describeExecution = [impl = m_impl.get()](std::string text) { impl->record->setExecution(std::move(text)); };
    ctx.waitWhilePaused = [impl = m_impl.get()] {
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_lock lock(impl->pauseMutex);
        impl->pauseCv.wait(lock, [impl] { return !impl->ctx.pauseRequested.load() || impl->ctx.stopRequested.load(); });
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
        // Installed before the lane's thread allocates anything (its memory guard too, for a
        // lane that keeps no blocks).
        detail::useCachingHostAllocator();
        if (m_impl->ctx.fast.hostCache) {
            detail::holdHostCache();
        }
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

double ThreadLane::cpuSeconds() const { return m_impl->cpuSeconds.load(); }

void ThreadLane::completeSummary(LaneSummary& s) const {
    s.datasetName = m_impl->ctx.settings.data->name;
    s.synthetic = m_impl->ctx.settings.data->synthetic;
}

} // namespace devicerace
