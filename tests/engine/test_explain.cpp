// Explaining the race (issue 29), torch-free parts: the explanation fields of samples, their
// summary (breakdown medians, the input-bound flag, utilisation, energy) and energy attribution.
#include <gtest/gtest.h>

#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/metric_sample.h"
#include "devicerace/race.h"
#include "devicerace/summary.h"

using namespace devicerace;

namespace {

MetricSample train(std::int64_t step, double rate, bool warmup, std::map<std::string, double> phases,
                   std::optional<double> joules = {}) {
    MetricSample s;
    s.kind = SampleKind::Train;
    s.lane = "cpu·1";
    s.step = step;
    s.samples = step * 100;
    s.samplesPerSec = rate;
    s.stepsPerSec = rate / 100;
    s.intervalSeconds = 0.5;
    s.warmup = warmup;
    s.stepBreakdown = std::move(phases);
    s.energyJoules = joules;
    return s;
}

MetricSample running(double flops, double peak) {
    MetricSample s;
    s.kind = SampleKind::State;
    s.state = LaneState::Running;
    s.flopsPerSample = flops;
    s.peakFlopsPerSec = peak;
    s.peakSource = "measured: test";
    s.energySource = "RAPL package-0";
    return s;
}

} // namespace

TEST(ExplainSample, TheFieldsRoundTripAndBadOnesAreRefused) {
    auto s = train(10, 1000, false, {{"data", 0.001}, {"forward", 0.004}, {"other", 0.0005}}, 2.5);
    s.lr = 0.002;
    auto back = sampleFromJsonLine(toJsonLine(s));
    EXPECT_EQ(back.stepBreakdown, s.stepBreakdown);
    EXPECT_DOUBLE_EQ(*back.energyJoules, 2.5);
    EXPECT_DOUBLE_EQ(*back.lr, 0.002);
    const auto st = sampleFromJsonLine(toJsonLine(running(3.2e6, 1.7e11)));
    EXPECT_DOUBLE_EQ(*st.flopsPerSample, 3.2e6);
    EXPECT_DOUBLE_EQ(*st.peakFlopsPerSec, 1.7e11);
    EXPECT_EQ(st.peakSource, "measured: test");
    EXPECT_EQ(st.energySource, "RAPL package-0");
    // A plain sample carries none of them.
    const auto plain = sampleFromJsonLine(toJsonLine(train(3, 10, false, {})));
    EXPECT_TRUE(plain.stepBreakdown.empty());
    EXPECT_FALSE(plain.energyJoules || plain.flopsPerSample || plain.peakFlopsPerSec);
    EXPECT_THROW(sampleFromJsonLine(R"({"kind":"train","lane":"a","step":1,"samples":1,"t":0,"step_breakdown":[1]})"),
                 DataError);
    // Negative or non-numeric phases from a worker are dropped, never summed.
    const auto odd = sampleFromJsonLine(
        R"({"kind":"train","lane":"a","step":1,"samples":1,"t":0,"step_breakdown":{"data":-1,"forward":"x","backward":0.5}})");
    EXPECT_EQ(odd.stepBreakdown, (std::map<std::string, double>{{"backward", 0.5}}));
}

TEST(ExplainSummary, BreakdownMediansInputBoundUtilisationAndEnergy) {
    LaneSpec spec;
    spec.name = "cpu·1";
    std::vector<MetricSample> samples = {
        running(4e6, 1e11),
        train(5, 10, true, {{"data", 9.0}, {"forward", 1.0}}, 100.0), // warm-up: ignored
        train(10, 1000, false, {{"data", 0.03}, {"forward", 0.04}, {"backward", 0.03}}, 2.0),
        train(15, 1000, false, {{"data", 0.02}, {"forward", 0.05}, {"backward", 0.03}}, 3.0),
        train(20, 1000, false, {{"data", 0.025}, {"forward", 0.045}, {"backward", 0.03}}, 2.5),
    };
    const auto sum = summarize(spec, 100, samples, {});
    EXPECT_DOUBLE_EQ(sum.stepBreakdown.at("data"), 0.025);
    EXPECT_DOUBLE_EQ(sum.stepBreakdown.at("forward"), 0.045);
    EXPECT_NEAR(*sum.dataShare, 0.25, 1e-12);
    EXPECT_TRUE(sum.inputBound); // 25% > 20%
    EXPECT_DOUBLE_EQ(*sum.achievedFlopsPerSec, 4e9);
    EXPECT_DOUBLE_EQ(*sum.utilization, 0.04);
    EXPECT_EQ(sum.peakSource, "measured: test");
    EXPECT_DOUBLE_EQ(*sum.energyJoules, 7.5);             // the three measured intervals
    EXPECT_DOUBLE_EQ(*sum.samplesPerJoule, 1500.0 / 7.5); // 500 samples each
    // One interval without a reading: no energy at all rather than a flattering partial sum.
    samples.push_back(train(25, 1000, false, {{"data", 0.001}, {"forward", 0.05}, {"backward", 0.05}}));
    const auto partial = summarize(spec, 100, samples, {});
    EXPECT_FALSE(partial.energyJoules);
    EXPECT_FALSE(partial.samplesPerJoule);
}

TEST(ExplainSummary, EnergyOfLanesThatSharedACounterIsNotAttributed) {
    std::vector<LaneSummary> lanes(3);
    lanes[0].name = "cpu·1";
    lanes[0].device = "cpu";
    lanes[1].name = "cpu·2";
    lanes[1].device = "cpu";
    lanes[2].name = "gpu";
    lanes[2].device = "cuda:0";
    for (auto& l : lanes) {
        l.energyJoules = 10;
        l.samplesPerJoule = 100;
        l.energySource = "RAPL package-0";
    }
    auto fair = lanes;
    attributeEnergy(fair, true); // one lane at a time: every counter is the lane's
    EXPECT_TRUE(fair[0].energyJoules && fair[1].energyJoules && fair[2].energyJoules);
    attributeEnergy(lanes, false);
    EXPECT_FALSE(lanes[0].energyJoules);
    EXPECT_FALSE(lanes[1].samplesPerJoule);
    EXPECT_NE(lanes[0].energySource.find("not attributable: 2 lanes"), std::string::npos) << lanes[0].energySource;
    EXPECT_TRUE(lanes[2].energyJoules); // its own GPU
}

TEST(ExplainSummary, TheRaceJsonCarriesTheFields) {
    RaceSummary race;
    race.workload = "fashion-mlp";
    LaneSummary l;
    l.name = "cpu·1";
    l.device = "cpu";
    l.stepBreakdown = {{"data", 0.001}, {"forward", 0.002}};
    l.flopsPerSample = 3e6;
    l.utilization = 0.5;
    l.energySource = "not measurable here: test";
    race.lanes = {l};
    const auto json = summaryToJson(race);
    for (const char* key : {"\"step_breakdown\"", "\"input_bound\"", "\"flops_per_sample\"",
                            "\"achieved_flops_per_sec\"", "\"peak_flops_per_sec\"", "\"utilization\"",
                            "\"energy_joules\": null", "\"samples_per_joule\": null", "\"energy_source\""}) {
        EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
    }
}
