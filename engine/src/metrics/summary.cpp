#include "devicerace/summary.h"

#include <algorithm>

namespace devicerace {

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    auto n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

LaneSummary summarize(const LaneSpec& spec, std::int64_t batch, std::span<const MetricSample> samples,
                      std::optional<double> targetAccuracy) {
    LaneSummary out;
    out.name = spec.name;
    out.device = spec.device;
    out.host = spec.host;
    out.kind = laneKind(spec);
    out.threads = spec.threads;
    out.batch = batch;
    out.costPerHour = spec.costPerHour;
    std::vector<double> sampleRates, stepRates, shares;
    std::vector<std::vector<double>> workerRates;
    for (const auto& s : samples) {
        out.steps = std::max(out.steps, s.step);
        out.samples = std::max(out.samples, s.samples);
        out.wallSeconds = std::max(out.wallSeconds, s.time);
        if (s.memoryBytes) {
            out.peakMemoryBytes = std::max(out.peakMemoryBytes.value_or(0), *s.memoryBytes);
        }
        switch (s.kind) {
        case SampleKind::Train:
            // Only whole intervals after warm-up count toward throughput.
            if (!s.warmup && s.samplesPerSec && s.stepsPerSec && s.intervalSeconds) {
                sampleRates.push_back(*s.samplesPerSec);
                stepRates.push_back(*s.stepsPerSec);
                out.measuredSamples += static_cast<std::int64_t>(*s.samplesPerSec * *s.intervalSeconds + 0.5);
                out.measuredSeconds += *s.intervalSeconds;
                if (s.allreduceShare) {
                    shares.push_back(*s.allreduceShare);
                }
                if (workerRates.size() < s.workerSamplesPerSec.size()) {
                    workerRates.resize(s.workerSamplesPerSec.size());
                }
                for (std::size_t r = 0; r < s.workerSamplesPerSec.size(); ++r) {
                    workerRates[r].push_back(s.workerSamplesPerSec[r]);
                }
            }
            break;
        case SampleKind::Eval:
            if (s.accuracy) {
                out.finalTestAccuracy = s.accuracy;
                if (targetAccuracy && !out.timeToTargetSeconds && *s.accuracy >= *targetAccuracy) {
                    out.timeToTargetSeconds = s.time;
                }
            }
            break;
        case SampleKind::State:
            out.state = s.state;
            if (!s.message.empty()) {
                out.error = s.message;
            }
            break;
        }
    }
    if (out.costPerHour) {
        out.totalCostUsd = out.wallSeconds / 3600.0 * *out.costPerHour;
        if (out.timeToTargetSeconds) {
            out.costToTargetUsd = *out.timeToTargetSeconds / 3600.0 * *out.costPerHour;
        }
    }
    if (!sampleRates.empty()) {
        out.samplesPerSec = median(sampleRates);
        out.stepsPerSec = median(stepRates);
    }
    if (!shares.empty()) {
        out.allreduceShare = median(shares);
    }
    for (auto& rates : workerRates) {
        out.workerSamplesPerSec.push_back(rates.empty() ? 0.0 : median(rates));
    }
    if (out.kind == LaneKind::Parallel) {
        out.workers = static_cast<int>(std::max<std::size_t>(laneRanks(spec).size(), workerRates.size()));
    }
    return out;
}

} // namespace devicerace
