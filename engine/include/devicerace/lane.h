#pragma once
/// One training run of a workload on one device, in its own thread.
/// Thread-safe: control calls and takeSamples() may come from any thread.
#include <memory>
#include <vector>

#include "devicerace/dataset.h"
#include "devicerace/lane_spec.h"
#include "devicerace/metric_sample.h"
#include "devicerace/summary.h"

namespace devicerace {

/// Settings a lane shares with its race (resolved from the RaceSpec).
struct LaneRunSettings {
    std::string workload;
    std::shared_ptr<const ImageDataset> data;
    std::optional<int> epochs;
    std::optional<std::int64_t> steps;
    std::optional<double> targetAccuracy;
    std::uint64_t seed = 0;
    std::int64_t evalEverySteps = 0;
    std::int64_t warmupSteps = 20;
    double reportIntervalSeconds = 0.1; // metric samples at most this often
    /// Fault injection for tests of lane isolation: throw at this step (0: never).
    std::int64_t failAtStep = 0;
};

class Lane {
public:
    /// Validates the spec against the workload and the machine; throws UsageError.
    Lane(LaneSpec spec, LaneRunSettings settings);
    ~Lane(); // requests stop and joins
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;

    const LaneSpec& spec() const;
    std::int64_t batch() const;       // resolved batch size
    std::int64_t totalSteps() const;  // steps the lane will run

    void start();           // launches the lane thread (once)
    void requestStop();     // the lane ends at the next step as Stopped
    void setPaused(bool paused);
    void wait();            // joins the lane thread (after start)

    LaneState state() const;
    std::string message() const;
    /// Samples emitted since the last call (the consumer's own copy).
    std::vector<MetricSample> takeSamples();
    /// All samples so far (kept by the lane for its summary).
    std::vector<MetricSample> history() const;
    LaneSummary summary() const;
    /// CPU seconds used by the lane's own thread so far (its OpenMP helper threads excluded).
    double cpuSeconds() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace devicerace
