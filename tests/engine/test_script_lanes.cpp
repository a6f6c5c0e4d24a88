// Script lanes in the engine: how a race of the user's command is planned (resolveRace), the CPUs
// its lanes are pinned to, what the config message carries, and the figures of a lane that counts
// steps but no samples. The races of real scripts are tests/cli/test_script_lanes.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "devicerace/device_info.h"
#include "devicerace/lane_spec.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"
#include "devicerace/summary.h"
#include "devicerace/workload.h"
#include "race/script_cpus.h"
#include "workers/protocol.h"

using namespace devicerace;

namespace {

RaceSpec scriptRace(std::vector<std::string> lanes, bool fair = false) {
    RaceSpec spec;
    spec.workload = kScriptWorkload;
    spec.command = {"/bin/true", "--epochs", "1"};
    spec.fair = fair;
    for (const auto& l : lanes) {
        spec.lanes.push_back(parseLaneSpec(l));
    }
    return spec;
}

bool mentions(const RacePlan& plan, const std::string& text) {
    return std::any_of(plan.problems.begin(), plan.problems.end(),
                       [&](const std::string& p) { return p.find(text) != std::string::npos; });
}

} // namespace

TEST(ScriptLanes, EveryLaneOfAScriptRaceRunsTheCommand) {
    const auto plan = resolveRace(scriptRace({"cpu,threads=1", "cpu,threads=2,workers=2"}), {false});
    ASSERT_TRUE(plan.ok()) << plan.problems.front();
    for (const auto& lane : plan.lanes) {
        EXPECT_EQ(lane.spec.framework, std::optional<std::string>("script"));
        EXPECT_EQ(lane.kind, LaneKind::External);
        EXPECT_FALSE(lane.batch);      // the command's own
        EXPECT_FALSE(lane.totalSteps); // no --steps: the command's own length
    }
    EXPECT_EQ(plan.lanes[1].localCpuProcesses, 2); // workers=2: two processes of the command
    EXPECT_EQ(plan.cpuThreads, 1 + 2 * 2);
    EXPECT_FALSE(plan.spec.targetAccuracy); // a script has no target but the user's own
}

TEST(ScriptLanes, ProblemsAreSaidBeforeAnythingRuns) {
    auto missing = scriptRace({"cpu"});
    missing.command = {"devicerace-no-such-program"};
    EXPECT_TRUE(mentions(resolveRace(missing, {false}), "devicerace-no-such-program: command not found"));
    auto none = scriptRace({"cpu"});
    none.command.clear();
    EXPECT_TRUE(mentions(resolveRace(none, {false}), "needs its command"));
    // A built-in workload's framework=script lane without a command, and a copy= with no host.
    RaceSpec mixed;
    mixed.workload = "fashion-mlp";
    mixed.data = DataMode::Synthetic;
    mixed.lanes = {parseLaneSpec("cpu,framework=script"), parseLaneSpec("cpu")};
    EXPECT_TRUE(mentions(resolveRace(mixed, {false}), "framework=script runs the race's command, and there is none"));
    EXPECT_TRUE(
        mentions(resolveRace(scriptRace({"cpu,copy=/tmp"}), {false}), "copy= copies a folder to an ssh:// host"));
    EXPECT_TRUE(mentions(resolveRace(scriptRace({"cpu,framework=pytorch"}), {false}), "runs script lanes only"));
    EXPECT_TRUE(mentions(resolveRace(scriptRace({"cpu+cpu"}), {false}), "runs on one device of one machine"));
    mixed.lanes = {parseLaneSpec("cpu,args=--compile")};
    EXPECT_TRUE(mentions(
        resolveRace(mixed, {false}),
        "lane cpu,args=--compile: args= adds words to the race's command (a script lane's); this lane runs the "
        "built-in fashion-mlp workload"));
}

TEST(ScriptLanes, ACudaLaneNeedsAGpuHere) {
    const auto plan = resolveRace(scriptRace({"cuda:7"}), {false});
    if (!deviceReport().cudaAvailable) {
        EXPECT_TRUE(mentions(plan, "cuda:7: CUDA is not available here"));
    } else if (deviceReport().gpus.size() <= 7) {
        EXPECT_TRUE(mentions(plan, "cuda:7: this machine has"));
    }
}

TEST(ScriptLanes, CopyLandsInTheFoldersNameWithoutAWorkdir) {
    const auto plan = resolveRace(scriptRace({"ssh://gpubox/cpu,copy=/home/me/project/"}), {false});
    ASSERT_EQ(plan.lanes.size(), 1u);
    EXPECT_EQ(plan.lanes[0].spec.workdir, std::optional<std::string>("project"));
    EXPECT_EQ(plan.lanes[0].kind, LaneKind::Remote);
}

