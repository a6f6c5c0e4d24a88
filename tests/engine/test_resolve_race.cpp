// resolveRace, the one place a race is decided: names, threads, steps, the evaluation interval,
// core sharing and its note, and every refusal, before anything runs. No expectation assumes a
// core count, a vendor or a GPU: each is derived from this machine's device report.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "devicerace/dataset.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/idx.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"
#include "devicerace/workload.h"

using namespace devicerace;

namespace {

bool haveFashionMnist() {
    std::error_code ec;
    return std::filesystem::exists(defaultFashionMnistDir() / "train-images-idx3-ubyte.gz", ec);
}

RaceSpec race(std::vector<std::string> lanes, bool fair = false) {
    RaceSpec spec;
    spec.data = DataMode::Synthetic; // no data set needed: the counts are the synthetic ones
    spec.steps = 100;
    spec.fair = fair;
    for (const auto& l : lanes) {
        spec.lanes.push_back(parseLaneSpec(l));
    }
    return spec;
}

int cores() { return std::max(1, deviceReport().cpu.physicalCores); }

} // namespace

TEST(ResolveRace, PlainCpuLanesShareTheCoresInALiveRaceAndTheNoteCountsThem) {
    for (int n : {1, 2, 3, 5}) {
        const auto plan = resolveRace(race(std::vector<std::string>(static_cast<std::size_t>(n), "cpu")));
        ASSERT_TRUE(plan.ok()) << plan.problems.front();
        const int each = std::max(1, cores() / n);
        int total = 0;
        for (const auto& lane : plan.lanes) {
            EXPECT_EQ(lane.localThreads, each);
            EXPECT_EQ(*lane.spec.threads, each);
            EXPECT_EQ(lane.localCpuProcesses, 1);
            total += lane.localThreads;
        }
        EXPECT_EQ(plan.cpuThreads, total);
        EXPECT_EQ(plan.sharingNote.empty(), total <= plan.logicalCpus) << n << " lanes: " << plan.sharingNote;
    }
}

TEST(ResolveRace, FairModeGivesEveryPlainCpuLaneAllCoresAndNoNote) {
    const auto plan = resolveRace(race({"cpu", "cpu", "cpu"}, true));
    ASSERT_TRUE(plan.ok());
    for (const auto& lane : plan.lanes) {
        EXPECT_EQ(lane.localThreads, cores());
        EXPECT_FALSE(lane.spec.threads.has_value()); // decided by the lane's default, the same one
    }
    EXPECT_EQ(plan.lanes[0].spec.name, "cpu·" + std::to_string(cores()));
    EXPECT_TRUE(plan.sharingNote.empty());
}

TEST(ResolveRace, AskedThreadsAreHonouredAndCountedAgainstTheCpus) {
    const int many = deviceReport().cpu.logicalCpus + 1;
    const auto plan = resolveRace(race({"cpu,threads=" + std::to_string(many), "cpu,threads=1"}));
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan.lanes[0].localThreads, many);
    EXPECT_EQ(plan.cpuThreads, many + 1);
    EXPECT_NE(plan.sharingNote.find(std::to_string(many + 1) + " threads"), std::string::npos) << plan.sharingNote;
}

TEST(ResolveRace, DataParallelCpuRanksAreProcessesEachWithItsThreads) {
    const auto plan = resolveRace(race({"cpu,workers=2,threads=1"}));
    ASSERT_TRUE(plan.ok()) << plan.problems.front();
    EXPECT_EQ(plan.lanes[0].kind, LaneKind::Parallel);
    EXPECT_EQ(plan.lanes[0].localCpuProcesses, 2);
    EXPECT_EQ(plan.lanes[0].localThreads, 1);
    EXPECT_EQ(plan.cpuThreads, 2);
    EXPECT_EQ(*plan.lanes[0].batch, 2 * 128); // the global batch: each rank takes fashion-mlp's 128
    EXPECT_EQ(*plan.lanes[0].totalSteps, 100);
}

TEST(ResolveRace, StepsAndBatchesComeFromTheWorkloadAndTheData) {
    RaceSpec spec = race({"cpu,threads=1", "cpu,threads=1,batch=1000"});
    spec.steps.reset();
    spec.epochs = 2;
    spec.trainLimit = 5000;
    const auto plan = resolveRace(spec);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(*plan.lanes[0].batch, 128);
    EXPECT_EQ(*plan.lanes[0].totalSteps, 2 * ((5000 + 127) / 128));
    EXPECT_EQ(*plan.lanes[1].totalSteps, 2 * 5);
}

