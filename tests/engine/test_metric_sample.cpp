#include <gtest/gtest.h>

#include <cmath>

#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/metric_sample.h"
#include "devicerace/race.h"
#include "devicerace/summary.h"

using namespace devicerace;

namespace {

MetricSample train(std::int64_t step, double t, double rate, bool warmup) {
    MetricSample s;
    s.kind = SampleKind::Train;
    s.lane = "cpu·1";
    s.step = step;
    s.samples = step * 100;
    s.time = t;
    s.samplesPerSec = rate;
    s.stepsPerSec = rate / 100;
    s.intervalSeconds = 0.5;
    s.loss = 1.0 / static_cast<double>(step);
    s.warmup = warmup;
    return s;
}

MetricSample eval(std::int64_t step, double t, double acc) {
    MetricSample s;
    s.kind = SampleKind::Eval;
    s.lane = "cpu·1";
    s.step = step;
    s.time = t;
    s.accuracy = acc;
    return s;
}

} // namespace

TEST(MetricSample, JsonLineRoundTrip) {
    auto s = train(7, 1.25, 900, true);
    s.memoryBytes = 123456789;
    auto line = toJsonLine(s);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    auto back = sampleFromJsonLine(line);
    EXPECT_EQ(back.kind, SampleKind::Train);
    EXPECT_EQ(back.lane, "cpu·1");
    EXPECT_EQ(back.step, 7);
    EXPECT_DOUBLE_EQ(*back.samplesPerSec, 900);
    EXPECT_EQ(*back.memoryBytes, 123456789u);
    EXPECT_TRUE(back.warmup);

    MetricSample st;
    st.kind = SampleKind::State;
    st.state = LaneState::Diverged;
    st.message = "diverged at step 3";
    auto st2 = sampleFromJsonLine(toJsonLine(st));
    EXPECT_EQ(st2.state, LaneState::Diverged);
    EXPECT_EQ(st2.message, "diverged at step 3");
}

TEST(MetricSample, DataParallelFieldsAndLearningRateRoundTrip) {
    auto s = train(40, 2.0, 900, false);
    s.workerSamplesPerSec = {450, 440.5};
    s.allreduceShare = 0.12;
    s.lr = 0.01;
    const auto back = sampleFromJsonLine(toJsonLine(s));
    EXPECT_EQ(back.workerSamplesPerSec, (std::vector<double>{450, 440.5}));
    EXPECT_DOUBLE_EQ(*back.allreduceShare, 0.12);
    EXPECT_DOUBLE_EQ(*back.lr, 0.01);
    const auto plain = sampleFromJsonLine(toJsonLine(train(40, 2.0, 900, false)));
    EXPECT_TRUE(plain.workerSamplesPerSec.empty());
    EXPECT_FALSE(plain.allreduceShare);
    EXPECT_FALSE(plain.lr);
    EXPECT_THROW(sampleFromJsonLine(R"({"kind":"train","lane":"a","step":1,"samples":1,"t":0,"worker_samples_per_sec":3})"),
                 DataError);
}

TEST(Summary, ScalingAgainstTheFewestWorkers) {
    std::vector<LaneSummary> lanes(3);
    lanes[0].name = "one";
    lanes[0].device = "cpu";
    lanes[0].workers = 1;
    lanes[0].samplesPerSec = 100;
    lanes[1].name = "four";
    lanes[1].device = "cpu";
    lanes[1].workers = 4;
    lanes[1].samplesPerSec = 360;
    lanes[2].name = "thread";
    lanes[2].device = "cpu";
    lanes[2].samplesPerSec = 120;
    fillScaling(lanes);
    EXPECT_EQ(lanes[1].scalingBaseline, "one");
    EXPECT_DOUBLE_EQ(*lanes[1].scalingSpeedup, 3.6);
    EXPECT_DOUBLE_EQ(*lanes[1].scalingEfficiency, 0.9);
    EXPECT_DOUBLE_EQ(*lanes[0].scalingEfficiency, 1.0);
    EXPECT_FALSE(lanes[2].scalingSpeedup); // not data-parallel
}

TEST(MetricSample, NonFiniteValuesBecomeNull) {
    auto s = train(1, 0.1, 10, false);
    s.loss = std::nan("");
    auto line = toJsonLine(s);
    EXPECT_NE(line.find("\"loss\":null"), std::string::npos) << line;
    EXPECT_FALSE(sampleFromJsonLine(line).loss.has_value());
}

