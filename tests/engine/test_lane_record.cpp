// A lane's record over a long race: bounded history, summary and final state over every sample.
#include <gtest/gtest.h>

#include "lanes/lane_record.h"

using namespace devicerace;
using devicerace::detail::LaneRecord;

namespace {
MetricSample trainSample(std::int64_t step) {
    MetricSample s;
    s.kind = SampleKind::Train;
    s.lane = "cpu";
    s.step = step;
    s.samples = step * 8;
    s.time = static_cast<double>(step) * 0.01;
    s.samplesPerSec = 800;
    s.stepsPerSec = 100;
    s.intervalSeconds = 0.01;
    s.loss = 1.0;
    return s;
}
} // namespace

TEST(LaneRecord, KeepsABoundedHistoryAndSummarisesEverySample) {
    LaneRecord record("cpu");
    const auto total = static_cast<std::int64_t>(LaneRecord::kHistoryLimit) * 2 + 5;
    for (std::int64_t step = 1; step <= total; ++step) {
        record.push(trainSample(step));
        if (step % 1000 == 0) {
            record.take(); // the consumer (the window, the CLI) takes as the race runs
        }
    }
    const auto history = record.history();
    ASSERT_EQ(history.size(), LaneRecord::kHistoryLimit);
    EXPECT_EQ(history.back().step, total);
    EXPECT_EQ(history.front().step, total - static_cast<std::int64_t>(LaneRecord::kHistoryLimit) + 1);
    EXPECT_EQ(record.lastStep(), total);
    LaneSpec spec;
    spec.name = "cpu";
    const auto summary = record.summary(spec, 8, {});
    EXPECT_EQ(summary.steps, total);
    EXPECT_EQ(summary.samples, total * 8);
    // The final state carries the last progress forward though the history lost its start.
    record.finish(LaneState::Finished, "");
    const auto last = record.history().back();
    EXPECT_EQ(last.kind, SampleKind::State);
    EXPECT_EQ(last.state, LaneState::Finished);
    EXPECT_EQ(last.step, total);
    EXPECT_DOUBLE_EQ(last.time, static_cast<double>(total) * 0.01);
}