TEST(ResolveRace, AutomaticEvaluationsGiveTheShortestLaneAboutTen) {
    RaceSpec spec = race({"cpu,threads=1,batch=50", "cpu,threads=1,batch=100"});
    spec.steps.reset();
    spec.epochs = 1;
    spec.trainLimit = 50000;
    spec.autoEvaluations = true;
    auto plan = resolveRace(spec);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan.evalEverySteps, 50000 / 100 / kAutoEvaluations);
    EXPECT_EQ(plan.spec.evalEverySteps, plan.evalEverySteps);
    // Never more often than every 10 steps.
    spec.steps = 30;
    EXPECT_EQ(resolveRace(spec).evalEverySteps, 10);
    // An explicit interval is kept as given.
    spec.autoEvaluations = false;
    spec.evalEverySteps = 7;
    EXPECT_EQ(resolveRace(spec).evalEverySteps, 7);
}

// oneDNN has no bf16 LSTM on a CPU without bf16 units: such a lane is refused before it starts,
// with the ways that work (its LSTM-cell loop, or fp32), not failed by oneDNN mid-race.
TEST(ResolveRace, ABf16LstmLaneNeedsBf16UnitsOrCells) {
    for (const char* workload : {"charlstm", "imdb-bilstm"}) {
        auto spec = race({"cpu,threads=1,precision=bf16,name=b", "cpu,threads=1,precision=bf16,lstm=cells,name=c"});
        spec.workload = workload;
        const auto plan = resolveRace(spec);
        EXPECT_TRUE(plan.lanes[1].problem.empty()) << plan.lanes[1].problem;
        if (deviceReport().cpu.bf16Units.empty()) {
            EXPECT_NE(plan.lanes[0].problem.find("lane b: precision=bf16 with lstm=fused needs a CPU with bf16 units"),
                      std::string::npos)
                << plan.lanes[0].problem;
            EXPECT_NE(plan.lanes[0].problem.find("use lstm=cells or fp32"), std::string::npos);
        } else {
            EXPECT_TRUE(plan.lanes[0].problem.empty()) << plan.lanes[0].problem;
        }
    }
}

TEST(ResolveRace, ProblemsNameTheLaneAndTheKeyAndNothingThrows) {
    auto plan = resolveRace(race({"cpu,threads=1", "cpu,precision=fp16,name=half"}));
    ASSERT_EQ(plan.problems.size(), 1u);
    EXPECT_TRUE(plan.lanes[0].problem.empty());
    EXPECT_NE(plan.lanes[1].problem.find("lane half: precision=fp16 needs a CUDA device"), std::string::npos);
    EXPECT_EQ(plan.problems[0], plan.lanes[1].problem);

    plan = resolveRace(race({"cpu,fault=segv:3,name=f"}));
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.problems[0].find("add isolate=process"), std::string::npos);
    EXPECT_TRUE(resolveRace(race({"cpu,fault=segv:3,isolate=process"})).ok());

    RaceSpec bad = race({"cpu"});
    bad.steps = 0;
    plan = resolveRace(bad);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.problems[0], "--steps 0: must be 1 or more");

    bad = race({"cpu"});
    bad.workload = "no-such-net";
    EXPECT_FALSE(resolveRace(bad).ok());

    plan = resolveRace(race({"cpu,batch=100000000"}));
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.problems[0].find("is larger than the 60000 training examples"), std::string::npos);
}

TEST(ResolveRace, AMissingGpuIsRefusedWithTheDevicesWords) {
    const auto& report = deviceReport();
    const std::string device = "cuda:" + std::to_string(report.gpus.size() + 3);
    const auto plan = resolveRace(race({"cpu,threads=1", device}));
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.lanes[1].problem, deviceProblem(device));
    EXPECT_FALSE(deviceProblem(device).empty());
    EXPECT_TRUE(deviceProblem("cpu").empty());
}

TEST(ResolveRace, ACommandNeedsConsentButIsNoProblem) {
    const auto plan = resolveRace(race({"cpu,cmd=/bin/true"}));
    EXPECT_TRUE(plan.ok());
    EXPECT_TRUE(plan.lanes[0].needsConsent);
    EXPECT_EQ(plan.lanes[0].kind, LaneKind::External);
    try {
        Race r(race({"cpu,cmd=/bin/true"}));
        FAIL() << "a cmd= lane ran without consent";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("--allow-commands"), std::string::npos);
    }
}

