// The race runner both fronts take samples from: it polls the lanes and writes the recording
// on its own thread, and hands a front every sample once, in order, whatever the front's thread
// is doing. Races of synthetic lanes (bench/support/synthetic_lane.h): no training.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "devicerace/errors.h"
#include "devicerace/lane_spec.h"
#include "devicerace/race.h"
#include "devicerace/race_runner.h"
#include "devicerace/recording.h"
#include "synthetic_lane.h"
#include "test_util.h"

using namespace devicerace;
namespace fs = std::filesystem;

namespace {

// A race whose lanes the test drives (emitUntil / finish).
struct DrivenRace {
    std::vector<bench::SyntheticLane*> lanes;
    std::unique_ptr<Race> race;
    explicit DrivenRace(int count) {
        race = std::make_unique<Race>(bench::syntheticRaceSpec(count), bench::syntheticLanes(lanes, 100.0));
    }
};

// A front that notes each call's thread and every sample, per lane.
struct FakeFront : RaceFront {
    std::mutex mutex;
    std::set<std::thread::id> threads;
    std::map<std::size_t, std::vector<MetricSample>> got;
    std::size_t recorded = 0;
    std::string stopped;
    void samples(LaneBatch batch) override {
        std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
        recorded += batch.recorded;
        auto& to = got[batch.lane];
        to.insert(to.end(), batch.samples.begin(), batch.samples.end());
    }
    void recordingStopped(const std::string& why) override {
        std::lock_guard lock(mutex);
        stopped = why;
    }
};

std::size_t lineCount(const fs::path& file) {
    std::ifstream in(file);
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) {
        ++n;
    }
    return n;
}

bool waitFor(const std::function<bool()>& condition) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!condition()) {
        if (std::chrono::steady_clock::now() > until) {
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

} // namespace

TEST(RaceRunner, HandsEverySampleOnceInOrderOnItsOwnThreadAndRecordsIt) {
    test::TempDir tmp;
    DrivenRace driven(2);
    FakeFront front;
    RaceRunner runner(*driven.race, front, tmp.path() / "rec", std::chrono::milliseconds(5));
    ASSERT_EQ(runner.recordedFiles().size(), 2u);
    runner.start();
    for (int tick = 1; tick <= 20; ++tick) {
        for (auto* lane : driven.lanes) {
            lane->emitUntil(tick / 10.0);
        }
        if (tick % 5 == 0) {
            runner.sync(); // what the lanes emitted so far is at the front now
            std::lock_guard lock(front.mutex);
            EXPECT_EQ(front.got[0].back().step, driven.lanes[0]->emitted());
        }
    }
    for (auto* lane : driven.lanes) {
        lane->finish();
    }
    ASSERT_TRUE(waitFor([&] { return runner.done(); }));
    EXPECT_TRUE(runner.recording());

    std::lock_guard lock(front.mutex);
    ASSERT_EQ(front.threads.size(), 1u);
    EXPECT_EQ(*front.threads.begin(), runner.pollingThread());
    EXPECT_NE(runner.pollingThread(), std::this_thread::get_id());
    const auto rec = readRecording(tmp.path() / "rec");
    std::size_t all = 0;
    for (std::size_t i = 0; i < 2; ++i) {
        const auto& got = front.got[i];
        // running, 100 intervals a second for 2 s, finished
        ASSERT_FALSE(got.empty());
        EXPECT_EQ(got.front().kind, SampleKind::State);
        EXPECT_EQ(got.back().state, LaneState::Finished);
        for (std::size_t k = 1; k < got.size(); ++k) {
            EXPECT_LE(got[k - 1].step, got[k].step) << "lane " << i << " sample " << k;
        }
        const auto& recorded = rec.samples.at("s" + std::to_string(i));
        ASSERT_EQ(recorded.size(), got.size());
        for (std::size_t k = 0; k < got.size(); ++k) {
            EXPECT_EQ(recorded[k].step, got[k].step);
            EXPECT_EQ(recorded[k].kind, got[k].kind);
        }
        all += got.size();
    }
    EXPECT_EQ(front.recorded, all); // every sample reached the recording before the front
}

TEST(RaceRunner, RecordsWhileTheFrontsThreadTakesNothing) {
    // The window's GUI thread may be busy drawing for seconds: the recording does not wait on it.
    test::TempDir tmp;
    DrivenRace driven(1);
    SampleInbox inbox;
    RaceRunner runner(*driven.race, inbox, tmp.path() / "rec", std::chrono::milliseconds(5));
    runner.start();
    driven.lanes[0]->emitUntil(1.0); // 100 intervals and a running state
    const auto file = runner.recordedFiles().at(0);
    EXPECT_TRUE(waitFor([&] { return lineCount(file) >= 101; })) << lineCount(file) << " lines in " << file;
    const auto batches = inbox.take();
    std::size_t taken = 0;
    for (const auto& b : batches) {
        EXPECT_EQ(b.recorded, b.samples.size());
        taken += b.samples.size();
    }
    EXPECT_EQ(taken, lineCount(file));
    EXPECT_TRUE(inbox.take().empty()); // handed over once
    driven.lanes[0]->finish();
    ASSERT_TRUE(waitFor([&] { return runner.done(); }));
}

TEST(RaceRunner, AFailedRecordingSaysWhyAndTheFrontStillGetsEverySample) {
    test::TempDir tmp;
    DrivenRace driven(1);
    FakeFront front;
    RaceRunner runner(*driven.race, front, tmp.path() / "rec", std::chrono::milliseconds(5));
    runner.start();
    driven.lanes[0]->emitUntil(0.5);
    runner.sync();
    // Past this size a write fails with EFBIG (SIGXFSZ ignored): a full disk, as the runner meets it.
    const auto file = runner.recordedFiles().at(0);
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    const rlimit small{static_cast<rlim_t>(fs::file_size(file)), old.rlim_max};
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    driven.lanes[0]->emitUntil(1.0);
    runner.sync();
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    std::signal(SIGXFSZ, oldHandler);
    driven.lanes[0]->emitUntil(1.5);
    driven.lanes[0]->finish();
    ASSERT_TRUE(waitFor([&] { return runner.done(); }));

    EXPECT_FALSE(runner.recording());
    std::lock_guard lock(front.mutex);
    EXPECT_NE(front.stopped.find("recording write failed"), std::string::npos) << front.stopped;
    EXPECT_NE(front.stopped.find(tmp.path().string()), std::string::npos) << front.stopped;
    const auto& got = front.got[0];
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.back().state, LaneState::Finished);
    EXPECT_EQ(static_cast<std::int64_t>(got.size()), driven.lanes[0]->emitted() + 2); // + running, finished
    EXPECT_LT(front.recorded, got.size());
}

TEST(RaceRunner, AnUnwritableRecordingFolderIsAnErrorBeforeAnythingRuns) {
    test::TempDir tmp;
    DrivenRace driven(1);
    FakeFront front;
    const auto blocker = tmp.path() / "file";
    std::ofstream(blocker) << "x";
    EXPECT_THROW(RaceRunner(*driven.race, front, blocker / "rec"), Error);
    EXPECT_EQ(driven.lanes[0]->state(), LaneState::Pending);
}
