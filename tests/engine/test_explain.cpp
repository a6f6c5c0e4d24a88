// Explaining the race, torch-free parts: the explanation fields of samples, their
// summary (breakdown medians, the input-bound flag, utilisation, energy) and energy attribution.
#include <gtest/gtest.h>

#include <cmath>

#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/metric_sample.h"
#include "devicerace/race.h"
#include "devicerace/repeats.h"
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
    s.threadSpeeds = {1.0, 0.8125};
    s.otherCpus = 0.875;
    s.stealShare = 0.0625;
    auto back = sampleFromJsonLine(toJsonLine(s));
    EXPECT_EQ(back.stepBreakdown, s.stepBreakdown);
    EXPECT_EQ(back.threadSpeeds, s.threadSpeeds);
    EXPECT_DOUBLE_EQ(*back.otherCpus, 0.875);
    EXPECT_DOUBLE_EQ(*back.stealShare, 0.0625);
    EXPECT_DOUBLE_EQ(*back.energyJoules, 2.5);
    EXPECT_DOUBLE_EQ(*back.lr, 0.002);
    auto withCpus = running(3.2e6, 1.7e11);
    withCpus.machineCpus = 2;
    const auto st = sampleFromJsonLine(toJsonLine(withCpus));
    EXPECT_EQ(st.machineCpus, 2);
    EXPECT_DOUBLE_EQ(*st.flopsPerSample, 3.2e6);
    EXPECT_DOUBLE_EQ(*st.peakFlopsPerSec, 1.7e11);
    EXPECT_EQ(st.peakSource, "measured: test");
    EXPECT_EQ(st.energySource, "RAPL package-0");
    // A plain sample carries none of them.
    const auto plain = sampleFromJsonLine(toJsonLine(train(3, 10, false, {})));
    EXPECT_TRUE(plain.stepBreakdown.empty());
    EXPECT_TRUE(plain.threadSpeeds.empty());
    EXPECT_FALSE(plain.otherCpus || plain.stealShare);
    EXPECT_EQ(toJsonLine(train(3, 10, false, {})).find("thread_speeds"), std::string::npos);
    EXPECT_THROW(sampleFromJsonLine(R"({"kind":"train","lane":"a","step":1,"samples":1,"t":0,"thread_speeds":1})"),
                 DataError);
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
    samples[1].threadSpeeds = {1.0, 0.1}; // warm-up: ignored
    samples[2].threadSpeeds = {1.0, 0.8};
    samples[3].threadSpeeds = {0.9, 1.0};
    samples[4].threadSpeeds = {1.0, 0.7};
    const auto sum = summarize(spec, 100, samples, {});
    EXPECT_EQ(sum.threadSpeeds, (std::vector<double>{1.0, 0.8})); // each thread's median
    // The fastest thread changed every step: the medians (0.9, 0.9, 0.8) are rescaled so the fastest reads 1.
    samples[2].threadSpeeds = {1.0, 0.9, 0.8};
    samples[3].threadSpeeds = {0.9, 1.0, 0.8};
    samples[4].threadSpeeds = {0.8, 0.9, 1.0};
    const auto swapped = summarize(spec, 100, samples, {});
    ASSERT_EQ(swapped.threadSpeeds.size(), 3u);
    EXPECT_DOUBLE_EQ(swapped.threadSpeeds[0], 1.0);
    EXPECT_DOUBLE_EQ(swapped.threadSpeeds[1], 1.0);
    EXPECT_DOUBLE_EQ(swapped.threadSpeeds[2], 0.8 / 0.9);
    EXPECT_FALSE(sum.otherCpus || sum.stealShare); // not measured

    // The rest of the machine: each interval after warm-up weighted by its length.
    samples[1].otherCpus = 5.0; // warm-up: ignored
    samples[1].stealShare = 0.5;
    for (std::size_t i = 2; i < 5; ++i) {
        samples[i].otherCpus = i == 2 ? 1.0 : 0.0;
        samples[i].stealShare = i == 2 ? 0.2 : 0.05;
    }
    samples[2].intervalSeconds = 1.0; // twice as long as the others (0.5 s)
    const auto loaded = summarize(spec, 100, samples, {});
    EXPECT_DOUBLE_EQ(*loaded.otherCpus, 0.5);    // (1.0 x 1 + 0 + 0) / 2 s
    EXPECT_DOUBLE_EQ(*loaded.stealShare, 0.125); // (0.2 x 1 + 0.05 x 0.5 x 2) / 2 s
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
    for (const char* key :
         {"\"step_breakdown\"", "\"input_bound\"", "\"flops_per_sample\"", "\"achieved_flops_per_sec\"",
          "\"peak_flops_per_sec\"", "\"utilization\"", "\"energy_joules\": null", "\"samples_per_joule\": null",
          "\"energy_source\"", "\"thread_speeds\": null"}) {
        EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
    }
}

