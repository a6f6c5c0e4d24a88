// Recordings and their exports: written as the race runs, read back to the same summary,
// readable after a cut-off, strict on hostile input; TensorBoard files pass a CRC check.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/race.h"
#include "devicerace/recording.h"
#include "devicerace/tensorboard.h"
#include "test_util.h"

using namespace devicerace;
using namespace devicerace::test;

namespace {

// Runs a small real race, recording it into dir/rec; returns the live summary.
RaceSummary recordedRace(const TempDir& dir) {
    writeTinyDataset(dir.path(), 4000, 100); // 32 steps an epoch: evaluations at 10, 20, 30 only
    RaceSpec spec;
    spec.dataDir = dir.path().string();
    LaneSpec a, b;
    a.threads = 1;
    b.threads = 1;
    b.name = "second";
    b.costPerHour = 2.5;
    spec.lanes = {a, b};
    spec.steps = 30;
    spec.evalEverySteps = 10;
    spec.warmupSteps = 2;
    Race race(spec);
    RecordingWriter writer(dir / "rec", race);
    race.start();
    while (!race.finished()) {
        for (auto* lane : race.lanes()) {
            for (const auto& s : lane->takeSamples()) {
                writer.append(s);
            }
        }
    }
    race.wait();
    for (auto* lane : race.lanes()) {
        for (const auto& s : lane->takeSamples()) {
            writer.append(s);
        }
    }
    return race.summary();
}

} // namespace

TEST(Recording, ReplaysToTheLiveSummary) {
    TempDir dir;
    const auto live = recordedRace(dir);
    const auto rec = readRecording(dir / "rec");
    EXPECT_TRUE(rec.warnings.empty());
    ASSERT_EQ(rec.lanes.size(), 2u);
    EXPECT_EQ(rec.lanes[1].name, "second");
    EXPECT_EQ(rec.lanes[1].spec.find("cost=2.5") != std::string::npos, true);
    // The machine in the device report's one JSON shape (format 2): all of it, not a few strings.
    EXPECT_EQ(rec.machine.cpu.model, deviceReport().cpu.model);
    EXPECT_EQ(rec.machine.cpu.logicalCpus, deviceReport().cpu.logicalCpus);
    EXPECT_EQ(rec.machine.cudaAvailable, deviceReport().cudaAvailable);
    EXPECT_EQ(rec.machine.torchVersion, deviceReport().torchVersion);
    EXPECT_FALSE(rec.lanes[0].machineReport); // thread lanes ran on the race's machine
    const auto replayed = summarizeRecording(rec);
    ASSERT_EQ(replayed.lanes.size(), live.lanes.size());
    for (std::size_t i = 0; i < live.lanes.size(); ++i) {
        const auto& l = live.lanes[i];
        const auto& r = replayed.lanes[i];
        EXPECT_EQ(r.name, l.name);
        EXPECT_EQ(r.state, l.state);
        EXPECT_EQ(r.steps, l.steps);
        EXPECT_EQ(r.samples, l.samples);
        EXPECT_DOUBLE_EQ(*r.finalTestAccuracy, *l.finalTestAccuracy);
        EXPECT_NEAR(*r.samplesPerSec, *l.samplesPerSec, 1e-6 * *l.samplesPerSec);
        EXPECT_EQ(r.peakMemoryBytes, l.peakMemoryBytes);
    }
    EXPECT_THROW(RecordingWriter(dir / "rec", Race([&] {
                                     RaceSpec s;
                                     s.dataDir = dir.path().string();
                                     return s;
                                 }())),
                 Error); // never overwrites a recording
}

