#pragma once
/// One training run of a workload on one device. `Lane` is the interface every kind shares —
/// a thread of this process, a local worker process, a worker on another machine through
/// ssh — so Race, the CLI, the window, the recorder and the exports never ask which.
/// Thread-safe: control calls and takeSamples() may come from any thread.
#include <memory>
#include <vector>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/lane_spec.h"
#include "devicerace/run_settings.h"
#include "devicerace/metric_sample.h"
#include "devicerace/summary.h"

namespace devicerace {

class Lane {
public:
    virtual ~Lane() = default; // implementations request stop and wait (bounded)
    Lane() = default;
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    virtual LaneKind kind() const = 0;
    virtual const LaneSpec& spec() const = 0;
    virtual std::int64_t batch() const = 0;      // resolved batch size
    virtual std::int64_t totalSteps() const = 0; // steps the lane will run

    virtual void start() = 0;       // begins training (once)
    virtual void requestStop() = 0; // the lane ends soon as Stopped
    virtual void setPaused(bool paused) = 0;
    virtual void wait() = 0; // returns when the lane has ended (after start or stop)

    virtual LaneState state() const = 0;
    virtual std::string message() const = 0;
    /// Samples emitted since the last call (the consumer's own copy).
    virtual std::vector<MetricSample> takeSamples() = 0;
    /// The lane's most recent samples: all of a short race, the last 100,000 of a long one
    /// (memory stays bounded; summary() covers every sample, takeSamples() hands each one out).
    virtual std::vector<MetricSample> history() const = 0;
    virtual LaneSummary summary() const = 0;
    /// CPU seconds used by the lane's own training thread so far (helper threads excluded).
    virtual double cpuSeconds() const = 0;
    /// The data the lane trains on, as it describes itself (remote lanes: on their machine).
    virtual std::shared_ptr<const Dataset> dataset() const = 0;
    /// The machine a worker lane runs on, as its worker described it (null: this machine).
    virtual const DeviceReport* workerMachine() const { return nullptr; }
};

/// Builds the lane kind the spec asks for (`isolate=`, an `ssh://` device) and validates it
/// against the workload and the machine it runs on; throws UsageError with a one-line reason
/// (for worker lanes, after the worker said hello and accepted the lane).
std::unique_ptr<Lane> makeLane(LaneSpec spec, LaneRunSettings settings);

} // namespace devicerace
