#pragma once
/// A race's summary and the arithmetic on its lanes' summaries (speedups, costs, scaling, energy
/// attribution, the why-lines), implemented in metrics/race_figures.cpp: the same for a live race,
/// a replayed recording and the window. Plain values; no Race needed.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/summary.h"

namespace devicerace {

struct RaceSummary {
    std::string workload;
    std::string datasetName;
    bool synthetic = false;
    std::string dataNote; // e.g. "no ImageNet here: racing on synthetic data"
    bool fair = false;
    /// This process's OMP_WAIT_POLICY as libgomp read it ("PASSIVE", "ACTIVE"; "" for libgomp's
    /// default, which spins a while): a live race's figures depend on it. Unknown in replays.
    std::optional<std::string> ompWaitPolicy;
    std::int64_t tokensPerSample = 0; // language models: tokens scored per example (throughput in tokens/s)
    /// Script lanes: the command they ran (shown, never run again from a summary or recording).
    std::vector<std::string> command;
    std::vector<LaneSummary> lanes;
    std::map<std::string, double> speedup; // lane name -> samples/sec ratio to the first lane
    /// Why a lane is slower than one it should beat, past its peak, or without a speed
    /// (explainSlowerLanes, explainBf16Lanes, explainPeaksExceeded, explainUnmeasuredLanes).
    std::vector<std::string> explanations;
};

/// Fills the race-wide figures of a summary whose workload, mode and lanes are set: speedups,
/// costs against the first lane, scaling, tokens/s (language models) and the explanations.
void finishRaceSummary(RaceSummary& summary);

/// Live races: a lane's energy is dropped (with the reason in its energySource) when another
/// lane that ran at the same time read the same counter (one host's CPU packages, one GPU).
void attributeEnergy(std::vector<LaneSummary>& lanes, bool fair);

/// The energy counter a lane on `host` ("" here) and `device` reads: one per host's CPU packages,
/// one per GPU. Lanes that read one counter at once cannot be told apart (attributeEnergy).
std::string energyCounter(const std::string& host, const std::string& device);

/// For lanes that ran at once: per lane, how many lanes with a reading share its counter
/// (`counters[i]`: energyCounter() of a lane with an energy reading, "" without one). A lane
/// whose figure is above 1 has no energy of its own. The one rule attributeEnergy and the
/// window's live figures follow.
std::vector<int> energySharers(const std::vector<std::string>& counters);

/// Fills each lane's costVsBaseline: its cost to target over the baseline lane's.
void normaliseCosts(std::vector<LaneSummary>& lanes, std::size_t baseline = 0);

/// Fills the data-parallel lanes' scaling figures: speedup and efficiency against the lane of
/// the same device kind with the fewest workers (the 1-worker baseline of a scaling race).
void fillScaling(std::vector<LaneSummary>& lanes);

/// Speedup of each lane's median samples/sec relative to `baseline` (null when unknown).
std::map<std::string, double> speedups(const std::vector<LaneSummary>& lanes, std::size_t baseline = 0);

/// Why a lane with more resources (more CPU threads, a GPU instead of a CPU, more data-parallel
/// ranks) trains slower than one with fewer, in words an audience follows: one sentence per such
/// lane, naming both lanes and the measured ratio ("cpu·2 runs at 0.74× cpu·1: a fashion-mlp
/// step takes 4.4 ms on one thread, too little work to split two ways ..."). `fair`: the lanes
/// ran one at a time (else they shared the machine). Lanes within 3% of each other are a tie.
std::vector<std::string> explainSlowerLanes(const std::vector<LaneSummary>& lanes, bool fair,
                                            const std::string& workload);

/// Why a bf16 CPU lane is slower than an fp32 lane of the same machine and threads: the measured
/// cause (no bf16 units, autocast's casts, the fused step's GEMM routes), each lane's share of its
/// GEMM peak and the step phase that grew most.
std::vector<std::string> explainBf16Lanes(const std::vector<LaneSummary>& lanes);
/// Lanes that reached more than their peak (shown as 100%): the peak was measured low.
std::vector<std::string> explainPeaksExceeded(const std::vector<LaneSummary>& lanes);
/// Lanes that finished (or were stopped) after some steps without a measured speed: their steps
/// all fell in the warm-up, or no timed interval began after it (a quick script's reports).
std::vector<std::string> explainUnmeasuredLanes(const std::vector<LaneSummary>& lanes);

} // namespace devicerace
