// How busy the rest of the machine kept its CPUs (engine devices/machine_load.h): /proc/stat's
// text, the arithmetic of a reading, and real readings — a busy child process counts as other
// load, a busy thread of this process does not.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "devices/machine_load.h"

using namespace devicerace::detail;

namespace {

const char* kStat = "cpu  4719271 14855 478527 3895093 31142 0 6435 28917 0 0\n"
                    "cpu0 2251143 8202 203746 2099003 7883 0 2202 14635 0 0\n"
                    "cpu1 2468128 6653 274781 1796090 23259 0 4233 14281 0 0\n"
                    "intr 1234 5 6\n"
                    "ctxt 99\n";

CpuTicks ticks(std::uint64_t busy, std::uint64_t steal, std::uint64_t total) {
    CpuTicks t;
    t.busy = busy;
    t.steal = steal;
    t.total = total;
    t.cpus = 2;
    return t;
}

} // namespace

TEST(MachineLoad, ProcStatIsReadColumnByColumn) {
    const auto t = parseProcStat(kStat);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->busy, 4719271u + 14855 + 478527 + 0 + 6435); // user nice system irq softirq
    EXPECT_EQ(t->steal, 28917u);
    EXPECT_EQ(t->total, t->busy + 3895093 + 31142 + 28917); // + idle, iowait, steal
    EXPECT_EQ(t->cpus, 2);
    // An old kernel's 7 columns (no steal) and text without the aggregate line say nothing.
    EXPECT_FALSE(parseProcStat("cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n"));
    EXPECT_FALSE(parseProcStat("cpu0 1 2 3 4 5 6 7 8\n"));
    EXPECT_FALSE(parseProcStat(""));
}

TEST(MachineLoad, AReadingIsTheBusyTimeLessThisProcesssOverTheWallTime) {
    // 2 s on 2 CPUs at 100 ticks/s: 300 busy ticks (3 CPU-seconds), 1.2 of them this process's.
    auto r = machineLoadBetween(ticks(1000, 10, 5000), ticks(1300, 30, 5400), 1.2, 2.0, 100);
    ASSERT_TRUE(r);
    EXPECT_NEAR(r->otherCpus, 0.9, 1e-12);
    EXPECT_NEAR(r->stealShare, 20.0 / 400.0, 1e-12);
    // The ticks' coarseness can put this process above the machine: never below 0.
    r = machineLoadBetween(ticks(1000, 10, 5000), ticks(1100, 10, 5400), 1.3, 2.0, 100);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->otherCpus, 0.0);
    // No time, counters going back (a different file), or no ticks between: no reading.
    EXPECT_FALSE(machineLoadBetween(ticks(1000, 10, 5000), ticks(1300, 30, 5400), 1.2, 0.0, 100));
    EXPECT_FALSE(machineLoadBetween(ticks(1300, 10, 5400), ticks(1000, 30, 5000), 1.2, 2.0, 100));
    EXPECT_FALSE(machineLoadBetween(ticks(1000, 10, 5000), ticks(1000, 10, 5000), 0.0, 2.0, 100));
}

TEST(MachineLoad, AMissingFileIsNotMeasurable) {
    MachineLoad load("/nonexistent/proc/stat");
    EXPECT_FALSE(load.measurable());
    EXPECT_FALSE(load.read());
}

TEST(MachineLoad, ABusyProcessIsOtherLoadAndABusyThreadOfOursIsNot) {
    MachineLoad load;
    if (!load.measurable()) {
        GTEST_SKIP() << "no /proc/stat here";
    }
    // This process keeps one CPU busy: its own time, not another process's.
    EXPECT_FALSE(load.read()); // the count starts
    std::atomic<bool> stop{false};
    std::thread own([&] {
        volatile unsigned long n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            n = n + 1;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    const auto ours = load.read();
    stop = true;
    own.join();
    ASSERT_TRUE(ours);

    // A child process keeps one CPU busy: other load.
    (void)load.read();
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        volatile unsigned long n = 0;
        for (;;) { // until killed
            n = n + 1;
        }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    const auto theirs = load.read();
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    ASSERT_TRUE(theirs);
    // About 1 CPU more; the machine's own background and the ticks' coarseness blur both.
    EXPECT_GE(theirs->otherCpus, 0.6) << "a busy child process read as " << theirs->otherCpus << " CPUs";
    EXPECT_LE(ours->otherCpus, theirs->otherCpus - 0.4)
        << "this process's busy thread read as " << ours->otherCpus << " CPUs of other load";
    EXPECT_GE(theirs->stealShare, 0.0);
    EXPECT_LE(theirs->stealShare, 1.0);
}