namespace {

RaceSummary raceWith(double a, double b, std::optional<double> ttt = {}) {
    RaceSummary r;
    r.workload = "fashion-mlp";
    LaneSummary x, y;
    x.name = "a";
    x.samplesPerSec = a;
    y.name = "b";
    y.samplesPerSec = b;
    y.timeToTargetSeconds = ttt;
    r.lanes = {x, y};
    r.speedup = speedups(r.lanes);
    return r;
}

} // namespace

TEST(Repeats, MediansSpreadsAndTheNoiseVerdict) {
    const auto s = spreadOf({1, 2, 4});
    ASSERT_TRUE(s);
    EXPECT_EQ(s->n, 3);
    EXPECT_DOUBLE_EQ(s->median, 2);
    EXPECT_DOUBLE_EQ(s->min, 1);
    EXPECT_DOUBLE_EQ(s->max, 4);
    EXPECT_NEAR(s->stddev, std::sqrt(7.0 / 3.0), 1e-12); // sample standard deviation
    EXPECT_FALSE(spreadOf({}));

    // b is 2x a in every repeat: a real gap.
    auto real = summarizeRepeats({raceWith(100, 200, 5), raceWith(110, 215, 6), raceWith(90, 185, 4)});
    ASSERT_EQ(real.repeats.size(), 3u);
    EXPECT_TRUE(real.lanes[0].baseline);
    EXPECT_EQ(speedupText(real.lanes[0]), "baseline");
    const auto& b = real.lanes[1];
    EXPECT_FALSE(b.withinNoise);
    EXPECT_NEAR(b.speedup->median, 2.0, 1e-12);
    EXPECT_EQ(b.speedup->n, 3);
    EXPECT_DOUBLE_EQ(b.samplesPerSec->median, 200);
    EXPECT_DOUBLE_EQ(b.timeToTargetSeconds->median, 5);
    EXPECT_DOUBLE_EQ(*real.median.lanes[1].samplesPerSec, 200);
    EXPECT_NEAR(real.median.speedup.at("b"), 2.0, 1e-12);
    EXPECT_NE(speedupText(b).find("2.00× ± 0.0"), std::string::npos) << speedupText(b);
    EXPECT_NE(speedupText(b).find("(N = 3)"), std::string::npos);

    // 1.05x, 0.97x, 1.01x: the lanes are not shown to differ.
    auto noise = summarizeRepeats({raceWith(100, 105), raceWith(100, 97), raceWith(100, 101)});
    EXPECT_TRUE(noise.lanes[1].withinNoise);
    EXPECT_NE(speedupText(noise.lanes[1]).find("within noise"), std::string::npos);

    const auto json = repeatsToJson(real);
    for (const char* key : {"\"repeats\"", "\"speedup_spread\"", "\"lane_spread\"", "\"within_noise\": false"}) {
        EXPECT_NE(json.find(key), std::string::npos) << key;
    }
}

