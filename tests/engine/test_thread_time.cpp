// A thread's CPU time and context switches (engine train/thread_time.h), which the step breakdown
// uses to leave preempted time out of the data phase: the rule on given readings, then real
// threads — one preempted by a busy thread on its CPU, one that sleeps.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <pthread.h>
#include <sched.h>

#include "train/thread_time.h"

using devicerace::detail::preemptedSeconds;
using devicerace::detail::ThreadTime;

namespace {

ThreadTime reading(double cpu, long voluntary, long involuntary) {
    ThreadTime t;
    t.cpuSeconds = cpu;
    t.voluntarySwitches = voluntary;
    t.involuntarySwitches = involuntary;
    t.valid = true;
    return t;
}

// Pins the calling thread to `cpu`; false where the platform refuses.
bool pinTo(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The first CPU this process may run on.
int firstAllowedCpu() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return -1;
    }
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &set)) {
            return c;
        }
    }
    return -1;
}

double spinFor(std::chrono::milliseconds wall) {
    volatile double x = 1.0;
    const auto end = std::chrono::steady_clock::now() + wall;
    while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 1000; ++i) {
            x = x * 1.0000001 + 1e-9;
        }
    }
    return x;
}

} // namespace

TEST(ThreadTime, OnlyATimeOfInvoluntarySwitchesCountsAsPreempted) {
    // 10 ms of wall, 4 ms on the CPU, switched out twice by the kernel: 6 ms preempted.
    EXPECT_NEAR(preemptedSeconds(0.010, reading(1.0, 5, 7), reading(1.004, 5, 9)), 0.006, 1e-12);
    // A voluntary switch (a sleep, a lock, a blocking read) may be the input itself: none.
    EXPECT_EQ(preemptedSeconds(0.010, reading(1.0, 5, 7), reading(1.004, 6, 9)), 0.0);
    // No switch at all: the time off the CPU is the readings' own noise, not a preemption.
    EXPECT_EQ(preemptedSeconds(0.010, reading(1.0, 5, 7), reading(1.004, 5, 7)), 0.0);
    // Never below 0 nor above the wall time; an invalid reading says nothing.
    EXPECT_EQ(preemptedSeconds(0.010, reading(1.0, 5, 7), reading(1.020, 5, 8)), 0.0);
    EXPECT_NEAR(preemptedSeconds(0.010, reading(1.0, 5, 7), reading(0.9, 5, 8)), 0.010, 1e-12);
    EXPECT_EQ(preemptedSeconds(0.010, ThreadTime{}, reading(1.004, 5, 9)), 0.0);
    EXPECT_EQ(preemptedSeconds(0.010, reading(1.0, 5, 7), ThreadTime{}), 0.0);
}

TEST(ThreadTime, AThreadSharingItsCpuWithABusyOneIsSeenPreempted) {
    const auto before = ThreadTime::now();
    if (!before.valid) {
        GTEST_SKIP() << "this platform gives no per-thread CPU time or switch counts";
    }
    const int cpu = firstAllowedCpu();
    std::atomic<bool> stop{false}, pinned{false}, refused{false};
    std::thread busy([&] {
        if (!pinTo(cpu)) {
            refused = true;
        }
        pinned = true;
        volatile unsigned long n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            n = n + 1;
        }
    });
    while (!pinned) {
        std::this_thread::yield();
    }
    double preempted = 0, wall = 0;
    ThreadTime from, to;
    if (cpu >= 0 && !refused && pinTo(cpu)) {
        // Both threads runnable on one CPU: the kernel takes it from this one by turns.
        from = ThreadTime::now();
        const auto start = std::chrono::steady_clock::now();
        spinFor(std::chrono::milliseconds(300));
        wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        to = ThreadTime::now();
        preempted = preemptedSeconds(wall, from, to);
    }
    stop = true;
    busy.join();
    if (cpu < 0 || refused || wall == 0) {
        GTEST_SKIP() << "could not pin two threads to one CPU";
    }
    EXPECT_GT(to.involuntarySwitches, from.involuntarySwitches);
    EXPECT_EQ(to.voluntarySwitches, from.voluntarySwitches);
    // Half its time, give or take the scheduler; a quiet CPU would give about none.
    EXPECT_GT(preempted, 0.2 * wall) << "wall " << wall << " s, on the CPU " << to.cpuSeconds - from.cpuSeconds << " s";
    EXPECT_LE(preempted, wall);
}

TEST(ThreadTime, ASleepIsAVoluntarySwitchAndNotPreempted) {
    const auto from = ThreadTime::now();
    if (!from.valid) {
        GTEST_SKIP() << "this platform gives no per-thread CPU time or switch counts";
    }
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto to = ThreadTime::now();
    EXPECT_GT(to.voluntarySwitches, from.voluntarySwitches);
    EXPECT_LT(to.cpuSeconds - from.cpuSeconds, wall);
    EXPECT_EQ(preemptedSeconds(wall, from, to), 0.0);
}
