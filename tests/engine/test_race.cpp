// Smoke tests: tiny real training runs on the CPU (seconds each).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <cmath>
#include <thread>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"
#include "test_util.h"

using namespace devicerace;

namespace {

bool haveFashionMnist() {
    std::error_code ec;
    return std::filesystem::exists(defaultFashionMnistDir() / "train-images-idx3-ubyte.gz", ec);
}

LaneSpec cpuLane(int threads, std::string name = {}) {
    LaneSpec s;
    s.threads = threads;
    s.name = std::move(name);
    return s;
}

std::vector<double> evalLosses(const Lane& lane) {
    std::vector<double> out;
    for (const auto& s : lane.history()) {
        if (s.kind == SampleKind::Eval) {
            out.push_back(*s.loss);
        }
    }
    return out;
}

std::string usageMessage(RaceSpec spec) {
    try {
        Race race(std::move(spec));
    } catch (const Error& e) {
        return e.what();
    }
    return "(accepted)";
}

LaneRunSettings tinySettings(std::shared_ptr<const ImageDataset> data, std::int64_t steps) {
    LaneRunSettings s;
    s.workload = "fashion-mlp";
    s.data = std::move(data);
    s.steps = steps;
    s.warmupSteps = 2;
    return s;
}

void waitFor(const std::function<bool()>& ok) {
    for (int i = 0; i < 600 && !ok(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

} // namespace

TEST(RaceSmoke, RealFashionMnistSubsetLearns) {
    if (!haveFashionMnist()) {
        GTEST_SKIP() << "Fashion-MNIST not installed (scripts/setup installs dataset-fashion-mnist)";
    }
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.lanes = {cpuLane(1)};
    spec.epochs = 2;
    spec.trainLimit = 3000;
    spec.testLimit = 1000;
    spec.warmupSteps = 5;
    Race race(spec);
    EXPECT_FALSE(race.dataset().synthetic);
    race.start();
    race.wait();
    auto sum = race.summary();
    ASSERT_EQ(sum.lanes.size(), 1u);
    const auto& lane = sum.lanes[0];
    EXPECT_EQ(lane.state, LaneState::Finished) << lane.error;
    EXPECT_EQ(lane.name, "cpu·1");
    EXPECT_EQ(lane.steps, 2 * ((3000 + 127) / 128));
    EXPECT_EQ(lane.samples, 6000);
    ASSERT_TRUE(lane.finalTestAccuracy.has_value());
    EXPECT_GT(*lane.finalTestAccuracy, 0.6); // chance is 0.1
    ASSERT_TRUE(lane.samplesPerSec.has_value());
    EXPECT_GT(*lane.samplesPerSec, 0);
    // Peak tensor memory covers at least the weights, their gradients and RMSprop's averages
    // (the data itself is shared read-only between CPU lanes, not copied).
    ASSERT_TRUE(lane.peakMemoryBytes.has_value());
    EXPECT_GT(*lane.peakMemoryBytes, 3u * 669706u * 4u);
    EXPECT_EQ(evalLosses(*race.lanes()[0]).size(), 2u); // one evaluation per epoch
}

TEST(RaceSmoke, ConcurrentLanesWithOneSeedTrainIdentically) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 600, 100);
    auto run = [&](std::uint64_t seedB) {
        RaceSpec spec;
        spec.dataDir = dir.path().string();
        spec.lanes = {cpuLane(1, "a"), cpuLane(1, "b")};
        spec.steps = 40;
        spec.evalEverySteps = 5;
        spec.seed = 7;
        Race race(spec);
        // Lane b gets its own seed through a second race when asked to differ.
        if (seedB != 7) {
            RaceSpec other = spec;
            other.seed = seedB;
            other.lanes = {cpuLane(1, "b")};
            Race raceB(other);
            race.start();
            raceB.start();
            race.wait();
            raceB.wait();
            return std::pair{evalLosses(*race.lanes()[0]), evalLosses(*raceB.lanes()[0])};
        }
        race.start();
        race.wait();
        return std::pair{evalLosses(*race.lanes()[0]), evalLosses(*race.lanes()[1])};
    };
    auto [a, b] = run(7);
    ASSERT_EQ(a.size(), 8u);
    EXPECT_EQ(a, b); // bit-identical: init, shuffles and dropout masks all come from each lane's generator
    auto [c, d] = run(8);
    EXPECT_NE(c, d);
}

TEST(RaceSmoke, AFailingLaneLeavesTheOthersRacing) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 300, 50);
    auto data = loadFashionMnist(dir.path());
    auto failing = tinySettings(data, 30);
    failing.failAtStep = 5;
    auto badOwner = makeLane(cpuLane(1, "bad"), failing);
    Lane& bad = *badOwner;
    auto goodOwner = makeLane(cpuLane(1, "good"), tinySettings(data, 30));
    Lane& good = *goodOwner;
    bad.start();
    good.start();
    bad.wait();
    good.wait();
    EXPECT_EQ(bad.state(), LaneState::Failed);
    EXPECT_NE(bad.message().find("injected fault at step 5"), std::string::npos) << bad.message();
    EXPECT_EQ(good.state(), LaneState::Finished);
    EXPECT_EQ(good.summary().steps, 30);
}

