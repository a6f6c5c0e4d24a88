// Worker lanes: real `devicerace-cli worker` processes racing beside thread lanes, their
// crashes, and fake workers (shell scripts named with cli=) that misbehave in every way a
// worker can: garbage, silence, early exits, another protocol version, floods.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "devicerace/dataset.h"
#include "devicerace/errors.h"
#include "devicerace/race.h"
#include "devicerace/race_plan.h"
#include "devicerace/recording.h"
#include "test_util.h"

using namespace devicerace;

namespace {

void waitFor(const std::function<bool()>& done, double seconds = 60) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done() && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

struct Fixture {
    test::TempDir dir;
    Fixture() { test::writeTinyDataset(dir.path(), 600, 100); }

    LaneRunSettings settings(std::int64_t steps) const {
        LaneRunSettings s;
        s.workload = "fashion-mlp";
        s.data = loadFashionMnist(dir.path());
        s.dataDir = dir.path().string();
        s.steps = steps;
        s.warmupSteps = 2;
        return s;
    }

    /// A fake worker: a shell script run as `cli=`.
    std::string script(const std::string& name, const std::string& body) const {
        const auto path = dir / name;
        std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
        ::chmod(path.c_str(), 0755);
        return path.string();
    }
};

LaneSpec processLane(const std::string& name, const std::string& extra = {}) {
    return parseLaneSpec("cpu,threads=1,isolate=process,name=" + name + extra);
}

std::string failureOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

// A hello a real worker would send, for fake workers that get past it.
const char* kHello =
    R"(echo '{"type":"hello","proto":"1.0","version":"0.1.0","devices":{"cpu":{"model":"fake","physical_cores":1,"logical_cpus":1},"gpus":[],"cuda_available":false}}')";
const char* kReady =
    R"(read config; echo '{"type":"ready","batch":128,"total_steps":50,"dataset":{"name":"fake","train":600,"test":100}}'; read start)";

} // namespace

TEST(WorkerLane, AProcessLaneTrainsLikeAThreadLane) {
    Fixture f;
    auto proc = makeLane(processLane("proc"), f.settings(40));
    auto thread = makeLane(parseLaneSpec("cpu,threads=1,name=thread"), f.settings(40));
    EXPECT_EQ(proc->kind(), LaneKind::Process);
    EXPECT_EQ(proc->batch(), thread->batch());
    EXPECT_EQ(proc->totalSteps(), 40);
    EXPECT_EQ(proc->dataset()->train.count, 600);
    proc->start();
    thread->start();
    proc->wait();
    thread->wait();
    ASSERT_EQ(proc->state(), LaneState::Finished) << proc->message();
    const auto a = proc->summary();
    const auto b = thread->summary();
    EXPECT_EQ(a.steps, 40);
    EXPECT_EQ(a.kind, LaneKind::Process);
    EXPECT_TRUE(a.samplesPerSec.has_value());
    EXPECT_FALSE(a.execution.empty());
    // Same seed, same data, same LibTorch: the same model, wherever it trained.
    ASSERT_TRUE(a.finalTestAccuracy && b.finalTestAccuracy);
    EXPECT_DOUBLE_EQ(*a.finalTestAccuracy, *b.finalTestAccuracy);
    for (const auto& s : proc->history()) {
        EXPECT_EQ(s.lane, "proc");
    }
}

TEST(WorkerLane, ACrashingProcessLaneFailsAloneWithTheSignal) {
    Fixture f;
    for (const auto& [fault, signal] : {std::pair{"segv:5", "SIGSEGV"}, std::pair{"abort:5", "SIGABRT"}}) {
        auto bad = makeLane(processLane("bad", std::string(",fault=") + fault), f.settings(30));
        auto good = makeLane(parseLaneSpec("cpu,threads=1,name=good"), f.settings(30));
        bad->start();
        good->start();
        bad->wait();
        good->wait();
        EXPECT_EQ(bad->state(), LaneState::Failed);
        EXPECT_NE(bad->message().find(signal), std::string::npos) << bad->message();
        EXPECT_NE(bad->message().find("at step"), std::string::npos) << bad->message();
        EXPECT_NE(bad->message().find("injecting fault"), std::string::npos) << "stderr tail: " << bad->message();
        EXPECT_EQ(good->state(), LaneState::Finished);
        EXPECT_EQ(good->summary().steps, 30);
        // The failure is the lane's last sample: a recording of it ends with the reason.
        const auto h = bad->history();
        ASSERT_FALSE(h.empty());
        EXPECT_EQ(h.back().state, LaneState::Failed);
    }
}