TEST(ScriptLanes, LiveLanesGetCpusOfTheirOwnWhileTheyLast) {
    const auto plan = resolveRace(scriptRace({"cpu,threads=1", "cpu,threads=2", "cpu,threads=1,workers=2"}), {false});
    ASSERT_TRUE(plan.ok());
    const auto cpus = detail::scriptLaneCpus(plan, {0, 1, 2, 3, 4});
    EXPECT_EQ(cpus[0], (std::vector<int>{0}));
    EXPECT_EQ(cpus[1], (std::vector<int>{1, 2}));
    EXPECT_EQ(cpus[2], (std::vector<int>{3, 4})); // two processes of one thread
    const auto four = detail::scriptLaneCpus(plan, {0, 1, 2, 3});
    EXPECT_TRUE(four[2].empty()); // 2 more would pass the 4 there are: it takes the first CPUs
    const auto two = detail::scriptLaneCpus(plan, {4, 6});
    EXPECT_EQ(two[0], (std::vector<int>{4}));
    EXPECT_TRUE(two[1].empty());
    // Fair mode: each lane alone, each on the first CPUs it may use.
    const auto fair = detail::scriptLaneCpus(resolveRace(scriptRace({"cpu,threads=1", "cpu,threads=1"}, true), {false}),
                                             {0, 1, 2, 3});
    EXPECT_TRUE(fair[0].empty() && fair[1].empty());
}

TEST(ScriptLanes, TheConfigCarriesTheCommandAndTheReadyMayNotKnowTheBatch) {
    LaneRunSettings s;
    s.workload = kScriptWorkload;
    s.command = {"python3", "train.py", "--lr", "3e-4"};
    s.cpus = {2, 3};
    const auto m = detail::configMessage(
        parseLaneSpec("cpu,threads=2,framework=script,logdir=runs,quiet=30,args=--compile --batch 256"), s);
    EXPECT_EQ(m.at("command"), nlohmann::json(s.command));
    EXPECT_EQ(m.at("cpus"), nlohmann::json({2, 3}));
    EXPECT_EQ(m.at("lane_fields").at("logdir"), "runs");
    EXPECT_EQ(m.at("lane_fields").at("args"), "--compile --batch 256"); // the lane program splits it
    EXPECT_EQ(m.at("lane_fields").at("quiet"), 30.0);
    const auto ready = detail::readyFromMessage(
        nlohmann::json{{"batch", 0}, {"total_steps", 0}, {"dataset", {{"name", "the script's own"}}}});
    EXPECT_EQ(ready.batch, 0);
    EXPECT_THROW(
        detail::readyFromMessage(nlohmann::json{{"batch", -1}, {"total_steps", 0}, {"dataset", {{"name", "x"}}}}),
        std::exception);
}

TEST(ScriptLanes, StepsOnlyLanesHaveStepRatesSpeedupsAndTheirTimeToTheFirstStep) {
    const auto lane = [](const std::string& name, double stepsPerSec) {
        std::vector<MetricSample> samples;
        MetricSample prep;
        prep.kind = SampleKind::State;
        prep.state = LaneState::Preparing;
        prep.wallTime = 1000;
        samples.push_back(prep);
        MetricSample run = prep;
        run.state = LaneState::Running;
        run.wallTime = 1003.5; // imports, data and compilation: 3.5 s
        samples.push_back(run);
        for (int i = 1; i <= 30; ++i) {
            MetricSample t;
            t.kind = SampleKind::Train;
            t.step = i * 10;
            t.time = i * 10 / stepsPerSec;
            t.stepsPerSec = stepsPerSec;
            t.intervalSeconds = 10 / stepsPerSec;
            t.warmup = i < 3;
            samples.push_back(t);
        }
        MetricSample eval;
        eval.kind = SampleKind::Eval;
        eval.loss = 0.7; // a validation loss alone, as a TensorBoard val_loss gives it
        samples.push_back(eval);
        LaneSpec spec;
        spec.name = name;
        return summarize(spec, 0, samples, {});
    };
    const std::vector<LaneSummary> lanes{lane("a", 100), lane("b", 150)};
    EXPECT_FALSE(lanes[0].samplesPerSec);
    EXPECT_DOUBLE_EQ(*lanes[0].stepsPerSec, 100);
    EXPECT_NEAR(*lanes[0].preparingSeconds, 3.5, 1e-9);
    EXPECT_DOUBLE_EQ(*lanes[0].finalTestLoss, 0.7);
    EXPECT_FALSE(lanes[0].finalTestAccuracy);
    EXPECT_NEAR(speedups(lanes).at("b"), 1.5, 1e-12);
}
