#pragma once
// The calling thread's CPU time and context switches (Linux: getrusage(RUSAGE_THREAD)). They tell the time a phase
// spent waiting for a CPU — the kernel ran another thread in this one's place — from the time it spent working or
// waiting for something (a sleep, a lock, a read from disk). The step breakdown leaves the first out of the data phase,
// so that a lane sharing its cores is not called input-bound for it (train/step_timer.h).

namespace devicerace::detail {

struct ThreadTime {
    double cpuSeconds = 0;
    long voluntarySwitches = 0;   // the thread gave up its CPU: a sleep, a wait, a blocking read
    long involuntarySwitches = 0; // the kernel took the CPU away: preempted
    bool valid = false;           // false where the platform cannot say

    /// The calling thread's figures now (one system call).
    static ThreadTime now();
};

/// Of the `wallSeconds` between `from` and `to`, the seconds the thread spent preempted: the time
/// it was not on its CPU, when every switch in between was involuntary. A voluntary switch means
/// the thread waited for something — which may be the input itself — so then nothing is counted
/// as preempted; nor when either reading is invalid.
double preemptedSeconds(double wallSeconds, const ThreadTime& from, const ThreadTime& to);

} // namespace devicerace::detail
