#pragma once
/// Per-lane results computed from a lane's samples. Pure functions, thread-safe.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devicerace/lane_spec.h"
#include "devicerace/metric_sample.h"

namespace devicerace {

/// What a lane's time-to-target clock stops at (MLPerf: the first evaluation that reaches it): a
/// validation loss at or below `loss` when set (language models), else a test accuracy at or
/// above `accuracy`.
struct QualityTarget {
    std::optional<double> accuracy = {};
    std::optional<double> loss = {};
};

struct LaneSummary {
    std::string name;
    std::string device;
    LaneKind kind = LaneKind::Thread;
    std::string host; // "ssh://..." for remote lanes, else ""
    std::optional<int> threads;
    Precision precision = Precision::Fp32;
    std::int64_t batch = 0;
    LaneState state = LaneState::Pending;
    std::string error;
    std::int64_t steps = 0;
    std::int64_t samples = 0;
    /// Seconds from the lane's start (preparing: imports, data, compilation) to its first
    /// training step, where the lane said both (script lanes always do).
    std::optional<double> preparingSeconds;
    double wallSeconds = 0;              // lane clock at its last sample
    std::optional<double> samplesPerSec; // median over the intervals after warm-up
    std::optional<double> stepsPerSec;   // median over the intervals after warm-up
    std::int64_t measuredSamples = 0;    // samples in the intervals after warm-up
    double measuredSeconds = 0;          // their total length
    std::int64_t warmupSteps = 0;        // the first steps, left out of the speed (0: unknown, a recording)
    std::optional<double> finalTestAccuracy;
    std::optional<double> finalTestLoss;       // the last evaluation's loss (language models: validation loss)
    std::optional<double> tokensPerSec;        // language models: samplesPerSec x tokens per example
    std::optional<double> timeToTargetSeconds; // MLPerf: first evaluation at or above target
    std::optional<std::uint64_t> peakMemoryBytes;
    std::optional<double> costPerHour;
    std::optional<double> totalCostUsd;    // wall seconds x $/hour
    std::optional<double> costToTargetUsd; // time to target x $/hour
    std::optional<double> costVsBaseline;  // costToTarget / the baseline lane's (seed 003's normalised cost)
    std::string execution;                 // how it trained: optimizer kernels, CUDA graph, data placement, precision
    std::string args;                      // script lanes: the lane's own words after the race's command (args=)
    std::string datasetName;               // the data this lane trained on
    bool synthetic = false;
    // Data-parallel lanes (medians over the intervals after warm-up):
    int workers = 0;                         // ranks (0: not a data-parallel lane)
    std::string job;                         // slurm:// and attach:// lanes: the launcher's job id ("" elsewhere)
    std::string nodes;                       // ... and the job's nodes (Slurm's node list)
    std::vector<double> workerSamplesPerSec; // each rank's own samples/s
    std::optional<double> allreduceShare;    // share of a step spent waiting for gradients
    // Scaling (seed 002): against the race's data-parallel lane with the fewest workers.
    std::string scalingBaseline;             // that lane's name ("" : no scaling figures)
    std::optional<double> scalingSpeedup;    // samples/s ÷ the baseline's
    std::optional<double> scalingEfficiency; // speedup ÷ (workers ÷ the baseline's workers)
    // Explaining the race, over the intervals after warm-up:
    std::map<std::string, double> stepBreakdown; // phase -> seconds per step (median per phase)
    std::optional<double> dataShare;             // the data phase's share of the breakdown
    bool inputBound = false;                     // dataShare > kInputBoundShare
    std::optional<double> flopsPerSample;        // forward + backward, counted from the network
    std::optional<double> achievedFlopsPerSec;   // flopsPerSample x samplesPerSec
    std::optional<double> peakFlopsPerSec;       // the device's peak for the lane's precision
    std::string peakSource;                      // how that peak was found
    std::optional<double> utilization;           // achieved / peak (0-1)
    std::optional<double> energyJoules;          // the device's energy over the measured intervals
    std::optional<double> samplesPerJoule;       // samples in those intervals / energyJoules
    std::string energySource;                    // the counter read, or why there is none
    std::optional<double> lr;                    // the learning rate of the last train sample
    // Data-parallel lanes: each rank's own breakdown (medians), and the rank the others wait for
    // ("rank 3 is 18% slower: ...", "" when no rank stands out by 5% or more).
    std::vector<std::map<std::string, double>> workerStepBreakdown;
    std::string slowestRank;
    // A lane whose fused step shares each step between its threads: each thread's speed
    // relative to the fastest (1), the median over the intervals after warm-up.
    std::vector<double> threadSpeeds;
    // The rest of the machine while the lane trained, over the intervals after warm-up (each
    // interval weighted by its length): CPUs busy with other processes, and the hypervisor's steal
    // share of the machine's CPU time. nullopt where not measured.
    std::optional<double> otherCpus;
    std::optional<double> stealShare;
    std::optional<int> machineCpus; // the CPUs of the machine those were read on
};

/// A lane whose data phase takes more than this share of its step is input-bound.
inline constexpr double kInputBoundShare = 0.20;
/// The rest of the machine matters to a lane (the CLI says so; a slower lane's why may name it)
/// from this many CPUs kept busy by other processes, or this share of the CPU time stolen.
inline constexpr double kBusyElsewhereCpus = 0.25;
inline constexpr double kStolenShare = 0.05;

/// The median of a growing list: exact (two heaps, O(log n) per value, O(1) per query) for the
/// first kExactLimit values, equal to median() of them; beyond that the values move into
/// buckets of relative width kBucketWidth, so an hours-long lane keeps O(distinct buckets)
/// memory (a few thousand for rates within ±50%) and the median is within kBucketWidth / 2 of
/// the exact one (O(buckets) per query).
class RunningMedian {
public:
    static constexpr std::size_t kExactLimit = std::size_t(1) << 16;
    static constexpr double kBucketWidth = 1e-4;
    void add(double v);
    bool empty() const { return m_count == 0; }
    bool exact() const { return m_buckets.empty(); }
    double median() const; // precondition: !empty()

private:
    void addBucketed(double v);
    std::vector<double> m_low;                      // max-heap: the smaller half (one more than m_high when odd)
    std::vector<double> m_high;                     // min-heap: the larger half
    std::map<std::int64_t, std::int64_t> m_buckets; // bucket key -> values (past kExactLimit)
    std::size_t m_count = 0;
};

/// A lane's summary kept up to date one sample at a time, so a live window's refresh costs
/// O(1) per lane, O(median buckets) past RunningMedian::kExactLimit intervals, however long the
/// race (never a pass over the whole history). summarize() of the same samples gives the same
/// summary (exactly, up to the exact-median limit).
class RunningSummary {
public:
    void add(const MetricSample& s);
    LaneSummary summary(const LaneSpec& spec, std::int64_t batch, const QualityTarget& target) const;

private:
    LaneSummary m_base; // the fields that do not depend on spec, batch or target
    RunningMedian m_sampleRates, m_stepRates, m_shares;
    std::vector<RunningMedian> m_workerRates;
    std::vector<RunningMedian> m_threadSpeeds;
    std::map<std::string, RunningMedian> m_phases;
    std::vector<std::map<std::string, RunningMedian>> m_workerPhases;
    double m_otherCpuSeconds = 0, m_stealSeconds = 0, m_loadSeconds = 0; // the machine's load, interval-weighted
    double m_energy = 0;              // joules over the measured intervals that carried energy
    std::int64_t m_energySamples = 0; // samples in those intervals
    bool m_energyMissing = false;     // a measured interval without an energy reading
    struct Eval {
        double time, accuracy, loss;
    };
    std::vector<Eval> m_evals;              // few per race
    std::optional<double> m_preparingSince; // wall time of the first Preparing state sample
};

/// A data-parallel lane's rank that the others wait for, from each rank's breakdown: its busy time
/// (every phase but communication and other) against the median of the other ranks', and how
/// much of the others' step goes to waiting.
struct SlowestRank {
    std::size_t rank = 0;
    double busySeconds = 0, typicalSeconds = 0; // per step: its work, the other ranks' median
    double othersWaitShare = 0;                 // median share of the others' step in communication
    double slowerBy() const { return busySeconds / typicalSeconds - 1; }
};
/// nullopt with fewer than two ranks or when none is 5% slower than the others.
std::optional<SlowestRank> slowestRank(const std::vector<std::map<std::string, double>>& ranks);
/// "rank 3 is 18% slower (…): the other ranks wait for it, communication 40% of their step", or "".
std::string slowestRankText(const std::vector<std::map<std::string, double>>& ranks);

/// Computes a lane's summary from all its samples, in order.
LaneSummary summarize(const LaneSpec& spec, std::int64_t batch, std::span<const MetricSample> samples,
                      const QualityTarget& target);

/// Median of a non-empty list (the mean of the two middle values for even sizes).
double median(std::vector<double> values);

} // namespace devicerace
