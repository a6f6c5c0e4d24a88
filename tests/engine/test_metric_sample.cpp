#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

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
    EXPECT_THROW(
        sampleFromJsonLine(R"({"kind":"train","lane":"a","step":1,"samples":1,"t":0,"worker_samples_per_sec":3})"),
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
    for (const char* fields :
         {R"("step":1e300,"samples":1)", R"("step":1,"samples":-9.3e18)", R"("step":1,"samples":1,"memory_bytes":-1)",
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
    std::vector<MetricSample> samples = {
        train(5, 0.5, 10, true), train(10, 1.0, 100, false), train(15, 1.5, 300, false), train(20, 2.0, 200, false),
        eval(20, 2.4, 0.80),     train(25, 3.0, 200, false), eval(25, 3.5, 0.91),        eval(30, 4.0, 0.95)};
    LaneSpec spec;
    spec.name = "cpu·1";
    auto sum = summarize(spec, 100, samples, {0.9});
    EXPECT_DOUBLE_EQ(*sum.samplesPerSec, 200); // median of 100, 300, 200, 200; 10 (warm-up) excluded
    EXPECT_DOUBLE_EQ(*sum.stepsPerSec, 2);
    EXPECT_DOUBLE_EQ(*sum.timeToTargetSeconds, 3.5); // first evaluation at or above 0.9
    EXPECT_DOUBLE_EQ(*sum.finalTestAccuracy, 0.95);
    EXPECT_EQ(sum.steps, 30);
    EXPECT_DOUBLE_EQ(sum.measuredSeconds, 2.0);
    EXPECT_EQ(sum.measuredSamples, 400);
    EXPECT_FALSE(summarize(spec, 100, samples, {0.99}).timeToTargetSeconds.has_value());
}

TEST(Summary, ALossTargetStopsTheClockAtTheFirstValidationLossAtOrBelowIt) {
    // Language models race to a validation loss (--target-loss); it replaces the accuracy target.
    std::vector<MetricSample> samples = {eval(10, 1.0, 0.30), eval(20, 2.0, 0.35), eval(30, 3.0, 0.40)};
    samples[0].loss = 2.6;
    samples[1].loss = 2.2;
    samples[2].loss = 1.9;
    LaneSpec spec;
    spec.name = "cpu·1";
    auto sum = summarize(spec, 12, samples, {0.3, 2.2});
    EXPECT_DOUBLE_EQ(*sum.timeToTargetSeconds, 2.0); // 2.2 <= 2.2; the accuracy 0.3 at t = 1 is ignored
    EXPECT_DOUBLE_EQ(*sum.finalTestLoss, 1.9);
    EXPECT_FALSE(summarize(spec, 12, samples, {std::nullopt, 1.5}).timeToTargetSeconds.has_value());
    EXPECT_DOUBLE_EQ(*summarize(spec, 12, samples, {0.3}).timeToTargetSeconds, 1.0);
}

TEST(Summary, CostToTargetAndNormalisedCost) {
    std::vector<MetricSample> samples = {train(10, 1.0, 100, false), eval(10, 1800, 0.95)};
    LaneSpec cheap, dear;
    cheap.name = "cheap";
    cheap.costPerHour = 1.0;
    dear.name = "dear";
    dear.costPerHour = 3.0;
    std::vector<LaneSummary> lanes = {summarize(cheap, 100, samples, {0.9}), summarize(dear, 100, samples, {0.9})};
    EXPECT_DOUBLE_EQ(*lanes[0].costToTargetUsd, 0.5); // half an hour at $1/h
    EXPECT_DOUBLE_EQ(*lanes[1].totalCostUsd, 1.5);
    normaliseCosts(lanes);
    EXPECT_DOUBLE_EQ(*lanes[1].costVsBaseline, 3.0);
    LaneSpec free;
    EXPECT_FALSE(summarize(free, 100, samples, {0.9}).costToTargetUsd.has_value());
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

// The running median equals median() of the values so far, at every length, for random,
// sorted, reversed and repeated values.
TEST(RunningMedian, EqualsTheSortedMedianAtEveryLength) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> u(0, 1000);
    std::vector<std::vector<double>> series(4);
    for (int i = 0; i < 500; ++i) {
        series[0].push_back(u(rng));
        series[1].push_back(i);
        series[2].push_back(500 - i);
        series[3].push_back(static_cast<double>(i % 3));
    }
    for (const auto& values : series) {
        RunningMedian running;
        std::vector<double> so_far;
        for (double v : values) {
            running.add(v);
            so_far.push_back(v);
            ASSERT_DOUBLE_EQ(running.median(), median(so_far)) << so_far.size();
        }
    }
}

// Past kExactLimit values the running median keeps buckets instead of every value (an
// hours-long lane): it stays within a bucket of the exact median, for rates that wander,
// for a constant, for zeros and negatives, and after a switch in the middle of a skewed run.
TEST(RunningMedian, StaysWithinABucketPastTheExactLimit) {
    std::mt19937 rng(11);
    std::lognormal_distribution<double> rates(7.0, 0.3);
    std::uniform_real_distribution<double> signed_(-50, 20);
    const std::size_t n = RunningMedian::kExactLimit * 3 + 17;
    std::vector<std::vector<double>> series(4);
    for (std::size_t i = 0; i < n; ++i) {
        series[0].push_back(rates(rng));
        series[1].push_back(1234.5);
        series[2].push_back(i % 5 == 0 ? 0.0 : signed_(rng));
        series[3].push_back(i < n / 2 ? 10.0 + static_cast<double>(i % 7) : 1e6 + static_cast<double>(i));
    }
    for (const auto& values : series) {
        RunningMedian running;
        for (double v : values) {
            running.add(v);
        }
        EXPECT_FALSE(running.exact());
        auto sorted = values;
        std::sort(sorted.begin(), sorted.end());
        // The lower middle value: what the buckets report when the count is even.
        const double exact = sorted[(sorted.size() - 1) / 2];
        EXPECT_NEAR(running.median(), exact, std::abs(exact) * RunningMedian::kBucketWidth + 1e-12)
            << "exact " << exact;
    }
    RunningMedian small;
    for (int i = 0; i < 1000; ++i) {
        small.add(i);
    }
    EXPECT_TRUE(small.exact());
}

// A lane's summary kept sample by sample (what the window shows live) equals the summary of
// the whole history, at every point of a long run with warm-up, evaluations and states.
TEST(RunningSummary, MatchesTheWholeHistoryAtEveryPoint) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> rate(100, 300);
    LaneSpec spec = parseLaneSpec("cpu,threads=1,name=a,cost=2");
    std::vector<MetricSample> samples;
    RunningSummary running;
    for (int i = 1; i <= 400; ++i) {
        MetricSample s;
        s.kind = i % 25 == 0 ? SampleKind::Eval : SampleKind::Train;
        s.step = i * 10;
        s.samples = i * 1000;
        s.time = i * 0.5;
        s.warmup = i < 5;
        if (s.kind == SampleKind::Train) {
            s.samplesPerSec = rate(rng);
            s.stepsPerSec = *s.samplesPerSec / 100;
            s.intervalSeconds = 0.5;
        } else {
            s.accuracy = 0.5 + i / 1000.0;
        }
        s.memoryBytes = static_cast<std::uint64_t>(1000 + i % 17);
        samples.push_back(s);
        running.add(s);
        const auto whole = summarize(spec, 100, samples, {0.8});
        const auto live = running.summary(spec, 100, {0.8});
        ASSERT_EQ(live.steps, whole.steps);
        ASSERT_EQ(live.samplesPerSec, whole.samplesPerSec) << i;
        ASSERT_EQ(live.stepsPerSec, whole.stepsPerSec);
        ASSERT_EQ(live.measuredSamples, whole.measuredSamples);
        ASSERT_EQ(live.timeToTargetSeconds, whole.timeToTargetSeconds);
        ASSERT_EQ(live.finalTestAccuracy, whole.finalTestAccuracy);
        ASSERT_EQ(live.peakMemoryBytes, whole.peakMemoryBytes);
        ASSERT_EQ(live.totalCostUsd, whole.totalCostUsd);
    }
    // Independent of the implementation: the median of the measured intervals, by hand.
    std::vector<double> rates;
    for (const auto& s : samples) {
        if (s.kind == SampleKind::Train && !s.warmup) {
            rates.push_back(*s.samplesPerSec);
        }
    }
    std::sort(rates.begin(), rates.end());
    const double expected =
        rates.size() % 2 ? rates[rates.size() / 2] : (rates[rates.size() / 2 - 1] + rates[rates.size() / 2]) / 2;
    EXPECT_DOUBLE_EQ(*running.summary(spec, 100, {0.8}).samplesPerSec, expected);
    EXPECT_DOUBLE_EQ(*running.summary(spec, 100, {0.8}).timeToTargetSeconds, 300 * 0.5); // first eval >= 0.8
}

namespace {
LaneSummary rated(const std::string& name, const std::string& device, std::optional<int> threads, double rate) {
    LaneSummary l;
    l.name = name;
    l.device = device;
    l.threads = threads;
    l.batch = 128;
    l.samplesPerSec = rate;
    return l;
}
} // namespace

// A lane with more resources that loses is explained in words, naming both lanes and the ratio;
// a tie, or a lane that wins, is not.
TEST(Explain, SlowerLanesWithMoreResourcesSayWhy) {
    const auto one = rated("cpu·1", "cpu", 1, 29000), two = rated("cpu·2", "cpu", 2, 21500);
    auto why = explainSlowerLanes({one, two}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("cpu·2 runs at 0.74× the speed of cpu·1"), std::string::npos) << why[0];
    EXPECT_NE(why[0].find("4.4 ms on 1 thread"), std::string::npos) << why[0]; // 128 / 29,000 s
    EXPECT_NE(why[0].find("split two ways"), std::string::npos) << why[0];
    // A long step splits well: a loss then means the cores were not the lane's own.
    why = explainSlowerLanes({rated("cpu·1", "cpu", 1, 90), rated("cpu·2", "cpu", 2, 64)}, true, "fashion-cnn");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("1.4 s on 1 thread, work enough to split two ways"), std::string::npos) << why[0];
    EXPECT_EQ(why[0].find("too little work"), std::string::npos) << why[0];
    // Measured: the step's shares found its second thread at 55% of the first's speed.
    auto uneven = two;
    uneven.threadSpeeds = {1.0, 0.55};
    why = explainSlowerLanes({one, uneven}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("the slowest ran at 55% of the fastest"), std::string::npos) << why[0];
    EXPECT_EQ(why[0].find("too little work"), std::string::npos) << why[0];
    uneven.threadSpeeds = {0.97, 1.0}; // even enough: the step-size reading stands
    why = explainSlowerLanes({one, uneven}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("split two ways"), std::string::npos) << why[0];
    // Measured first of all: the rest of the machine was busier while the slower lane ran.
    auto quiet = one, busy = uneven;
    quiet.otherCpus = 0.02;
    quiet.stealShare = 0.01;
    busy.otherCpus = 0.96;
    busy.stealShare = 0.01;
    why = explainSlowerLanes({quiet, busy}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("other processes kept 1.0 CPUs busy on average (measured from /proc/stat; 0.0 while "
                          "cpu·1 ran), so its 2 threads"),
              std::string::npos)
        << why[0];
    // One busy process beside both lanes: the one-thread lane still had a core of its own, the
    // two threads and that process wanted more than the machine's 2 CPUs.
    quiet.otherCpus = 1.0;
    busy.otherCpus = 0.6;
    busy.machineCpus = 2;
    why = explainSlowerLanes({quiet, busy}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("other processes kept 0.6 CPUs of this machine's 2 busy"), std::string::npos) << why[0];
    busy.machineCpus = 4; // room for both: the load explains nothing, the step size does
    why = explainSlowerLanes({quiet, busy}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("split two ways"), std::string::npos) << why[0];
    quiet.otherCpus = 0.02;
    busy.otherCpus = 0.96;
    busy.machineCpus.reset();
    // ... or the hypervisor took more of the vCPUs' time.
    busy.otherCpus = 0.1;
    busy.stealShare = 0.12;
    why = explainSlowerLanes({quiet, busy}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("the hypervisor gave 12% of this virtual machine's CPU time"), std::string::npos) << why[0];
    // The same load during both lanes, with room for it, explains nothing between them.
    busy.machineCpus = 4;
    quiet.otherCpus = busy.otherCpus = 0.9;
    quiet.stealShare = busy.stealShare = 0.12;
    why = explainSlowerLanes({quiet, busy}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("split two ways"), std::string::npos) << why[0];
    // Its steps mostly waited for their input: more threads do not shorten that (it read as
    // the step size's or the cores', which the data phase contradicts).
    auto starved = uneven, fed = one;
    starved.inputBound = true;
    starved.dataShare = 0.83;
    fed.dataShare = 0.80;
    why = explainSlowerLanes({fed, starved}, true, "script");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("it waited for its input 83% of each step (the data phase; 80% for cpu·1), time its 2 "
                          "threads do not shorten"),
              std::string::npos)
        << why[0];
    // A variant of the script (args=: another optimizer) is not the same work on more threads.
    auto variant = two;
    variant.args = "--use-optimizer";
    EXPECT_TRUE(explainSlowerLanes({one, variant}, true, "script").empty());
    // Live mode: the lanes shared the cores.
    why = explainSlowerLanes({one, two}, false, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("share this machine's cores"), std::string::npos) << why[0];
    // A win, or a tie within 3%, has nothing to explain.
    EXPECT_TRUE(explainSlowerLanes({one, rated("cpu·2", "cpu", 2, 40000)}, true, "fashion-mlp").empty());
    EXPECT_TRUE(explainSlowerLanes({one, rated("cpu·2", "cpu", 2, 28500)}, true, "fashion-mlp").empty());
    // Fewer threads losing to more is the expected order, not explained.
    EXPECT_TRUE(
        explainSlowerLanes({rated("cpu·1", "cpu", 1, 20000), rated("cpu·2", "cpu", 2, 30000)}, true, "x").empty());
    // A GPU slower than a CPU.
    why = explainSlowerLanes({one, rated("cuda:0", "cuda:0", std::nullopt, 14500)}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("cuda:0 runs at 0.50× the speed of cpu·1"), std::string::npos) << why[0];
    EXPECT_NE(why[0].find("too small to keep the GPU busy"), std::string::npos) << why[0];
    auto starvedGpu = rated("cuda:0", "cuda:0", std::nullopt, 14500);
    starvedGpu.inputBound = true;
    starvedGpu.dataShare = 0.6;
    why = explainSlowerLanes({one, starvedGpu}, true, "fashion-mlp");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("it waited for its input 60% of each step (the data phase), the GPU idle meanwhile"),
              std::string::npos)
        << why[0];
    // More data-parallel ranks, slower: the allreduce share says why.
    auto r1 = rated("1 rank", "cpu", 1, 10000), r4 = rated("4 ranks", "cpu", 1, 8000);
    r1.workers = 1;
    r4.workers = 4;
    r4.allreduceShare = 0.4;
    why = explainSlowerLanes({r1, r4}, true, "fashion-cnn");
    ASSERT_EQ(why.size(), 1u);
    EXPECT_NE(why[0].find("40% of every step"), std::string::npos) << why[0];
}