TEST(RaceSmoke, HugeLearningRateDivergesWithTheStep) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 300, 50);
    LaneSpec spec = cpuLane(1, "hot");
    spec.lr = 1e6;
    auto laneOwner = makeLane(spec, tinySettings(loadFashionMnist(dir.path()), 200));
    Lane& lane = *laneOwner;
    lane.start();
    lane.wait();
    EXPECT_EQ(lane.state(), LaneState::Diverged);
    EXPECT_NE(lane.message().find("diverged at step"), std::string::npos) << lane.message();
    // Every sample's loss that was written is finite (charts keep the last finite point).
    for (const auto& s : lane.history()) {
        if (s.loss) {
            EXPECT_TRUE(std::isfinite(*s.loss));
        }
    }
}

TEST(RaceSmoke, PauseResumeAndStop) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 600, 50);
    auto data = loadFashionMnist(dir.path());
    auto laneOwner = makeLane(cpuLane(1, "p"), tinySettings(data, 1000000));
    Lane& lane = *laneOwner;
    lane.setPaused(true);
    lane.start();
    waitFor([&] { return lane.state() == LaneState::Paused; });
    EXPECT_EQ(lane.state(), LaneState::Paused);
    const auto stepsWhilePaused = lane.summary().steps;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(lane.summary().steps, stepsWhilePaused);
    lane.setPaused(false);
    waitFor([&] { return lane.summary().steps > stepsWhilePaused + 5; });
    EXPECT_GT(lane.summary().steps, stepsWhilePaused);
    lane.requestStop();
    lane.wait();
    EXPECT_EQ(lane.state(), LaneState::Stopped);
    EXPECT_NE(lane.message().find("stopped at step"), std::string::npos);
}

TEST(RaceSmoke, FairModeRunsLanesOneAfterAnother) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 600, 50);
    RaceSpec spec;
    spec.dataDir = dir.path().string();
    spec.lanes = {cpuLane(1, "first"), cpuLane(2, "second")};
    spec.steps = 20;
    spec.fair = true;
    Race race(spec);
    race.start();
    race.wait();
    auto first = race.lanes()[0]->history();
    auto second = race.lanes()[1]->history();
    ASSERT_FALSE(first.empty());
    ASSERT_FALSE(second.empty());
    // The second lane's first record comes after the first lane's last one.
    EXPECT_GE(second.front().wallTime, first.back().wallTime);
    EXPECT_TRUE(race.summary().fair);
}

TEST(RaceSmoke, SyntheticDataAndTheCnnWorkload) {
    RaceSpec spec;
    spec.workload = "fashion-cnn";
    spec.data = DataMode::Synthetic;
    spec.lanes = {cpuLane(1)};
    spec.steps = 3;
    spec.trainLimit = 256;
    spec.testLimit = 64;
    LaneSpec small = cpuLane(1);
    small.batch = 16;
    spec.lanes = {small};
    Race race(spec);
    EXPECT_TRUE(race.dataset().synthetic);
    race.start();
    race.wait();
    auto sum = race.summary();
    EXPECT_EQ(sum.lanes[0].state, LaneState::Finished) << sum.lanes[0].error;
    EXPECT_EQ(sum.lanes[0].steps, 3);
    EXPECT_TRUE(sum.lanes[0].finalTestAccuracy.has_value()); // a final evaluation closes a steps-limited run
}

TEST(RaceValidation, BadValuesAreRejectedBeforeAnyThreadStarts) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 100, 20);
    RaceSpec base;
    base.dataDir = dir.path().string();
    base.lanes = {cpuLane(1)};

    auto spec = base;
    spec.lanes[0].batch = 101;
    EXPECT_NE(usageMessage(spec).find("batch=101 is larger than the 100 training examples"), std::string::npos);
    spec = base;
    spec.epochs = 0;
    EXPECT_NE(usageMessage(spec).find("--epochs 0"), std::string::npos);
    spec = base;
    spec.steps = -5;
    EXPECT_NE(usageMessage(spec).find("--steps -5"), std::string::npos);
    spec = base;
    spec.lanes[0].threads = 10000;
    EXPECT_NE(usageMessage(spec).find("threads=10000"), std::string::npos);
    spec = base;
    spec.workload = "resnet-9000";
    EXPECT_NE(usageMessage(spec).find("unknown workload 'resnet-9000'"), std::string::npos);
    spec = base;
    spec.targetAccuracy = 1.5;
    EXPECT_NE(usageMessage(spec).find("--target-accuracy"), std::string::npos);
    spec = base;
    spec.lanes[0].precision = Precision::Fp16;
    EXPECT_NE(usageMessage(spec).find("fp16 needs a CUDA device"), std::string::npos);
    spec = base;
    spec.lanes[0].device = "cuda:7";
    const auto& report = deviceReport();
    auto msg = usageMessage(spec);
    if (!report.cudaAvailable) {
        EXPECT_NE(msg.find("CUDA is not available: " + report.cudaUnavailableReason), std::string::npos) << msg;
    } else if (report.gpus.size() < 8) {
        EXPECT_NE(msg.find("this machine has"), std::string::npos) << msg;
    }
    spec = base;
    spec.dataDir = (dir / "nowhere").string();
    EXPECT_NE(usageMessage(spec).find("no such folder"), std::string::npos);
}