TEST(WorkerLane, AKilledWorkerEndsItsLaneWithSigkill) {
    Fixture f;
    auto victim = makeLane(processLane("victim"), f.settings(1000000));
    victim->start();
    waitFor([&] { return victim->summary().steps > 5; });
    ASSERT_GT(victim->summary().steps, 5);
    // Find the worker: the lane's child process running "devicerace-cli worker".
    bool killed = false;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const auto pidText = entry.path().filename().string();
        if (pidText.find_first_not_of("0123456789") != std::string::npos) {
            continue;
        }
        std::ifstream cmd(entry.path() / "cmdline");
        std::string text((std::istreambuf_iterator<char>(cmd)), {});
        std::ifstream stat(entry.path() / "stat");
        std::string statText((std::istreambuf_iterator<char>(stat)), {});
        const auto close = statText.rfind(')');
        if (text.find("worker") == std::string::npos || close == std::string::npos) {
            continue;
        }
        int ppid = 0;
        std::sscanf(statText.c_str() + close + 2, "%*c %d", &ppid);
        if (ppid == ::getpid()) {
            ::kill(std::stoi(entry.path().filename()), SIGKILL);
            killed = true;
        }
    }
    ASSERT_TRUE(killed);
    victim->wait();
    EXPECT_EQ(victim->state(), LaneState::Failed);
    EXPECT_NE(victim->message().find("killed by signal 9 (SIGKILL) at step"), std::string::npos) << victim->message();
}

TEST(WorkerLane, StopPauseAndResumeReachTheWorker) {
    Fixture f;
    auto lane = makeLane(processLane("p"), f.settings(1000000));
    lane->setPaused(true); // before start: ignored, like a thread lane that has not started
    lane->start();
    waitFor([&] { return lane->summary().steps > 3; });
    lane->setPaused(true);
    waitFor([&] { return lane->state() == LaneState::Paused; });
    ASSERT_EQ(lane->state(), LaneState::Paused);
    lane->setPaused(false);
    waitFor([&] { return lane->state() == LaneState::Running; });
    lane->requestStop();
    lane->wait();
    EXPECT_EQ(lane->state(), LaneState::Stopped);
    EXPECT_NE(lane->message().find("stopped at step"), std::string::npos) << lane->message();
}

TEST(WorkerLane, AFaultThatKillsTheProcessIsRefusedForAThreadLane) {
    Fixture f;
    const auto why = failureOf([&] { makeLane(parseLaneSpec("cpu,fault=segv"), f.settings(5)); });
    EXPECT_NE(why.find("isolate=process"), std::string::npos) << why;
}

TEST(WorkerLane, TheWorkerRefusesWhatItCannotRun) {
    Fixture f;
    auto s = f.settings(5);
    s.dataDir = (f.dir / "no-such-folder").string();
    auto why = failureOf([&] { makeLane(processLane("x"), s); });
    EXPECT_NE(why.find("no-such-folder"), std::string::npos) << why;
    why = failureOf([&] { makeLane(processLane("x", ",batch=100000"), f.settings(5)); });
    EXPECT_NE(why.find("larger than the 600 training examples"), std::string::npos) << why;
}

TEST(FakeWorker, NotAWorkerAtAll) {
    Fixture f;
    const auto cli = f.script("noise", "echo 'Welcome!'; echo 'usage: something else'; exit 1");
    const auto why = failureOf([&] { makeLane(processLane("x", ",cli=" + cli), f.settings(5)); });
    EXPECT_NE(why.find("is not a DeviceRace worker"), std::string::npos) << why;
    EXPECT_NE(why.find("Welcome!"), std::string::npos) << why;
}

