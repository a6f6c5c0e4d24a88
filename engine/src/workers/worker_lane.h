#pragma once
// A lane trained by a `devicerace-cli worker` in another process: a local child (isolate=process)
// or a worker on another machine through the system ssh (an ssh:// device). The worker protocol
// runs on the child's standard streams (workers/protocol.h). Thread-safe.
#include "devicerace/device_info.h"
#include "lanes/lane_base.h"
#include "workers/worker_connection.h"

namespace devicerace {

class WorkerLane final : public detail::LaneBase {
public:
    /// Starts the worker, checks its hello (protocol version), sends the lane and waits until the
    /// worker accepted it. Throws UsageError with what went wrong (host unreachable, key refused,
    /// host key unknown, devicerace-cli missing there, version mismatch, device or data missing).
    WorkerLane(LaneSpec spec, LaneRunSettings settings);
    /// The same, started through `endpoint` (a Slurm lane's srun) instead of the spec's own.
    WorkerLane(LaneSpec spec, LaneRunSettings settings, detail::WorkerEndpoint endpoint);
    ~WorkerLane() override; // stop, then close, SIGTERM, SIGKILL (bounded), reap

    LaneKind kind() const override;
    const LaneSpec& spec() const override;
    std::int64_t batch() const override;
    std::int64_t totalSteps() const override;
    void start() override;
    void requestStop() override;
    void setPaused(bool paused) override;
    void wait() override;
    double cpuSeconds() const override;
    std::shared_ptr<const Dataset> dataset() const override;
    /// The machine the worker runs on, as its hello described it.
    const DeviceReport* workerMachine() const override;
    /// The worker's DeviceRace version, from its hello.
    const std::string& workerVersion() const;
    /// Rank 0 of a data-parallel lane: the port its rendezvous store listens on.
    std::optional<int> storePort() const;
    /// A launched lane's rank 0 (slurm://, attach://): the job's id, from its ready.
    const std::string& launchedJob() const;

private:
    WorkerLane(LaneSpec spec, LaneRunSettings settings, std::optional<detail::WorkerEndpoint> endpoint);
    void completeSummary(LaneSummary& summary) const override;
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace devicerace