TEST(RaceNaming, DefaultNamesAreUniqueAndReadable) {
    test::TempDir dir;
    test::writeTinyDataset(dir.path(), 200, 20);
    RaceSpec spec;
    spec.dataDir = dir.path().string();
    spec.lanes = {cpuLane(1), cpuLane(1), cpuLane(2)};
    Race race(spec);
    auto lanes = race.lanes();
    EXPECT_EQ(lanes[0]->spec().name, "cpu·1");
    EXPECT_EQ(lanes[1]->spec().name, "cpu·1#2");
    EXPECT_EQ(lanes[2]->spec().name, "cpu·2");
}

// Lanes of one device and thread count are told apart by what differs: "plain" for plain
// LibTorch (fused=false), else the keys that set a lane apart; "#2" only for a lane like another.
TEST(RaceNaming, LanesOfOneDeviceAreNamedForWhatSetsThemApart) {
    RaceSpec spec;
    spec.lanes = {cpuLane(1), cpuLane(1), cpuLane(1), cpuLane(1), cpuLane(1), cpuLane(1)};
    spec.lanes[1].fused = false;
    spec.lanes[2].fused = false;
    spec.lanes[2].precision = Precision::Bf16;
    spec.lanes[3].batch = 256;
    spec.lanes[4].batch = 256;
    spec.lanes[5].lr = 0.01;
    spec.lanes[5].batch = 32;
    spec.lanes[5].weightDecay = 0.0005;
    spec.lanes[5].momentum = 0.9;
    const auto plan = resolveRace(spec);
    ASSERT_EQ(plan.spec.lanes.size(), 6u);
    EXPECT_EQ(plan.spec.lanes[0].name, "cpu·1");
    EXPECT_EQ(plan.spec.lanes[1].name, "cpu·1·plain");
    EXPECT_EQ(plan.spec.lanes[2].name, "cpu·1·bf16·plain");
    EXPECT_EQ(plan.spec.lanes[3].name, "cpu·1·batch=256");
    EXPECT_EQ(plan.spec.lanes[4].name, "cpu·1·batch=256#2");
    EXPECT_EQ(plan.spec.lanes[5].name, "cpu·1#2"); // four keys: too long to read, numbered
}

// A framework lane's default name says which framework it runs, beside DeviceRace's own lane on
// the same device ("cpu·2", "cpu·2·pytorch", "cpu·2·bf16·keras-jax"); a name given stays as it is.
TEST(RaceNaming, AFrameworkLaneIsNamedForItsFramework) {
    RaceSpec spec;
    spec.lanes = {cpuLane(2), cpuLane(2), cpuLane(2), cpuLane(2), cpuLane(2)};
    spec.lanes[1].framework = "pytorch";
    spec.lanes[2].framework = "keras-jax";
    spec.lanes[2].precision = Precision::Bf16;
    spec.lanes[3].framework = "pytorch";
    spec.lanes[4].framework = "pytorch";
    spec.lanes[4].name = "eager";
    const auto plan = resolveRace(spec);
    ASSERT_EQ(plan.spec.lanes.size(), 5u);
    EXPECT_EQ(plan.spec.lanes[0].name, "cpu·2");
    EXPECT_EQ(plan.spec.lanes[1].name, "cpu·2·pytorch");
    EXPECT_EQ(plan.spec.lanes[2].name, "cpu·2·bf16·keras-jax");
    EXPECT_EQ(plan.spec.lanes[3].name, "cpu·2·pytorch#2");
    EXPECT_EQ(plan.spec.lanes[4].name, "eager");
}

// A script lane of N processes (workers=N: an unmodified DDP script) is named for its ranks as
// DeviceRace's data-parallel lanes are ("cpu·1×2"); it read "cpu·1", a one-process lane's name.
// A race of the user's command says nothing of DeviceRace's data (it said "script races on real
// Fashion-MNIST, padded/resized and channel-expanded to ").
TEST(RaceNaming, ADataParallelScriptLaneIsNamedForItsRanks) {
    RaceSpec spec;
    spec.workload = "script";
    spec.command = {"python3", "train.py"};
    spec.lanes = {cpuLane(1), cpuLane(1), cpuLane(1)};
    spec.lanes[1].workers = 2;
    spec.lanes[2].workers = 2;
    spec.lanes[2].name = "ddp";
    const auto plan = resolveRace(spec);
    ASSERT_EQ(plan.spec.lanes.size(), 3u);
    EXPECT_EQ(plan.spec.lanes[0].name, "cpu·1");
    EXPECT_EQ(plan.spec.lanes[1].name, "cpu·1×2");
    EXPECT_EQ(plan.spec.lanes[2].name, "ddp");
    EXPECT_EQ(plan.dataNote, "");
}