TEST(FakeWorker, MissingProgram) {
    Fixture f;
    const auto why =
        failureOf([&] { makeLane(processLane("x", ",cli=" + (f.dir / "absent").string()), f.settings(5)); });
    EXPECT_NE(why.find("cannot start the worker"), std::string::npos) << why;
}

TEST(FakeWorker, ExitsBeforeHelloWithItsStderr) {
    Fixture f;
    const auto cli = f.script("dies", "echo 'libtorch_cpu.so: cannot open shared object file' >&2; exit 255");
    const auto why = failureOf([&] { makeLane(processLane("x", ",cli=" + cli), f.settings(5)); });
    EXPECT_NE(why.find("ended before saying hello (exit status 255"), std::string::npos) << why;
    EXPECT_NE(why.find("cannot open shared object"), std::string::npos) << why;
}

TEST(FakeWorker, SilentWorkerTimesOut) {
    Fixture f;
    ::setenv("DEVICERACE_HELLO_TIMEOUT", "1", 1);
    const auto cli = f.script("silent", "sleep 30");
    const auto t0 = std::chrono::steady_clock::now();
    const auto why = failureOf([&] { makeLane(processLane("x", ",cli=" + cli), f.settings(5)); });
    ::unsetenv("DEVICERACE_HELLO_TIMEOUT");
    EXPECT_NE(why.find("no answer from the worker"), std::string::npos) << why;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)); // bounded, not the 30 s sleep
}

TEST(FakeWorker, AnotherProtocolVersionIsRefusedClearly) {
    Fixture f;
    const auto cli = f.script("v2", R"(echo '{"type":"hello","proto":"2.0","version":"9.9.9"}'; sleep 5)");
    const auto why = failureOf([&] { makeLane(processLane("x", ",cli=" + cli), f.settings(5)); });
    EXPECT_NE(why.find("9.9.9"), std::string::npos) << why;
    EXPECT_NE(why.find("install the same version"), std::string::npos) << why;
}

TEST(FakeWorker, ARealWorkerAskedForAnotherProtocolSaysSo) {
    Fixture f;
    const auto cli = f.script("wrap", std::string("exec '") + DEVICERACE_CLI_PATH + "' worker --proto 7");
    const auto why = failureOf([&] { makeLane(processLane("x", ",cli=" + cli), f.settings(5)); });
    EXPECT_NE(why.find("refused worker protocol"), std::string::npos) << why;
}

TEST(FakeWorker, ShellNoiseBeforeHelloIsTolerated) {
    Fixture f;
    const auto cli = f.script("motd", std::string("echo 'Last login: yesterday'; echo\n") + kHello + "\n" + kReady +
                                          "\nwhile read line; do :; done");
    auto lane = makeLane(processLane("x", ",cli=" + cli), f.settings(5));
    EXPECT_EQ(lane->totalSteps(), 50);
    EXPECT_EQ(lane->dataset()->name, "fake");
}

TEST(FakeWorker, ASlowPreparationHearsPingsMeanwhile) {
    // A worker stops after 20 s without a word from its parent; a Keras/JAX lane preparing on a
    // busy machine took longer than that, so the parent pings while it waits for `ready`.
    Fixture f;
    const auto cli = f.script(
        "slowprep",
        std::string(kHello) +
            "\nread config; line=$(timeout 10 head -n 1)\n"
            "case \"$line\" in *'\"ping\"'*) ;; *) echo '{\"type\":\"error\",\"message\":\"no ping while "
            "preparing\"}'; "
            "exit 1;; esac\n"
            R"(echo '{"type":"ready","batch":128,"total_steps":50,"dataset":{"name":"fake","train":600,"test":100}}')"
            "\nwhile read line; do :; done");
    auto lane = makeLane(processLane("x", ",cli=" + cli), f.settings(5));
    EXPECT_EQ(lane->totalSteps(), 50);
}

