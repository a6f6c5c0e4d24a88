// Every preset in resources/presets loads, adapts to this machine and runs (shortened).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>

#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "devicerace/preset.h"
#include "devicerace/race.h"
#include "devicerace/recording.h"

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
    // A race another preset has (the same workload on the same lanes, shortened alike) runs once:
    // its framework lanes' start-ups are most of this test's time.
    std::set<std::string> ran;
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
            std::string key =
                spec.workload + (spec.data ? spec.data == DataMode::Synthetic ? " synthetic" : " real" : "");
            for (const auto& lane : spec.lanes) {
                key += " | " + formatLaneSpec(lane);
            }
            if (!ran.insert(key).second) {
                std::cout << "[   SAME   ] " << name << " / " << race.title << ": raced above\n";
                continue;
            }
            std::optional<Race> r;
            const auto c0 = std::chrono::steady_clock::now();
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
            const auto t0 = std::chrono::steady_clock::now();
            r->start();
            r->wait();
            // What each race costs the suite (the test is its longest on slow machines): setting up
            // framework lanes (their workers' imports) is most of it.
            const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
            std::cout << "[   RACE   ] " << name << " / " << race.title << ": set up in " << seconds(c0, t0)
                      << " s, ran in " << seconds(t0, std::chrono::steady_clock::now()) << " s" << std::endl;
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

// A preset's "stand_in" recording races beside the live lanes only where the GPU lane it stands
// for was left out; its path stays beside the preset file; the shipped one is a real recording
// of the preset's own race on a GPU.
TEST(Presets, AStandInRecordingReplacesTheMissingGpuLane) {
    const bool gpu = deviceReport().cudaAvailable;
    auto p = parsePreset(R"({"format":1,"name":"g","races":[{"workload":"char-gpt","lanes":["all-cores","best-gpu"],
                            "stand_in":"recordings/x-h100"}]})",
                         "g.json", "/presets");
    EXPECT_EQ(p.races[0].standIn.has_value(), !gpu);
    if (!gpu) {
        EXPECT_EQ(*p.races[0].standIn, std::filesystem::path("/presets/recordings/x-h100"));
        EXPECT_NE(p.races[0].notes.back().find("devicerace-cli replay /presets/recordings/x-h100"), std::string::npos)
            << p.races[0].notes.back();
    }
    // No GPU lane in the race: nothing to stand in for.
    p = parsePreset(R"({"format":1,"name":"c","races":[{"workload":"char-gpt","lanes":["all-cores"],
                       "stand_in":"recordings/x-h100"}]})",
                    "c.json", "/presets");
    EXPECT_FALSE(p.races[0].standIn);
    for (const char* bad : {"../etc", "/abs/rec", "a/../../b", "", "a b", "./a"}) {
        try {
            parsePreset(
                std::string(R"({"format":1,"name":"b","races":[{"workload":"char-gpt","lanes":["cpu"],"stand_in":")") +
                    bad + R"("}]})",
                "b.json");
            ADD_FAILURE() << "accepted stand_in " << bad;
        } catch (const DataError& e) {
            EXPECT_NE(std::string(e.what()).find("must be a relative folder beside the preset"), std::string::npos)
                << e.what();
        }
    }
    const auto shipped = loadPreset("gpt-cpu-vs-gpu");
    ASSERT_EQ(shipped.races.size(), 1u);
    std::filesystem::path dir;
    for (const auto& d : presetDirs()) {
        if (std::filesystem::exists(d / "gpt-cpu-vs-gpu.json")) {
            dir = d;
            break;
        }
    }
    const auto rec = readRecording(dir / "recordings" / "char-gpt-h100");
    EXPECT_TRUE(rec.warnings.empty());
    EXPECT_EQ(rec.workload, shipped.races[0].spec.workload);
    ASSERT_EQ(rec.lanes.size(), 1u);
    EXPECT_EQ(rec.lanes[0].device, "cuda:0");
    EXPECT_EQ(rec.vocabulary, 113);
    const auto summary = summarizeRecording(rec);
    EXPECT_EQ(summary.lanes[0].state, LaneState::Finished);
    EXPECT_EQ(summary.lanes[0].steps, *shipped.races[0].spec.steps);
}

namespace {

// What parsePreset says of a preset text named p.json ("(accepted)" when it takes it).
std::string message(const std::string& text) {
    try {
        parsePreset(text, "p.json");
    } catch (const DataError& e) {
        return e.what();
    }
    return "(accepted)";
}

} // namespace

TEST(Presets, BadFilesAreRejectedClearly) {
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
    // A file from someone else never adds words to a command, nor names one.
    for (const std::string lane : {"cpu,args=--compile", "cpu,cmd=/bin/true", "cpu,workdir=/tmp"}) {
        const auto msg =
            message(R"({"format":1,"name":"x","races":[{"workload":"fashion-mlp","lanes":[")" + lane + R"("]}]})");
        EXPECT_NE(msg.find("presets may not use cmd=, cli=, fault=, framework=script, copy=, workdir= or args="),
                  std::string::npos)
            << lane << ": " << msg;
    }
}

// Found by fuzzing (tests/fuzz, target preset): "workers=powers" with no comma before it threw
// std::out_of_range out of the preset reader; an out-of-range float epochs was undefined
// behaviour. Both are clear errors naming the file.
TEST(Presets, FuzzedLanesAndNumbersAreClearErrors) {
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
