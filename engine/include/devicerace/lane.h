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
#include "devicerace/metric_sample.h"
#include "devicerace/summary.h"

namespace devicerace {

/// One rank of a data-parallel lane, as its parent configured it (the worker protocol's
/// `config.dist`); see docs/PARALLEL.md.
struct DistConfig {
    int rank = 0;
    int world = 1;
    std::string backend = "gloo"; // gloo | nccl
    std::string storeHost;        // rank 0: "" (it serves the store); the others: where it listens
    int storePort = 0;
    std::string bindHost;       // the address Gloo binds ("127.0.0.1": every rank on one machine)
    double timeoutSeconds = 60; // rendezvous: every rank must have joined by then
    bool fixedGlobalBatch = false;
    std::shared_ptr<void> store; // rank 0's worker: the TCPStore it serves, kept for the lane's life
};

/// Settings a lane shares with its race (resolved from the RaceSpec).
struct LaneRunSettings {
    std::string workload;
    /// The data a thread lane trains on. Worker lanes resolve their own data where they run
    /// from the fields below (the remote machine may hold data this one lacks).
    std::shared_ptr<const ImageDataset> data;
    std::optional<DataMode> dataMode;
    std::string dataDir;
    std::optional<std::int64_t> trainLimit;
    std::optional<std::int64_t> testLimit;
    std::optional<int> epochs;
    std::optional<std::int64_t> steps;
    std::optional<double> targetAccuracy;
    std::uint64_t seed = 0;
    std::int64_t evalEverySteps = 0;
    std::int64_t warmupSteps = 20;
    double reportIntervalSeconds = 0.1; // metric samples at most this often
    /// Fault injection for tests of lane isolation: throw at this step (0: never).
    std::int64_t failAtStep = 0;
    /// A worker process may run fault=abort|segv|exit|hang (it is alone in its process).
    bool allowProcessFaults = false;
    /// Set in the workers of a data-parallel lane: this process is one rank of it.
    std::optional<DistConfig> dist;
};

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