TEST(FakeWorker, PartialLineThenExitFailsTheLaneWithWhatItSaid) {
    Fixture f;
    const auto cli = f.script("partial", std::string(kHello) + "\n" + kReady + "\nprintf '{\"type\":\"sam'; exit 1");
    auto lane = makeLane(processLane("x", ",cli=" + cli), f.settings(5));
    lane->start();
    lane->wait();
    EXPECT_EQ(lane->state(), LaneState::Failed);
    EXPECT_NE(lane->message().find("exit status 1"), std::string::npos) << lane->message();
    EXPECT_NE(lane->message().find("cut off"), std::string::npos) << lane->message();
}

TEST(FakeWorker, GarbageAfterHelloIsLoggedNeverRun) {
    Fixture f;
    const auto marker = f.dir / "executed";
    const auto cli =
        f.script("garbage", std::string(kHello) + "\n" + kReady + "\necho 'touch " + marker.string() +
                                "'; echo '{\"type\":\"sample\",\"sample\":{\"kind\":\"nonsense\"}}'; exit 0");
    auto lane = makeLane(processLane("x", ",cli=" + cli), f.settings(5));
    lane->start();
    lane->wait();
    EXPECT_EQ(lane->state(), LaneState::Failed);
    EXPECT_NE(lane->message().find("malformed sample"), std::string::npos) << lane->message();
    EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(FakeWorker, AFloodingWorkerIsStopped) {
    Fixture f;
    const auto cli = f.script("flood", std::string(kHello) + "\n" + kReady + "\nyes '{\"type\":\"hb\"}'");
    auto lane = makeLane(processLane("x", ",cli=" + cli), f.settings(5));
    lane->start();
    lane->wait();
    EXPECT_EQ(lane->state(), LaneState::Failed);
    EXPECT_NE(lane->message().find("flooded"), std::string::npos) << lane->message();
}

TEST(WorkerRace, ARaceMixesThreadAndProcessLanes) {
    Fixture f;
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.dataDir = f.dir.path().string();
    spec.steps = 20;
    spec.lanes = {parseLaneSpec("cpu,threads=1"), parseLaneSpec("cpu,threads=1,isolate=process")};
    Race race(spec);
    ASSERT_EQ(race.lanes().size(), 2u);
    EXPECT_EQ(race.lanes()[0]->kind(), LaneKind::Thread);
    EXPECT_EQ(race.lanes()[1]->kind(), LaneKind::Process);
    race.start();
    race.wait();
    auto summary = race.summary();
    for (const auto& lane : summary.lanes) {
        EXPECT_EQ(lane.state, LaneState::Finished) << lane.name << ": " << lane.error;
        EXPECT_EQ(lane.steps, 20);
    }
    EXPECT_EQ(summary.lanes[1].kind, LaneKind::Process);
}

// A text's alphabet travels in the worker's ready message, so a race whose first lane is a
// process lane records the same vocabulary as one of thread lanes (the recording keeps it).
TEST(WorkerRace, AProcessLaneReportsTheTextsAlphabetAndTheRecordingKeepsIt) {
    test::TempDir dir;
    const auto text = dir / "tiny.txt";
    {
        std::ofstream out(text);
        for (int i = 0; i < 200; ++i) {
            out << "the quick brown fox jumps over the lazy dog " << i % 10 << "\n";
        }
    }
    RaceSpec spec;
    spec.workload = "char-gpt";
    spec.dataDir = text.string();
    spec.steps = 2;
    spec.fair = true;
    spec.lanes = {parseLaneSpec("cpu,threads=1,isolate=process,name=proc"), parseLaneSpec("cpu,threads=1,name=thread")};
    Race race(spec);
    RecordingWriter writer(dir / "rec", race);
    const auto proc = race.lanes()[0]->dataset(), thread = race.lanes()[1]->dataset();
    EXPECT_EQ(proc->vocabulary, thread->vocabulary);
    EXPECT_EQ(proc->vocabulary, 38); // 26 letters, ten digits, space, newline
    EXPECT_EQ(proc->tokenText, thread->tokenText);
    race.start();
    race.wait();
    for (auto* lane : race.lanes()) {
        for (const auto& s : lane->takeSamples()) {
            writer.append(s);
        }
    }
    const auto rec = readRecording(dir / "rec");
    EXPECT_EQ(rec.vocabulary, 38);
    EXPECT_EQ(rec.tokenText, thread->tokenText);
}

namespace {

// Sets (or removes) an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : m_name(name) {
        if (const char* old = std::getenv(name)) {
            m_old = old;
        }
        value ? ::setenv(name, value, 1) : ::unsetenv(name);
    }
    ~ScopedEnv() { m_old ? ::setenv(m_name, m_old->c_str(), 1) : ::unsetenv(m_name); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* m_name;
    std::optional<std::string> m_old;
};

RaceSpec fairRaceOfOneAndTwoThreads(const Fixture& f) {
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.dataDir = f.dir.path().string();
    spec.steps = 12;
    spec.fair = true;
    spec.lanes = {parseLaneSpec("cpu,threads=1"), parseLaneSpec("cpu,threads=2")};
    return spec;
}

} // namespace

