// The figures a race summary derives from its lanes' summaries: speedups, costs against the
// baseline, data-parallel scaling. Torch-free (the fuzz build links it for recordings).
#include "devicerace/race.h"

namespace devicerace {

void normaliseCosts(std::vector<LaneSummary>& lanes, std::size_t baseline) {
    if (baseline >= lanes.size() || !lanes[baseline].costToTargetUsd || *lanes[baseline].costToTargetUsd <= 0) {
        return;
    }
    for (auto& lane : lanes) {
        if (lane.costToTargetUsd) {
            lane.costVsBaseline = *lane.costToTargetUsd / *lanes[baseline].costToTargetUsd;
        }
    }
}

void fillScaling(std::vector<LaneSummary>& lanes) {
    for (auto& lane : lanes) {
        if (lane.workers < 1 || !lane.samplesPerSec) {
            continue;
        }
        const LaneSummary* base = nullptr;
        for (const auto& other : lanes) {
            if (other.workers >= 1 && other.samplesPerSec && *other.samplesPerSec > 0 &&
                (other.device == "cpu") == (lane.device == "cpu") && (!base || other.workers < base->workers)) {
                base = &other;
            }
        }
        if (!base) {
            continue;
        }
        lane.scalingBaseline = base->name;
        lane.scalingSpeedup = *lane.samplesPerSec / *base->samplesPerSec;
        lane.scalingEfficiency = *lane.scalingSpeedup / (static_cast<double>(lane.workers) / base->workers);
    }
}

std::map<std::string, double> speedups(const std::vector<LaneSummary>& lanes, std::size_t baseline) {
    std::map<std::string, double> out;
    if (baseline >= lanes.size() || !lanes[baseline].samplesPerSec || *lanes[baseline].samplesPerSec <= 0) {
        return out;
    }
    for (const auto& lane : lanes) {
        if (lane.samplesPerSec) {
            out[lane.name] = *lane.samplesPerSec / *lanes[baseline].samplesPerSec;
        }
    }
    return out;
}

} // namespace devicerace
