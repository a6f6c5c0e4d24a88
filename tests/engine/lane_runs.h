#pragma once
// Runs one lane to its end with a report after every step, so each Train sample carries the
// loss of exactly one step (the fast-path tests compare such curves).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
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

/// A 3-step cpu,threads=1,precision=bf16 lane of `workload` whose GEMMs all take fp32
/// (DEVICERACE_BF16_ROUTE), its dense layers routed or (`routed` false) autocast's
/// (DEVICERACE_BF16_DENSE=0): its execution text and its last evaluation's loss (-1 if none).
/// The bf16 evaluation tests compare the two.
inline std::pair<std::string, double> bf16EvalRun(const std::string& workload, std::shared_ptr<const Dataset> data,
                                                  bool routed) {
    ::setenv("DEVICERACE_BF16_ROUTE", "fp32", 1);
    if (!routed) {
        ::setenv("DEVICERACE_BF16_DENSE", "0", 1);
    }
    LaneRunSettings settings;
    settings.workload = workload;
    settings.data = std::move(data);
    settings.steps = 3;
    settings.seed = 5;
    settings.warmupSteps = 0;
    auto lane = makeLane(parseLaneSpec("cpu,threads=1,precision=bf16"), settings);
    lane->start();
    lane->wait();
    ::unsetenv("DEVICERACE_BF16_DENSE");
    ::unsetenv("DEVICERACE_BF16_ROUTE");
    EXPECT_EQ(lane->summary().state, LaneState::Finished) << lane->summary().error;
    const auto evals = evalsOf(*lane);
    return {lane->summary().execution, evals.empty() ? -1.0 : evals.back().loss.value_or(-1.0)};
}

} // namespace devicerace::test