// The window waits passively (OMP_WAIT_POLICY=PASSIVE, DEVICERACE_OMP_WAIT=passive, set by its
// own start). A fair race there runs its 2-thread CPU lane as a process whose threads spin, as a
// CLI race's would (char-gpt 2 threads: 0.92x one thread in a window thread, 1.25x this way).
TEST(WorkerRace, TheWindowsFairRaceSpinsItsTeamsInProcessesOfTheirOwn) {
    Fixture f;
    const ScopedEnv passive("OMP_WAIT_POLICY", "PASSIVE");
    const ScopedEnv window("DEVICERACE_OMP_WAIT", "passive");
    Race race(fairRaceOfOneAndTwoThreads(f));
    EXPECT_TRUE(race.plan().wait.spin);
    EXPECT_TRUE(race.plan().wait.spinInLaneProcesses);
    EXPECT_NE(race.plan().wait.reason.find("cpu·2 runs in a process of its own"), std::string::npos)
        << race.plan().wait.reason;
    ASSERT_EQ(race.lanes().size(), 2u);
    EXPECT_EQ(race.lanes()[0]->kind(), LaneKind::Thread); // one thread: no team to keep awake
    EXPECT_EQ(race.lanes()[1]->kind(), LaneKind::Process);
    race.start();
    race.wait();
    const auto summary = race.summary();
    for (const auto& lane : summary.lanes) {
        ASSERT_EQ(lane.state, LaneState::Finished) << lane.name << ": " << lane.error;
    }
    EXPECT_NE(summary.lanes[1].execution.find("in its own process (OpenMP waits: spin, then sleep)"), std::string::npos)
        << summary.lanes[1].execution;
    EXPECT_EQ(summary.lanes[0].execution.find("own process"), std::string::npos) << summary.lanes[0].execution;
}

// The user's own OMP_WAIT_POLICY is never overridden: no lane moves to a process, and one that
// asked for a process keeps the user's waits there too. A live race in the window waits
// passively everywhere (its lanes share the cores).
TEST(WorkerRace, TheUsersWaitPolicyAndLiveRacesKeepPassiveWaits) {
    Fixture f;
    const ScopedEnv passive("OMP_WAIT_POLICY", "PASSIVE");
    {
        const ScopedEnv user("DEVICERACE_OMP_WAIT", nullptr);
        auto spec = fairRaceOfOneAndTwoThreads(f);
        spec.lanes[1] = parseLaneSpec("cpu,threads=2,isolate=process");
        Race race(spec);
        EXPECT_FALSE(race.plan().wait.spinInLaneProcesses);
        EXPECT_EQ(race.plan().wait.reason.find("process"), std::string::npos) << race.plan().wait.reason;
        race.start();
        race.wait();
        const auto summary = race.summary();
        ASSERT_EQ(summary.lanes[1].state, LaneState::Finished) << summary.lanes[1].error;
        EXPECT_NE(summary.lanes[1].execution.find("in its own process (OpenMP waits: PASSIVE)"), std::string::npos)
            << summary.lanes[1].execution;
    }
    {
        const ScopedEnv window("DEVICERACE_OMP_WAIT", "passive");
        auto spec = fairRaceOfOneAndTwoThreads(f);
        spec.fair = false;
        const auto plan = resolveRace(spec);
        EXPECT_FALSE(plan.wait.spin);
        EXPECT_FALSE(plan.wait.spinInLaneProcesses);
        for (const auto& lane : plan.lanes) {
            EXPECT_EQ(lane.kind, LaneKind::Thread) << lane.spec.name;
        }
        // A lane the user placed keeps its place in a fair race too.
        spec.fair = true;
        spec.lanes[1] = parseLaneSpec("cpu,threads=2,isolate=thread");
        EXPECT_EQ(resolveRace(spec).lanes[1].kind, LaneKind::Thread);
        // Without a worker program to start, the lanes stay threads (and the plan says why).
        const ScopedEnv noCli("DEVICERACE_CLI", "/nonexistent/devicerace-cli");
        spec.lanes[1] = parseLaneSpec("cpu,threads=2");
        const auto stays = resolveRace(spec);
        EXPECT_EQ(stays.lanes[1].kind, LaneKind::Thread);
        EXPECT_NE(stays.wait.reason.find("no worker program (/nonexistent/devicerace-cli)"), std::string::npos)
            << stays.wait.reason;
    }
}