TEST(ExplainSummary, TheRankTheOthersWaitForIsNamed) {
    // Rank 2 works 12 ms a step, the others 10; they wait 2 ms in the allreduce.
    std::vector<std::map<std::string, double>> ranks = {
        {{"data", 0.001}, {"forward", 0.004}, {"backward", 0.005}, {"communication", 0.0025}, {"other", 0.0005}},
        {{"data", 0.001}, {"forward", 0.004}, {"backward", 0.005}, {"communication", 0.0025}, {"other", 0.0005}},
        {{"data", 0.001}, {"forward", 0.005}, {"backward", 0.006}, {"communication", 0.0005}, {"other", 0.0005}},
    };
    const auto text = slowestRankText(ranks);
    EXPECT_NE(text.find("rank 2 is 20% slower"), std::string::npos) << text;
    EXPECT_NE(text.find("communication 19% of their step"), std::string::npos) << text;
    ranks[2] = ranks[0];
    EXPECT_EQ(slowestRankText(ranks), ""); // nobody stands out
    EXPECT_EQ(slowestRankText({ranks[0]}), "");

    // Through samples: the lane's summary keeps each rank's medians and the verdict.
    MetricSample s;
    s.kind = SampleKind::Train;
    s.step = 10;
    s.samplesPerSec = 100;
    s.stepsPerSec = 1;
    s.intervalSeconds = 1;
    s.workerStepBreakdown = {ranks[0], ranks[1]};
    s.workerStepBreakdown.push_back(
        {{"data", 0.001}, {"forward", 0.005}, {"backward", 0.006}, {"communication", 0.0005}, {"other", 0.0005}});
    const auto back = sampleFromJsonLine(toJsonLine(s));
    EXPECT_EQ(back.workerStepBreakdown, s.workerStepBreakdown);
    LaneSpec spec;
    spec.name = "dp";
    const auto sum = summarize(spec, 128, std::vector<MetricSample>{back}, {});
    ASSERT_EQ(sum.workerStepBreakdown.size(), 3u);
    EXPECT_NE(sum.slowestRank.find("rank 2"), std::string::npos) << sum.slowestRank;
}

namespace {

// explainBf16Lanes(lanes) is one why-line, and it says `text`.
void expectOneWhyLineSays(const std::vector<LaneSummary>& lanes, const std::string& text) {
    const auto lines = explainBf16Lanes(lanes);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find(text), std::string::npos) << lines[0];
}

LaneSummary cpuLane(const std::string& name, Precision precision, double rate, std::string execution) {
    LaneSummary l;
    l.name = name;
    l.device = "cpu";
    l.threads = 2;
    l.precision = precision;
    l.batch = 12;
    l.samplesPerSec = rate;
    l.execution = std::move(execution);
    return l;
}

} // namespace

