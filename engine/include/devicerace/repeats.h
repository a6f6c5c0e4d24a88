#pragma once
/// Is the gap real? A race run N times with fresh lanes (--repeat N): per lane the median and
/// spread of samples/s and time to target, and each lane's speedup over the first lane as
/// "1.93× ± 0.04 (N = 5)", like hyperfine. Pure functions, torch-free, thread-safe.
#include <optional>
#include <string>
#include <vector>

#include "devicerace/race.h"

namespace devicerace {

/// Median, sample standard deviation and range of one figure over the repeats that had it.
struct Spread {
    int n = 0;
    double median = 0, stddev = 0, min = 0, max = 0;
};
/// nullopt when no value is given.
std::optional<Spread> spreadOf(const std::vector<double>& values);

struct LaneRepeats {
    std::string name;
    std::optional<Spread> samplesPerSec, timeToTargetSeconds, utilization;
    std::optional<Spread> speedup; // over the race's first lane, repeat by repeat
    /// The speedup is within noise: 1.0 lies within its median ± 2 standard deviations (or its
    /// range, for two repeats), so the lanes are not shown to differ.
    bool withinNoise = false;
    bool baseline = false; // the first lane: every speedup is measured against it
};

struct RepeatSummary {
    std::vector<RaceSummary> repeats; // one per repeat, in order
    std::vector<LaneRepeats> lanes;   // in the first repeat's lane order
    /// The first repeat's summary with each lane's samples/s, tokens/s, steps/s, time to target
    /// and utilisation replaced by their medians over the repeats, and the median speedups.
    RaceSummary median;
};

/// Precondition: at least one repeat. Lanes are matched by name.
RepeatSummary summarizeRepeats(std::vector<RaceSummary> repeats);

/// "1.93× ± 0.04 (N = 5)", and " — within noise" when it is.
std::string speedupText(const LaneRepeats& lane);

/// The race JSON for repeats: the median summary's fields, plus "repeats" (each repeat's summary)
/// and "speedup_spread" / "lane_spread" (lane -> {median, stddev, min, max, n[, within_noise]}).
std::string repeatsToJson(const RepeatSummary& summary);

} // namespace devicerace
