#pragma once
// A lane that trains in a thread of this process (LibTorch through the Trainer). Thread-safe.
#include "lanes/lane_base.h"

namespace devicerace {

class ThreadLane final : public detail::LaneBase {
public:
    /// Validates the spec against the workload and this machine; throws UsageError.
    ThreadLane(LaneSpec spec, LaneRunSettings settings);
    ~ThreadLane() override; // requests stop and joins

    LaneKind kind() const override { return LaneKind::Thread; }
    const LaneSpec& spec() const override;
    std::int64_t batch() const override;
    std::int64_t totalSteps() const override;
    void start() override;
    void requestStop() override;
    void setPaused(bool paused) override;
    void wait() override;
    double cpuSeconds() const override;
    std::shared_ptr<const Dataset> dataset() const override;

private:
    void completeSummary(LaneSummary& summary) const override;

    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace devicerace