// A bf16 lane slower than an fp32 lane of the same machine and threads says why, with the
// measured cause its execution names, each lane's share of its GEMM peak and the phase that grew.
TEST(ExplainSummary, ABf16LaneSlowerThanFp32SaysWhy) {
    auto fp32 = cpuLane("fp32", Precision::Fp32, 400, "fused transformer step (causal attention tiles), fused AdamW");
    fp32.utilization = 0.57;
    fp32.stepBreakdown = {{"forward", 0.010}, {"backward", 0.014}};
    auto autocast = cpuLane("bf16", Precision::Bf16, 288, "autograd step (not a GPT), fused AdamW, bf16 autocast");
    autocast.utilization = 0.12;
    autocast.stepBreakdown = {{"forward", 0.012}, {"backward", 0.030}};
    auto lines = explainBf16Lanes({fp32, autocast});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "bf16 (bf16) runs at 0.72× the speed of fp32 (fp32): it runs autocast, which casts every "
                        "weight and the activations around the fp32 layers each step, and those casts cost more "
                        "than its bf16 matrix products save; it reached 12% of this CPU's bf16 GEMM peak, fp32 57% "
                        "of the fp32 one; its backward phase took 30 ms a step against 14 ms.");
    // The fused step: the routes it took.
    auto fused = cpuLane("bf16", Precision::Bf16, 300,
                         "fused transformer step (bf16 GEMMs with fp32 results: oneDNN bf16 for every GEMM shape "
                         "(14) (the fastest timed on this CPU at 2 threads); fp32 causal attention tiles and master "
                         "weights), fused AdamW");
    lines = explainBf16Lanes({fp32, fused});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("its GEMMs took oneDNN bf16 for every GEMM shape (14) (the fastest timed on this CPU at "
                            "2 threads), and the rest of its step"),
              std::string::npos)
        << lines[0];
    // bf16 units slower than the fp32 ones (AVX-512 BF16 without AMX on a Xeon): the measured
    // peaks the execution names, the routes, and the peak the lane is held to.
    auto slower = cpuLane("bf16", Precision::Bf16, 300,
                          "fused transformer step (bf16 GEMMs with fp32 results: fp32 for every GEMM shape (15) (the "
                          "fastest timed on this CPU at 2 threads); fp32 causal attention tiles and master weights), "
                          "fused AdamW, bf16 slower than fp32 on this CPU (bf16 peak 178 against fp32 332 GFLOP/s at "
                          "2 threads; this Xeon model's AMX is not exposed here)");
    slower.utilization = 0.48;
    lines = explainBf16Lanes({fp32, slower});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "bf16 (bf16) runs at 0.75× the speed of fp32 (fp32): this CPU's bf16 arithmetic is slower "
                        "than its fp32 (bf16 peak 178 against fp32 332 GFLOP/s at 2 threads; this Xeon model's AMX is "
                        "not exposed here), so bf16 cannot pay here: its GEMMs took fp32 for every GEMM shape (15) "
                        "(the fastest timed on this CPU at 2 threads), and the conversions to bf16 and back come on "
                        "top; it reached 48% of this CPU's fp32 peak (the higher, which it is held to), fp32 57%.");
    // Its inputs kept in fp32 storage: no conversions, the roundings.
    slower.execution = "fused dense step (bf16 GEMMs with fp32 sums: fp32 for every GEMM, on bf16 values kept in fp32 "
                       "storage (timed: fp32 for 6 of 8 GEMM shapes, AVX-512 BF16 kernel for 2 (the fastest timed on "
                       "this CPU at 2 threads x 2 workers), the other routes' shapes 0.6% of the arithmetic); fp32 "
                       "master weights), bf16 slower than fp32 on this CPU (bf16 peak 178 against fp32 332 GFLOP/s at "
                       "2 threads)";
    expectOneWhyLineSays({fp32, slower},
                         "so bf16 cannot pay here: its GEMMs took fp32 for every GEMM, on bf16 values kept in fp32 "
                         "storage (timed: fp32 for 6 of 8 GEMM shapes, AVX-512 BF16 kernel for 2 (the fastest timed "
                         "on this CPU at 2 threads x 2 workers), the other routes' shapes 0.6% of the arithmetic), "
                         "and rounding their inputs to bf16 comes on top;");
    // No bf16 units: the routes' own parenthesis holds a semicolon (the copies' margin), and the
    // routes end at the execution's own semicolon, not there.
    auto emulated = cpuLane("bf16", Precision::Bf16, 300,
                            "fused transformer step (bf16 GEMMs with fp32 results: MKL bf16 for 12 of 15 GEMM shapes, "
                            "fp32 for 3 (the fastest timed on this CPU at 2 threads x 2 workers; with no bf16 units "
                            "another route must beat fp32 on fp32 inputs by 15%); fp32 causal attention tiles and "
                            "master weights), fused AdamW, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16)");
    expectOneWhyLineSays({fp32, emulated},
                         "emulated on its fp32 units: its GEMMs took MKL bf16 for 12 of 15 GEMM shapes, fp32 for 3 "
                         "(the fastest timed on this CPU at 2 threads x 2 workers; with no bf16 units another route "
                         "must beat fp32 on fp32 inputs by 15%), and the conversions to bf16 and back come on top.");
    // The dense step's inputs kept in fp32 storage, its routes' text a parenthesis in another.
    emulated.execution = "fused dense step (bf16 GEMMs with fp32 sums: fp32 for every GEMM, on bf16 values kept in "
                         "fp32 storage (timed: fp32 for every GEMM shape (8) (the fastest timed on this CPU at 1 "
                         "thread; with no bf16 units another route must beat fp32 on fp32 inputs by 15%))), one-pass "
                         "RMSprop, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16)";
    expectOneWhyLineSays({fp32, emulated},
                         "its GEMMs took fp32 for every GEMM, on bf16 values kept in fp32 storage (timed: fp32 for "
                         "every GEMM shape (8) (the fastest timed on this CPU at 1 thread; with no bf16 units another "
                         "route must beat fp32 on fp32 inputs by 15%)), and rounding their inputs to bf16 comes on "
                         "top.");
    // The same CPU, an autocast lane (its convolutions run on the slower bf16 units).
    auto slowerAutocast = cpuLane("bf16", Precision::Bf16, 220,
                                  "autograd step (not a GPT), fused AdamW, bf16 autocast, bf16 slower than fp32 on "
                                  "this CPU (bf16 peak 89 against fp32 160 GFLOP/s at 1 thread)");
    expectOneWhyLineSays({fp32, slowerAutocast},
                         "slower than its fp32 (bf16 peak 89 against fp32 160 GFLOP/s at 1 thread), so bf16 cannot "
                         "pay here: its bf16 layers run at the slower rate");
    slowerAutocast.execution +=
        ", convolutions on their bf16 values in fp32 arithmetic where timed faster than in bf16";
    expectOneWhyLineSays({fp32, slowerAutocast},
                         "so bf16 cannot pay here: its convolutions ran on their bf16 values in fp32 where timed "
                         "faster, and the casts to bf16 and back come on top");
    // Its dense layers' GEMMs, each shape on its fastest route (the route summary without its
    // parenthesis); before the first step has routed them, nothing said of them.
    auto denseAutocast = slowerAutocast;
    denseAutocast.execution += ", dense layers' bf16 GEMMs: each shape's fastest route, timed at its first use";
    lines = explainBf16Lanes({fp32, denseAutocast});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].find("dense layers"), std::string::npos) << lines[0];
    denseAutocast.execution = slowerAutocast.execution +
                              ", dense layers' bf16 GEMMs: fp32 for 3 of 6 GEMM shapes, MKL bf16 for 3 (the fastest "
                              "timed on this CPU at 1 thread), hashed dropout masks";
    lines = explainBf16Lanes({fp32, denseAutocast});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("its convolutions ran on their bf16 values in fp32 where timed faster, its dense layers' "
                            "GEMMs took fp32 for 3 of 6 GEMM shapes, MKL bf16 for 3, and the casts to bf16 and back "
                            "come on top"),
              std::string::npos)
        << lines[0];
    denseAutocast.execution = "autograd step, bf16 autocast, bf16 slower than fp32 on this CPU (bf16 peak 89 against "
                              "fp32 160 GFLOP/s at 1 thread), dense layers' bf16 GEMMs: fp32 for every GEMM "
                              "(DEVICERACE_BF16_ROUTE), hashed dropout masks"; // convolutions not on the tuned node
    lines = explainBf16Lanes({fp32, denseAutocast});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("so bf16 cannot pay here: its dense layers' GEMMs took fp32 for every GEMM, its other bf16 "
                            "layers run at the slower rate"),
              std::string::npos)
        << lines[0];
    // Faster, a tie, other threads or another machine: nothing to explain.
    EXPECT_TRUE(explainBf16Lanes({fp32, cpuLane("bf16", Precision::Bf16, 700, "")}).empty());
    EXPECT_TRUE(explainBf16Lanes({fp32, cpuLane("bf16", Precision::Bf16, 395, "")}).empty());
    auto oneThread = cpuLane("bf16", Precision::Bf16, 200, "");
    oneThread.threads = 1;
    EXPECT_TRUE(explainBf16Lanes({fp32, oneThread}).empty());
    auto remote = cpuLane("bf16", Precision::Bf16, 200, "");
    remote.host = "ssh://box";
    EXPECT_TRUE(explainBf16Lanes({fp32, remote}).empty());
}