TEST(ResolveRace, ARaceBuildsExactlyThePlannedLanes) {
    if (!haveFashionMnist()) {
        GTEST_SKIP() << "Fashion-MNIST is not installed";
    }
    RaceSpec spec;
    spec.trainLimit = 3000;
    spec.testLimit = 500;
    spec.epochs = 2;
    spec.autoEvaluations = true;
    spec.lanes = {parseLaneSpec("cpu"), parseLaneSpec("cpu,batch=50"), parseLaneSpec("cpu,threads=1,batch=7")};
    const auto plan = resolveRace(spec);
    ASSERT_TRUE(plan.ok());
    const Race r(spec);
    ASSERT_EQ(r.lanes().size(), plan.lanes.size());
    for (std::size_t i = 0; i < plan.lanes.size(); ++i) {
        EXPECT_EQ(r.lanes()[i]->spec().name, plan.lanes[i].spec.name);
        EXPECT_EQ(r.lanes()[i]->totalSteps(), *plan.lanes[i].totalSteps);
        EXPECT_EQ(r.lanes()[i]->batch(), *plan.lanes[i].batch);
        EXPECT_EQ(r.lanes()[i]->spec().threads, plan.lanes[i].spec.threads);
    }
    EXPECT_EQ(r.spec().evalEverySteps, plan.evalEverySteps);
    EXPECT_EQ(r.plan().sharingNote, plan.sharingNote);
}

TEST(ResolveRace, RealDataIsCountedFromTheHeadersAlone) {
    if (!haveFashionMnist()) {
        GTEST_SKIP() << "Fashion-MNIST is not installed";
    }
    const auto dims = readIdxDims(defaultFashionMnistDir() / "train-images-idx3-ubyte.gz", 3);
    ASSERT_EQ(dims.size(), 3u);
    EXPECT_EQ(dims[1], 28u);
    RaceSpec spec;
    spec.epochs = 1;
    spec.lanes = {parseLaneSpec("cpu,threads=1,batch=100")};
    const auto plan = resolveRace(spec);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(*plan.lanes[0].totalSteps, static_cast<std::int64_t>(dims[0]) / 100);
}

// The first race shows a real difference on the machine at hand, decided in one place: cpu·1 vs
// cuda:0 with a GPU; without one, fashion-cnn in fair mode, 1 thread vs every core (one core:
// fp32 vs bf16 where the CPU has bf16 units, else batch 32 vs 512), and a note that says so.
TEST(DefaultRace, FollowsTheMachine) {
    const auto& report = deviceReport();
    const auto first = defaultRace();
    ASSERT_EQ(first.lanes.size(), 2u);
    EXPECT_FALSE(first.note.empty());
    EXPECT_EQ(defaultLanes(), first.lanes);
    EXPECT_NO_THROW(findWorkload(first.workload));
    if (report.cudaAvailable && !report.gpus.empty()) {
        EXPECT_FALSE(first.fair);
        EXPECT_EQ(first.lanes[1].device, "cuda:0");
        return;
    }
    EXPECT_TRUE(first.fair);
    EXPECT_EQ(first.workload, "fashion-cnn");
    ASSERT_TRUE(first.steps);
    for (const auto& lane : first.lanes) {
        EXPECT_EQ(lane.device, "cpu");
    }
    const int cores = std::max(1, report.cpu.physicalCores);
    if (cores > 1) {
        EXPECT_EQ(first.lanes[0].threads.value_or(0), 1);
        EXPECT_EQ(first.lanes[1].threads.value_or(0), cores);
    } else if (!report.cpu.bf16Units.empty()) {
        EXPECT_EQ(first.lanes[1].precision, Precision::Bf16);
        EXPECT_NE(first.note.find(report.cpu.bf16Units), std::string::npos) << first.note;
    } else {
        EXPECT_NE(first.lanes[0].batch, first.lanes[1].batch);
    }
    // The plan names them apart and finds nothing in the way.
    RaceSpec spec;
    spec.workload = first.workload;
    spec.lanes = first.lanes;
    spec.fair = first.fair;
    spec.steps = first.steps;
    const auto plan = resolveRace(spec);
    EXPECT_TRUE(plan.ok()) << (plan.problems.empty() ? "" : plan.problems.front());
    EXPECT_NE(plan.lanes[0].spec.name, plan.lanes[1].spec.name);
    EXPECT_EQ(plan.lanes[0].totalSteps.value_or(0), *first.steps);
}

TEST(ResolveRace, ALanguageModelRacesToAValidationLossUnlessAskedForAnAccuracy) {
    RaceSpec spec = race({"cpu,threads=1"});
    spec.workload = "char-gpt";
    auto plan = resolveRace(spec);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan.spec.targetLoss, findWorkload("char-gpt").defaultTargetLoss);
    ASSERT_TRUE(plan.spec.targetLoss.has_value());
    // Asked for an accuracy: that is the target, no loss.
    spec.targetAccuracy = 0.4;
    plan = resolveRace(spec);
    EXPECT_FALSE(plan.spec.targetLoss.has_value());
    EXPECT_EQ(plan.spec.targetAccuracy, 0.4);
    // Other workloads keep their accuracy target.
    spec = race({"cpu,threads=1"});
    plan = resolveRace(spec);
    EXPECT_FALSE(plan.spec.targetLoss.has_value());
    EXPECT_EQ(plan.spec.targetAccuracy, findWorkload("fashion-mlp").defaultTarget);
}
