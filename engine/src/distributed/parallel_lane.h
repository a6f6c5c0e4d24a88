#pragma once
// A data-parallel lane (docs/PARALLEL.md): one model trained by N worker processes — ranks of a
// c10d process group — on this machine and on ssh:// hosts. Each rank is a WorkerLane; rank 0
// serves the rendezvous store and reports the lane's samples (global throughput, loss over all
// ranks, each rank's samples/s, the allreduce share). A rank that fails fails the whole lane,
// named by rank, host and reason; the race's other lanes go on. Thread-safe.
#include <optional>

#include "lanes/lane_base.h"

namespace devicerace {

class ParallelLane final : public detail::LaneBase {
public:
    /// Starts every rank's worker (rank 0 first: its store's port goes to the others) and waits
    /// until each accepted its part. Throws UsageError naming the rank that could not.
    ParallelLane(LaneSpec spec, LaneRunSettings settings);
    ~ParallelLane() override;

    LaneKind kind() const override { return LaneKind::Parallel; }
    const LaneSpec& spec() const override;
    std::int64_t batch() const override; // the global batch: per-rank batch × ranks
    std::int64_t totalSteps() const override;
    void start() override;
    void requestStop() override;
    void setPaused(bool paused) override;
    void wait() override;
    double cpuSeconds() const override; // all ranks' training threads
    std::shared_ptr<const Dataset> dataset() const override;
    const DeviceReport* workerMachine() const override; // rank 0's machine

    int ranks() const;

private:
    void completeSummary(LaneSummary& summary) const override;
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

/// A data-parallel spec as its lane runs it: cuda:all expanded to this machine's GPUs, every rank
/// on one kind of device, and CPU ranks' threads when unset (this machine's cores split between
/// its ranks). Throws UsageError naming the lane. Used by the lane and by resolveRace.
LaneSpec expandParallelSpec(LaneSpec spec);

} // namespace devicerace
