// Every preset in resources/presets loads, adapts to this machine and runs (shortened).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/preset.h"
#include "devicerace/race.h"

using namespace devicerace;

TEST(Presets, OnePerSeedExperiment) {
    auto names = presetNames();
    for (const auto* want :
         {"resnet32-cpu-vs-gpu", "keras-suite", "cpu-thread-scaling", "fused-vs-cells-lstm", "synthetic-vs-real",
          "davidnet-batch-and-decay", "keras-backends", "framework-vs-framework", "gpt-cpu-vs-gpu"}) {
        EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
    }
}

TEST(Presets, EveryPresetLoadsAndRunsShortened) {
    for (const auto& name : presetNames()) {
        auto preset = loadPreset(name);
        EXPECT_FALSE(preset.races.empty()) << name;
        for (auto& race : preset.races) {
            auto spec = race.spec;
            spec.steps = 2;
            spec.epochs.reset();
            spec.trainLimit = 64;
            spec.testLimit = 8;
            for (auto& lane : spec.lanes) {
                lane.batch = std::min<std::int64_t>(lane.batch.value_or(4), 4);
            }
            spec.fair = false; // two steps a lane: the framework lanes' start-ups overlap instead
            std::optional<Race> r;
            try {
                r.emplace(spec);
            } catch (const UsageError& e) {
                // A framework lane (framework=keras-*) refuses where its framework is not installed,
                // naming the command that installs it: that race is skipped, saying so.
                const std::string why = e.what();
                ASSERT_NE(why.find("scripts/setup --frameworks"), std::string::npos)
                    << name << " / " << race.title << ": " << why;
                std::cout << "[ SKIPPED  ] " << name << " / " << race.title << ": " << why << "\n";
                continue;
            }
            r->start();
            r->wait();
            for (const auto& lane : r->summary().lanes) {
                EXPECT_EQ(lane.state, LaneState::Finished)
                    << name << " / " << race.title << " / " << lane.name << ": " << lane.error;
            }
        }
    }
}

TEST(Presets, GenericDevicesAdaptToTheMachine) {
    const auto& report = deviceReport();
    auto thread = parsePreset(
        R"({"format":1,"name":"t","races":[{"workload":"fashion-mlp","lanes":["cpu,threads=powers"]}]})", "t.json");
    const auto& lanes = thread.races[0].spec.lanes;
    ASSERT_FALSE(lanes.empty());
    EXPECT_EQ(lanes.front().threads, 1);
    EXPECT_EQ(lanes.back().threads, std::max(1, report.cpu.physicalCores));
    auto gpu = parsePreset(
        R"({"format":1,"name":"g","races":[{"workload":"fashion-mlp","lanes":["all-cores","best-gpu"]}]})", "g.json");
    if (!report.cudaAvailable) {
        EXPECT_EQ(gpu.races[0].spec.lanes.size(), 1u);
        ASSERT_EQ(gpu.races[0].notes.size(), 1u);
        EXPECT_NE(gpu.races[0].notes[0].find("left out"), std::string::npos);
    } else {
        EXPECT_EQ(gpu.races[0].spec.lanes[1].device, "cuda:0");
    }
}

TEST(Presets, BadFilesAreRejectedClearly) {
    auto message = [](const std::string& text) -> std::string {
        try {
            parsePreset(text, "p.json");
        } catch (const DataError& e) {
            return e.what();
        }
        return "(accepted)";
    };
    EXPECT_NE(message("{").find("p.json: not valid JSON"), std::string::npos);
    EXPECT_NE(message(R"({"format":2,"name":"x","races":[]})").find("unsupported preset format 2"), std::string::npos);
    EXPECT_NE(message(R"({"format":1,"name":"x","races":[]})").find("1 to 64 races"), std::string::npos);
    EXPECT_NE(message(R"({"format":1,"name":"x","races":[{"workload":"nope","lanes":["cpu"]}]})")
                  .find("unknown workload 'nope'"),
              std::string::npos);
    EXPECT_NE(message(R"({"format":1,"name":"x","races":[{"workload":"fashion-mlp","lanes":["cpu,batch=0"]}]})")
                  .find("batch=0"),
              std::string::npos);
    EXPECT_THROW(loadPreset("no-such-preset"), UsageError);
}

// Found by fuzzing (tests/fuzz, target preset): "workers=powers" with no comma before it threw
// std::out_of_range out of the preset reader; an out-of-range float epochs was undefined
// behaviour. Both are clear errors naming the file.
TEST(Presets, FuzzedLanesAndNumbersAreClearErrors) {
    auto message = [](const std::string& text) -> std::string {
        try {
            parsePreset(text, "p.json");
        } catch (const DataError& e) {
            return e.what();
        }
        return "(accepted)";
    };
    const auto race = [](const std::string& fields) {
        return R"({"format":1,"name":"x","races":[{"workload":"fashion-mlp",)" + fields + "}]}";
    };
    for (const char* lane : {"best-deviceworkers=powerse=real", "cpuworkers=powers", "best-workers=powers,batch=8"}) {
        const auto msg = message(race(std::string(R"("lanes":[")") + lane + "\"]"));
        EXPECT_NE(msg.find("p.json: lane '"), std::string::npos) << lane << ": " << msg;
        EXPECT_NE(msg.find("unknown device"), std::string::npos) << lane << ": " << msg;
    }
    for (const char* fields : {R"("epochs":1e300,"lanes":["cpu"])", R"("epochs":4294967297,"lanes":["cpu"])",
                               R"("steps":-1e30,"lanes":["cpu"])", R"("seed":-1,"lanes":["cpu"])"}) {
        const auto msg = message(race(fields));
        EXPECT_NE(msg.find("p.json: malformed preset"), std::string::npos) << fields << ": " << msg;
        EXPECT_NE(msg.find("out of range"), std::string::npos) << fields << ": " << msg;
    }
}