TEST(MetricSample, MalformedLinesAreDataErrors) {
    EXPECT_THROW(sampleFromJsonLine("{\"kind\":\"train\""), DataError);
    EXPECT_THROW(sampleFromJsonLine("[1,2]"), DataError);
    EXPECT_THROW(sampleFromJsonLine("{\"kind\":\"bogus\",\"lane\":\"a\",\"step\":1,\"samples\":1,\"t\":0}"), DataError);
}

// Found by fuzzing (tests/fuzz, lane_jsonl and protocol targets): an integer field holding a
// number past its range (1e300 steps) was an unchecked cast, undefined behaviour.
TEST(MetricSample, IntegersOutOfRangeAreDataErrors) {
    const std::string head = R"({"kind":"train","lane":"a","t":0,)";
    for (const char* fields : {R"("step":1e300,"samples":1)", R"("step":1,"samples":-9.3e18)",
                               R"("step":1,"samples":1,"memory_bytes":-1)",
                               R"("step":1,"samples":1,"memory_bytes":1.9e19)"}) {
        try {
            sampleFromJsonLine(head + fields + "}");
            ADD_FAILURE() << fields << ": accepted";
        } catch (const DataError& e) {
            EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(sampleFromJsonLine(head + R"("step":9.0,"samples":18446744073709551615e-10})").step, 9);
}

TEST(Summary, MedianExcludesWarmupAndTargetFollowsMlperf) {
    std::vector<MetricSample> samples = {train(5, 0.5, 10, true),   train(10, 1.0, 100, false),
                                         train(15, 1.5, 300, false), train(20, 2.0, 200, false),
                                         eval(20, 2.4, 0.80),        train(25, 3.0, 200, false),
                                         eval(25, 3.5, 0.91),        eval(30, 4.0, 0.95)};
    LaneSpec spec;
    spec.name = "cpu·1";
    auto sum = summarize(spec, 100, samples, 0.9);
    EXPECT_DOUBLE_EQ(*sum.samplesPerSec, 200); // median of 100, 300, 200, 200; 10 (warm-up) excluded
    EXPECT_DOUBLE_EQ(*sum.stepsPerSec, 2);
    EXPECT_DOUBLE_EQ(*sum.timeToTargetSeconds, 3.5); // first evaluation at or above 0.9
    EXPECT_DOUBLE_EQ(*sum.finalTestAccuracy, 0.95);
    EXPECT_EQ(sum.steps, 30);
    EXPECT_DOUBLE_EQ(sum.measuredSeconds, 2.0);
    EXPECT_EQ(sum.measuredSamples, 400);
    EXPECT_FALSE(summarize(spec, 100, samples, 0.99).timeToTargetSeconds.has_value());
}

TEST(Summary, CostToTargetAndNormalisedCost) {
    std::vector<MetricSample> samples = {train(10, 1.0, 100, false), eval(10, 1800, 0.95)};
    LaneSpec cheap, dear;
    cheap.name = "cheap";
    cheap.costPerHour = 1.0;
    dear.name = "dear";
    dear.costPerHour = 3.0;
    std::vector<LaneSummary> lanes = {summarize(cheap, 100, samples, 0.9), summarize(dear, 100, samples, 0.9)};
    EXPECT_DOUBLE_EQ(*lanes[0].costToTargetUsd, 0.5); // half an hour at $1/h
    EXPECT_DOUBLE_EQ(*lanes[1].totalCostUsd, 1.5);
    normaliseCosts(lanes);
    EXPECT_DOUBLE_EQ(*lanes[1].costVsBaseline, 3.0);
    LaneSpec free;
    EXPECT_FALSE(summarize(free, 100, samples, 0.9).costToTargetUsd.has_value());
}

TEST(Summary, MedianOfEvenAndOdd) {
    EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
    EXPECT_DOUBLE_EQ(median({4, 1, 2, 3}), 2.5);
}

TEST(Exports, CsvQuotesAndJsonUsesNull) {
    auto s = train(1, 0.1, 10, false);
    s.lane = "a,\"b\"";
    auto csv = samplesToCsv({s});
    EXPECT_NE(csv.find("\"a,\"\"b\"\"\""), std::string::npos) << csv;
    RaceSummary r;
    r.workload = "fashion-mlp";
    r.datasetName = "Fashion-MNIST";
    LaneSummary l;
    l.name = "cpu·1";
    r.lanes.push_back(l);
    auto json = summaryToJson(r);
    EXPECT_NE(json.find("\"samples_per_sec\": null"), std::string::npos) << json;
    EXPECT_NE(json.find("\"speedup\""), std::string::npos);
}