namespace {

// The one why-line of a race of `fp32` and `bf16` lanes.
std::string whyLine(const LaneSummary& fp32, const LaneSummary& bf16) {
    const auto lines = explainBf16Lanes({fp32, bf16});
    EXPECT_EQ(lines.size(), 1u);
    return lines.empty() ? std::string() : lines[0];
}

} // namespace

// Without bf16 units a bf16 lane slower than fp32 says its arithmetic is emulated, and what its
// products and convolutions ran on instead: the routes timed there, fp32 convolutions.
TEST(ExplainSummary, ABf16LaneWithoutBf16UnitsSaysWhatRanInItsPlace) {
    auto fp32 = cpuLane("fp32", Precision::Fp32, 400, "fused dense step, one-pass RMSprop");
    auto bf16 = cpuLane("bf16", Precision::Bf16, 40, "fused Adam, bf16 autocast, bf16 emulated (this CPU ...)");
    EXPECT_NE(whyLine(fp32, bf16).find("no bf16 units"), std::string::npos);
    // a fused step: the routes its GEMMs took, and its peak the fp32 one
    bf16.execution = "fused dense step (bf16 GEMMs with fp32 sums: MKL bf16 for 5 of 8 GEMM shapes, fp32 for 3 (the "
                     "fastest timed on this CPU at 1 thread); fp32 master weights), fused Adam, bf16 emulated (this "
                     "CPU has neither AMX nor AVX-512 BF16)";
    bf16.utilization = 0.77;
    fp32.utilization = 0.83;
    auto line = whyLine(fp32, bf16);
    EXPECT_NE(line.find("emulated on its fp32 units: its GEMMs took MKL bf16 for 5 of 8 GEMM shapes, fp32 for 3 (the "
                        "fastest timed on this CPU at 1 thread), and the conversions to bf16 and back come on top"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("; it reached 77% of this CPU's fp32 peak (an emulated bf16 lane's), fp32 83%"),
              std::string::npos)
        << line;
    // an autograd lane: its convolutions in fp32, its dense layers' routes
    bf16.execution = "fused Adam, bf16 autocast, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16), "
                     "channels_last, convolutions on their bf16 values in fp32 arithmetic (no bf16 units), dense "
                     "layers' bf16 GEMMs: MKL bf16 for every GEMM shape (6) (the fastest timed on this CPU at 1 "
                     "thread), hashed dropout masks";
    line = whyLine(fp32, bf16);
    EXPECT_NE(line.find("emulated on its fp32 units: its convolutions ran on their bf16 values in fp32, its dense "
                        "layers' GEMMs took MKL bf16 for every GEMM shape (6), and the casts to bf16 and back come on "
                        "top"),
              std::string::npos)
        << line;
    // dense layers alone
    bf16.execution = "fused Adam, bf16 autocast, bf16 emulated (this CPU has neither AMX nor AVX-512 BF16), dense "
                     "layers' bf16 GEMMs: fp32 for every GEMM shape (2) (the fastest timed on this CPU at 1 thread)";
    line = whyLine(fp32, bf16);
    EXPECT_NE(line.find("its dense layers' GEMMs took fp32 for every GEMM shape (2), its other bf16 layers run on the "
                        "emulation"),
              std::string::npos)
        << line;
}

// A lane past its peak shows 100% and the race says the peak was measured low.
TEST(ExplainSummary, ALanePastItsPeakShowsAHundredPercentAndSaysWhy) {
    LaneSpec spec;
    spec.name = "cpu·1";
    const std::vector<MetricSample> past = {running(1e8, 7.75e10), train(10, 800, false, {})};
    const auto sum = summarize(spec, 100, past, {});
    EXPECT_DOUBLE_EQ(*sum.achievedFlopsPerSec, 8e10);
    EXPECT_DOUBLE_EQ(*sum.utilization, 1.0); // 103%, shown as 100%
    const auto lines = explainPeaksExceeded(std::vector<LaneSummary>{sum});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].rfind("cpu·1 reached 103% of the peak it is measured against (78 GFLOP/s, measured: test), "
                             "shown as 100%",
                             0),
              0u)
        << lines[0];
    RaceSummary race;
    race.lanes.push_back(sum);
    finishRaceSummary(race);
    ASSERT_FALSE(race.explanations.empty());
    EXPECT_EQ(race.explanations.back(), lines[0]);
    const std::vector<MetricSample> under = {running(1e8, 1e11), train(10, 800, false, {})};
    EXPECT_TRUE(explainPeaksExceeded(std::vector<LaneSummary>{summarize(spec, 100, under, {})}).empty());
}

