#pragma once
/// A race as it will run, decided before anything runs: resolveRace is the one place that turns
/// what the user wrote (CLI flags, the window's table, a preset) into lane names, threads per
/// lane, batches, step counts, the evaluation interval, core sharing and its note, each lane's
/// kind, and every reason a lane or the race cannot run. The CLI and the window display and run
/// what it returns; `Race` builds its lanes from it. Thread-safe; cheap enough for the GUI thread
/// (it reads data headers, never loads a data set except a text corpus, starts no lane and no
/// process when asked not to check frameworks).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"

namespace devicerace {

/// One lane of a resolved race.
struct LanePlan {
    LaneSpec spec; // as it will run: name given, threads shared, isolation decided
    LaneKind kind = LaneKind::Thread;
    /// CPU threads of each of the lane's processes on this machine (0: none here, e.g. a CUDA or
    /// remote lane), and how many such processes it has (data-parallel CPU ranks).
    int localThreads = 0;
    int localCpuProcesses = 0;
    /// Known where DeviceRace's engine trains the lane on this machine; else the lane says at
    /// start (a remote host, another framework's program).
    std::optional<std::int64_t> batch; // per step (a data-parallel lane: the global batch)
    std::optional<std::int64_t> totalSteps;
    std::string problem;       // why the lane cannot run ("" when it can), naming the lane
    bool checking = false;     // a check is still out (the window's framework check): not yet known
    bool needsConsent = false; // cmd=: runs a program; only with the user's consent
};

/// How the race's process's OpenMP threads wait between parallel regions. libgomp reads
/// OMP_WAIT_POLICY once, when it loads, so whoever starts the process sets it (the CLI re-execs
/// itself where the variable is unset and the race wants passive waits). Spinning keeps a team
/// awake between a step's many small regions (fashion-mlp on 2 threads: 1.35x the passive rate
/// on the 2-vCPU Xeon) but collapses throughput where other busy threads share the cores (two
/// live thread lanes: the 2-thread one at 0.4x). Worker processes wait passively either way.
struct WaitPolicy {
    bool spin = false;  // libgomp's default (spin a while, then sleep); else OMP_WAIT_POLICY=PASSIVE
    std::string reason; // one line, for --plan and the notes
    /// The race spins and DeviceRace, not the user, set this process's waits
    /// (DEVICERACE_OMP_WAIT is "spin" or "passive"): the lanes' local processes (workers,
    /// framework lanes) start with libgomp's default waits, OMP_WAIT_POLICY removed and
    /// DEVICERACE_OMP_WAIT=spin. A user's own OMP_WAIT_POLICY is never overridden.
    bool spinInLaneProcesses = false;
};
/// Spin where the race's processes never share the cores with each other: fair mode or a race
/// of one lane, and no lane of several CPU processes here (data-parallel CPU ranks). Where it
/// spins, the CLI exports DEVICERACE_OMP_WAIT=spin, and the lanes' own processes (workers,
/// framework lanes) then leave libgomp's default too instead of setting PASSIVE.
WaitPolicy waitPolicyFor(const RaceSpec& spec);
/// The window waits passively (it starts itself with OMP_WAIT_POLICY=PASSIVE and
/// DEVICERACE_OMP_WAIT=passive where the user set neither: one process races, plots and records
/// at once, and it cannot change the policy between races). There, a race that spins runs each
/// local CPU lane of several threads, not given isolate=, as a process of its own that spins:
/// in a thread of the window's process its team woke through a futex for each of a step's many
/// parallel regions (char-gpt fair, 2 threads: 0.92x one thread in the window, 1.41x in the CLI).
bool spinsOnlyInProcesses();

/// A whole race, resolved.
struct RacePlan {
    RaceSpec spec; // lanes resolved, target and evaluation interval filled in
    std::vector<LanePlan> lanes;
    std::string dataNote; // what the user should know about the data, or ""
    std::int64_t evalEverySteps = 0;
    /// Live races share this machine's CPUs: the local CPU lanes' threads in total, the CPUs
    /// there are, and the note said when the threads are more than the CPUs ("" otherwise).
    int cpuThreads = 0;
    int logicalCpus = 0;
    std::string sharingNote;
    WaitPolicy wait;
    /// Why the race cannot run (race-level first, then each lane's problem); empty: it can.
    std::vector<std::string> problems;
    bool ok() const { return problems.empty(); }
};

struct PlanOptions {
    /// Ask this machine's Python whether a framework= lane can run (up to ~10 s the first time,
    /// cached per framework). false: use an answer already known, else mark the lane `checking`.
    bool askFrameworks = true;
};

/// Resolves `spec`; never throws for what the user wrote (it lands in `problems`).
RacePlan resolveRace(const RaceSpec& spec, const PlanOptions& options = {});

/// Evaluations a race with RaceSpec::autoEvaluations gets (the window's default).
inline constexpr int kAutoEvaluations = 10;

} // namespace devicerace
