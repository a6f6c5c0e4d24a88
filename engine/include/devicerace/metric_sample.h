#pragma once
/// One metrics record a lane emits, and its JSON-lines form (the one event schema
/// shared by recordings, the CLI's --jsonl and the GUI). Plain value, thread-safe to copy.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace devicerace {

enum class SampleKind {
    Train, // throughput and training loss over the interval since the previous train sample
    Eval,  // a test-set evaluation finished
    State  // the lane changed state (running, finished, failed, ...)
};

enum class LaneState { Pending, Preparing, Running, Evaluating, Paused, Finished, Failed, Diverged, Stopped };

std::string toString(SampleKind k);
std::string toString(LaneState s);
bool isTerminal(LaneState s);

struct MetricSample {
    SampleKind kind = SampleKind::Train;
    std::string lane;                         // lane name
    std::int64_t step = 0;                    // optimizer steps finished
    std::int64_t samples = 0;                 // training examples seen
    double epoch = 0;                         // fractional epochs finished
    double time = 0;                          // seconds since the lane started training (paused time excluded)
    double wallTime = 0;                      // seconds since the Unix epoch, when this sample was taken
    std::optional<double> loss;               // Train: mean training loss over the interval; Eval: test loss
    std::optional<double> accuracy;           // Train: training accuracy over the interval; Eval: test accuracy
    std::optional<double> samplesPerSec;      // Train only: over the interval
    std::optional<double> stepsPerSec;        // Train only
    std::optional<double> intervalSeconds;    // Train: length of the interval; Eval: evaluation time
    std::optional<std::uint64_t> memoryBytes; // peak tensor memory so far
    bool warmup = false;                      // Train: interval inside the warm-up steps (excluded from figures)
    LaneState state = LaneState::Running;     // State: the new state
    std::string message;                      // State: error or divergence text
    std::string text;                         // Eval: text the model generated (charlstm), else empty
    // Data-parallel lanes, Train samples (rank 0 reports for all ranks):
    std::vector<double> workerSamplesPerSec;                        // each rank's own samples/s over the interval
    std::optional<double> allreduceShare;                           // mean share of a step spent waiting for gradients
    std::vector<std::map<std::string, double>> workerStepBreakdown; // each rank's own step breakdown
    std::optional<double> lr; // Train: the learning rate the interval's last step used
    // Train: each of the lane's intra-op threads' speed relative to the fastest (1), as the fused
    // step's work shares found it at the interval's end (empty where no step measures it).
    std::vector<double> threadSpeeds;
    // Train: how busy the rest of the machine kept its CPUs over the interval (/proc/stat less
    // this process's own CPU time): CPUs busy with other processes, on average, and the share of
    // the machine's CPU time the hypervisor gave to other machines (steal). Not for data-parallel lanes.
    std::optional<double> otherCpus;
    std::optional<double> stealShare;
    // Explaining the race:
    // Train: seconds per step by phase ("data", "forward", "backward", "communication",
    // "optimizer", "compute" (a CUDA graph's whole step), "other"), over the interval's timed steps.
    std::map<std::string, double> stepBreakdown;
    std::optional<double> energyJoules; // Train: the lane's device's energy over the interval (RAPL, NVML)
    // State (running): what utilisation divides by, counted and measured once per lane.
    std::optional<double> flopsPerSample;  // forward + backward FLOPs per training example
    std::optional<double> peakFlopsPerSec; // the device's peak for the lane's precision and threads
    std::string peakSource;                // "measured: ..." or "datasheet: ..."
    std::string energySource;              // "RAPL package-0" / "NVML" / "not measurable here: <why>"
    std::optional<int> machineCpus;        // the CPUs of the machine whose load otherCpus reads
};

/// One JSON object on one line (no trailing newline).
std::string toJsonLine(const MetricSample& s);
/// Parses a line written by toJsonLine; throws DataError on malformed input.
MetricSample sampleFromJsonLine(const std::string& line);

} // namespace devicerace