// A lane that finished without a speed says why: all warm-up, or no interval timed after it.
TEST(ExplainSummary, ALaneWithoutASpeedSaysWhy) {
    using Samples = std::vector<MetricSample>;
    using Lanes = std::vector<LaneSummary>;
    LaneSpec spec;
    spec.name = "cpu·1";
    MetricSample finished;
    finished.kind = SampleKind::State;
    finished.state = LaneState::Finished;
    auto quick = summarize(spec, 100, Samples{train(15, 800, true, {}), finished}, {});
    ASSERT_FALSE(quick.stepsPerSec);
    quick.wallSeconds = 2.5;
    auto lines = explainUnmeasuredLanes(Lanes{quick}); // from a recording: the warm-up's length unknown
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "cpu·1 has no speed: its 15 steps took 2.5 s, and every interval they were timed in began "
                        "in the warm-up, which is left out of the speed (--warmup-steps); race more steps.");
    quick.warmupSteps = 20; // as a race fills it
    lines = explainUnmeasuredLanes(Lanes{quick});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "cpu·1 has no speed: its 15 steps were all warm-up, which is left out of the speed (the "
                        "first 20 steps of a lane: --warmup-steps); race more steps, or lower --warmup-steps.");
    // A script's 400 steps in one report interval that began in the warm-up.
    auto script = summarize(spec, 100, Samples{train(1, 800, true, {}), train(400, 800, true, {}), finished}, {});
    script.kind = LaneKind::External;
    script.wallSeconds = 0.34;
    script.warmupSteps = 20;
    lines = explainUnmeasuredLanes(Lanes{script});
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "cpu·1 has no speed: its 400 steps took 340 ms, and no timed interval began after the "
                        "warm-up (the first 20 steps) before it finished (its program reports its steps every 0.1 "
                        "s, and a speed is timed from one report to the next); race more steps.");
    // Lanes with the same steps, all warm-up: one sentence.
    auto two = quick;
    two.name = "cpu·2";
    RaceSummary race;
    race.lanes = Lanes{quick, two};
    finishRaceSummary(race);
    ASSERT_EQ(race.explanations.size(), 1u);
    EXPECT_EQ(race.explanations[0].rfind("cpu·1 and cpu·2 have no speed: their 15 steps were all warm-up", 0), 0u)
        << race.explanations[0];
    // Measured, failed or without a step: nothing to say.
    const auto measured =
        summarize(spec, 100, Samples{train(10, 800, true, {}), train(40, 800, false, {}), finished}, {});
    MetricSample failed = finished;
    failed.state = LaneState::Failed;
    const auto broken = summarize(spec, 100, Samples{train(5, 800, true, {}), failed}, {});
    EXPECT_TRUE(explainUnmeasuredLanes(Lanes{measured, broken, summarize(spec, 100, Samples{finished}, {})}).empty());
}
