#pragma once
// A slurm:// lane (docs/PARALLEL.md, "Clusters"): a data-parallel lane whose ranks Slurm starts.
// The lane runs `srun` (here, or on a login host through ssh) with the nodes, tasks and GPUs it
// asks for; every task is `devicerace-cli worker --ranks-from slurm`, and rank 0 speaks the worker
// protocol back through srun's standard streams (a WorkerLane over srun). While the job waits in
// the queue the lane is Preparing, its message "queued: job 12 ..."; past its queue limit it is
// cancelled and fails. A job Slurm ends (scancel, time limit, node failure) fails the lane with
// Slurm's state and reason; stopping the race cancels the job. Thread-safe.
#include "lanes/lane_base.h"

namespace devicerace {

class SlurmLane final : public detail::LaneBase {
public:
    /// Submits the job (srun) and returns at once: the lane prepares while the job is queued.
    /// Throws UsageError when srun cannot run here (not installed, no login host given).
    SlurmLane(LaneSpec spec, LaneRunSettings settings);
    ~SlurmLane() override; // cancels a job still queued or running

    LaneKind kind() const override { return LaneKind::Slurm; }
    const LaneSpec& spec() const override;
    std::int64_t batch() const override; // the global batch
    std::int64_t totalSteps() const override;
    void start() override; // trains once the job runs (at once if it already does)
    void requestStop() override;
    void setPaused(bool paused) override;
    void wait() override;
    double cpuSeconds() const override;
    std::shared_ptr<const Dataset> dataset() const override; // null until the job is ready
    const DeviceReport* workerMachine() const override;      // rank 0's node, once ready

    /// Slurm's job id once known ("" before).
    std::string jobId() const;

private:
    void completeSummary(LaneSummary& summary) const override;
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace devicerace
