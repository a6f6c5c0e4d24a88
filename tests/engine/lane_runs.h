#pragma once
// Runs one lane to its end with a report after every step, so each Train sample carries the
// loss of exactly one step (the fast-path tests compare such curves).
#include <memory>
#include <string>
#include <vector>

#include "devicerace/lane.h"

namespace devicerace::test {

struct StepRun {
    std::vector<double> losses; // one per step
    LaneSummary summary;
};

inline StepRun runEveryStep(const std::string& workload, LaneSpec spec, std::shared_ptr<const Dataset> data,
                            std::int64_t steps, std::uint64_t seed) {
    LaneRunSettings settings;
    settings.workload = workload;
    settings.data = std::move(data);
    settings.steps = steps;
    settings.seed = seed;
    settings.warmupSteps = 0;
    settings.reportIntervalSeconds = 0; // every step is its own interval
    auto laneOwner = makeLane(std::move(spec), settings);
    Lane& lane = *laneOwner;
    lane.start();
    lane.wait();
    StepRun r;
    r.summary = lane.summary();
    for (const auto& s : lane.history()) {
        if (s.kind == SampleKind::Train && s.loss) {
            r.losses.push_back(*s.loss);
        }
    }
    return r;
}

/// The mean of `count` step losses from step `from` (0-based): the fast-path tests compare
/// two paths' courses by these windows once rounding has parted them step by step.
inline double windowMean(const std::vector<double>& losses, std::size_t from, std::size_t count = 10) {
    double sum = 0;
    for (std::size_t i = from; i < from + count; ++i) {
        sum += losses.at(i);
    }
    return sum / static_cast<double>(count);
}

/// A lane's evaluation samples, in order.
inline std::vector<MetricSample> evalsOf(const Lane& lane) {
    std::vector<MetricSample> out;
    for (const auto& s : lane.history()) {
        if (s.kind == SampleKind::Eval) {
            out.push_back(s);
        }
    }
    return out;
}

} // namespace devicerace::test