TEST(Recording, ACutOffLaneFileReadsUpToItsLastWholeLine) {
    TempDir dir;
    recordedRace(dir);
    const auto file = dir / "rec" / "lane-0.jsonl";
    std::ifstream in(file, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    in.close();
    const auto whole = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
    writeFile(file, text.substr(0, text.size() - 25)); // cut inside the last line
    const auto rec = readRecording(dir / "rec");
    EXPECT_EQ(rec.samples.at("cpu·1").size(), whole - 1);
    ASSERT_EQ(rec.warnings.size(), 1u);
    EXPECT_NE(rec.warnings[0].find("cut off"), std::string::npos);
    // The lane's end is not in the recording: played to its end, the lane is not "running".
    const auto whole_summary = summarizeRecording(rec);
    EXPECT_EQ(whole_summary.lanes.at(0).state, LaneState::Stopped);
    EXPECT_NE(whole_summary.lanes.at(0).error.find("the recording ends at step"), std::string::npos)
        << whole_summary.lanes.at(0).error;
    // Played part of the way (a replay under way), it is still on its way.
    EXPECT_FALSE(isTerminal(summarizeRecordedLane(rec, rec.lanes.at(0), 3).state));
    // An uncut recording ends as the lane did.
    TempDir other;
    recordedRace(other);
    const auto uncut = summarizeRecording(readRecording(other / "rec"));
    EXPECT_EQ(uncut.lanes.at(0).state, LaneState::Finished);
    EXPECT_EQ(uncut.lanes.at(0).error, "");
}

// A format-1 recording (the machine as a few strings, before the device report's JSON) still reads.
TEST(Recording, ReadsFormatOneManifests) {
    TempDir dir;
    recordedRace(dir);
    writeFile(dir / "rec" / "manifest.json",
              R"({"format": 1, "workload": "fashion-mlp", "dataset": {"name": "Fashion-MNIST"},
                  "device": {"cpu": "Old CPU", "blas": "MKL", "gpus": "GPU A, GPU B", "torch": "2.5.1", "host": "box"},
                  "lanes": [{"name": "cpu·1", "file": "lane-0.jsonl", "machine": "box: Old CPU · LibTorch 2.5.1"}]})");
    const auto rec = readRecording(dir / "rec");
    EXPECT_EQ(rec.machine.cpu.model, "Old CPU");
    EXPECT_EQ(rec.machine.cpu.blas, "MKL");
    EXPECT_EQ(rec.machine.torchVersion, "2.5.1");
    EXPECT_EQ(rec.machine.hostName, "box");
    EXPECT_EQ(rec.gpuNames, "GPU A, GPU B");
    EXPECT_EQ(rec.lanes.at(0).machine, "box: Old CPU · LibTorch 2.5.1");
}

TEST(Recording, HostileOrBrokenManifestsAreClearErrors) {
    TempDir dir;
    recordedRace(dir);
    auto message = [&](const std::string& manifest) -> std::string {
        writeFile(dir / "rec" / "manifest.json", manifest);
        try {
            readRecording(dir / "rec");
        } catch (const DataError& e) {
            return e.what();
        }
        return "(accepted)";
    };
    EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
    EXPECT_NE(message(R"({"format": 99})").find("unsupported recording format 99"), std::string::npos);
    EXPECT_NE(message(R"({"format": 2, "workload": "x", "dataset": {}, "machine": {"cpu": 3}, "lanes": []})")
                  .find("malformed device report"),
              std::string::npos);
    EXPECT_NE(
        message(
            R"({"format": 1, "workload": "x", "dataset": {}, "lanes": [{"name": "a", "file": "../../etc/passwd"}]})")
            .find("not a plain file name"),
        std::string::npos);
    EXPECT_NE(
        message(R"({"format": 1, "workload": "x", "dataset": {}, "lanes": [{"name": "a", "file": "gone.jsonl"}]})")
            .find("missing lane file"),
        std::string::npos);
    EXPECT_NE(message(R"({"format": 1, "workload": "x", "dataset": {}, "lanes": []})").find("1 to 256 lanes"),
              std::string::npos);
    EXPECT_THROW(readRecording(dir / "nowhere"), DataError);
}

TEST(TensorBoard, EventFilesPassTheCrcCheckingReader) {
    TempDir dir;
    recordedRace(dir);
    const auto rec = readRecording(dir / "rec");
    const auto files = writeTensorBoard(rec, dir / "tb");
    ASSERT_EQ(files.size(), 2u);
    const auto events = readTfEventFile(files[0]);
    EXPECT_EQ(events.fileVersion, "brain.Event:2");
    std::size_t accuracy = 0, throughput = 0;
    for (const auto& s : events.scalars) {
        accuracy += s.tag == "accuracy/test";
        throughput += s.tag == "throughput/samples_per_sec";
        EXPECT_GT(s.wallTime, 1.6e9); // real time
    }
    EXPECT_EQ(accuracy, 3u); // evaluations at steps 10, 20, 30
    EXPECT_GT(throughput, 0u);
    // Flip one byte: the reader names the record and the CRC.
    std::ifstream in(files[1], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    bytes[bytes.size() / 2] ^= 0x40;
    writeFile(dir / "broken", bytes);
    try {
        readTfEventFile(dir / "broken");
        FAIL() << "a corrupted event file passed";
    } catch (const DataError& e) {
        EXPECT_NE(std::string(e.what()).find("CRC mismatch"), std::string::npos) << e.what();
    }
    // The known answer of CRC-32C ("123456789" -> 0xE3069283).
    EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
}

TEST(Exports, DawnbenchTsvHasOneRowPerEvaluation) {
    TempDir dir;
    recordedRace(dir);
    const auto rec = readRecording(dir / "rec");
    const auto tsv = dawnbenchTsv(rec, "second");
    EXPECT_EQ(tsv.rfind("epoch\thours\ttop1Accuracy\n", 0), 0u);
    EXPECT_EQ(std::count(tsv.begin(), tsv.end(), '\n'), 4);
}