// Worker lanes are made side by side (race.cpp, makeLanes): each fake worker here says ready only
// once the other has started preparing too, and gives up after 10 s. Made one after another, the
// first would wait for a second that is never started, and fail.
TEST(WorkerRace, WorkerLanesPrepareSideBySide) {
    Fixture f;
    auto fake = [&](const std::string& me, const std::string& other) {
        const auto mine = (f.dir / ("preparing-" + me)).string(), theirs = (f.dir / ("preparing-" + other)).string();
        return f.script(
            me,
            std::string(kHello) + "\nread config; touch '" + mine + "'\n" + "i=0; while [ ! -e '" + theirs +
                "' ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done\n" + "[ -e '" + theirs +
                "' ] || { echo '{\"type\":\"error\",\"message\":\"" + me + " prepared alone\"}'; exit 1; }\n" +
                R"(echo '{"type":"ready","batch":128,"total_steps":50,"dataset":{"name":"fake","train":600,"test":100}}')"
                "\nwhile read line; do :; done");
    };
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.dataDir = f.dir.path().string();
    spec.steps = 5;
    spec.lanes = {processLane("a", ",cli=" + fake("a", "b")), processLane("b", ",cli=" + fake("b", "a"))};
    Race race(spec);
    ASSERT_EQ(race.lanes().size(), 2u);
    EXPECT_EQ(race.lanes()[0]->spec().name, "a");
    EXPECT_EQ(race.lanes()[1]->spec().name, "b");
    EXPECT_EQ(race.lanes()[0]->totalSteps(), 50);
}

// When lanes made side by side fail, the race names the first failure in lane order, and a lane
// that was made meanwhile has its worker ended.
TEST(WorkerRace, LanesMadeSideBySideFailInLaneOrderAndEndTheOthers) {
    Fixture f;
    const auto pidFile = f.dir / "ok.pid";
    const auto ok = f.script("ok", std::string(kHello) + "\necho $$ > '" + pidFile.string() + "'\n" + kReady +
                                       "\nwhile read line; do :; done");
    // The first failing lane is slower to fail than the second.
    const auto first = f.script("first", "sleep 1; echo 'first lane broke' >&2; exit 3");
    const auto second = f.script("second", "echo 'second lane broke' >&2; exit 4");
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.dataDir = f.dir.path().string();
    spec.steps = 5;
    spec.lanes = {processLane("ok", ",cli=" + ok), processLane("first", ",cli=" + first),
                  processLane("second", ",cli=" + second)};
    const auto why = failureOf([&] { Race race(spec); });
    EXPECT_NE(why.find("first lane broke"), std::string::npos) << why;
    EXPECT_EQ(why.find("second lane broke"), std::string::npos) << why;
    // The lane that was ready has been ended with the race: its worker exits once stdin closes.
    std::string pid;
    std::ifstream(pidFile) >> pid;
    ASSERT_FALSE(pid.empty());
    waitFor([&] { return ::kill(std::stoi(pid), 0) != 0; }, 30);
    EXPECT_NE(::kill(std::stoi(pid), 0), 0) << "the ready lane's worker " << pid << " still runs";
}
