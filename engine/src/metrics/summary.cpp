#include "devicerace/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <functional>

namespace devicerace {

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    auto n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

namespace {
// Bucket keys in the order of the values they hold: negatives, zero, positives; a value's
// bucket is floor(log|v| / log1p(width)), offset so every key is ordered.
constexpr std::int64_t kKeyOffset = std::int64_t(1) << 40;
std::int64_t bucketKey(double v) {
    if (v == 0 || !std::isfinite(v)) {
        return v == 0 || std::isnan(v) ? 0 : (v > 0 ? 2 * kKeyOffset : -2 * kKeyOffset);
    }
    const auto k =
        static_cast<std::int64_t>(std::floor(std::log(std::abs(v)) / std::log1p(RunningMedian::kBucketWidth)));
    return v > 0 ? kKeyOffset + k : -(kKeyOffset + k);
}
// The value in the middle of a bucket (geometric): within width/2 of any value in it.
double bucketValue(std::int64_t key) {
    if (key == 0) {
        return 0;
    }
    const double k = static_cast<double>(std::abs(key) - kKeyOffset);
    const double v = std::exp((k + 0.5) * std::log1p(RunningMedian::kBucketWidth));
    return key > 0 ? v : -v;
}
} // namespace

void RunningMedian::add(double v) {
    ++m_count;
    if (!m_buckets.empty()) {
        addBucketed(v);
        return;
    }
    if (m_low.empty() || v <= m_low.front()) {
        m_low.push_back(v);
        std::push_heap(m_low.begin(), m_low.end());
    } else {
        m_high.push_back(v);
        std::push_heap(m_high.begin(), m_high.end(), std::greater<>());
    }
    // Rebalance: |low| == |high| or |low| == |high| + 1.
    if (m_low.size() > m_high.size() + 1) {
        std::pop_heap(m_low.begin(), m_low.end());
        m_high.push_back(m_low.back());
        m_low.pop_back();
        std::push_heap(m_high.begin(), m_high.end(), std::greater<>());
    } else if (m_high.size() > m_low.size()) {
        std::pop_heap(m_high.begin(), m_high.end(), std::greater<>());
        m_low.push_back(m_high.back());
        m_high.pop_back();
        std::push_heap(m_low.begin(), m_low.end());
    }
    if (m_count > kExactLimit) { // long enough: from now on, buckets
        for (double x : m_low) {
            addBucketed(x);
        }
        for (double x : m_high) {
            addBucketed(x);
        }
        std::vector<double>().swap(m_low);
        std::vector<double>().swap(m_high);
    }
}

void RunningMedian::addBucketed(double v) { ++m_buckets[bucketKey(v)]; }

double RunningMedian::median() const {
    if (m_buckets.empty()) {
        return m_low.size() > m_high.size() ? m_low.front() : (m_low.front() + m_high.front()) / 2.0;
    }
    // The bucket holding the value of rank (count - 1) / 2 (the lower middle).
    const auto rank = static_cast<std::int64_t>((m_count - 1) / 2);
    std::int64_t seen = 0;
    for (const auto& [key, n] : m_buckets) {
        seen += n;
        if (seen > rank) {
            return bucketValue(key);
        }
    }
    return bucketValue(m_buckets.rbegin()->first);
}

void RunningSummary::add(const MetricSample& s) {
    auto& out = m_base;
    out.steps = std::max(out.steps, s.step);
    out.samples = std::max(out.samples, s.samples);
    out.wallSeconds = std::max(out.wallSeconds, s.time);
    if (s.memoryBytes) {
        out.peakMemoryBytes = std::max(out.peakMemoryBytes.value_or(0), *s.memoryBytes);
    }
    switch (s.kind) {
    case SampleKind::Train:
        // Only whole intervals after warm-up count toward throughput.
        // A script lane that cannot see its batch reports steps/s alone: its intervals count for
        // steps/s and every figure but those in samples.
        if (!s.warmup && s.stepsPerSec && s.intervalSeconds) {
            if (s.samplesPerSec) {
                m_sampleRates.add(*s.samplesPerSec);
                out.measuredSamples += static_cast<std::int64_t>(*s.samplesPerSec * *s.intervalSeconds + 0.5);
            }
            m_stepRates.add(*s.stepsPerSec);
            out.measuredSeconds += *s.intervalSeconds;
            if (s.allreduceShare) {
                m_shares.add(*s.allreduceShare);
            }
            if (m_workerRates.size() < s.workerSamplesPerSec.size()) {
                m_workerRates.resize(s.workerSamplesPerSec.size());
            }
            for (std::size_t r = 0; r < s.workerSamplesPerSec.size(); ++r) {
                m_workerRates[r].add(s.workerSamplesPerSec[r]);
            }
            if (m_threadSpeeds.size() < s.threadSpeeds.size()) {
                m_threadSpeeds.resize(s.threadSpeeds.size());
            }
            for (std::size_t t = 0; t < s.threadSpeeds.size(); ++t) {
                m_threadSpeeds[t].add(s.threadSpeeds[t]);
            }
            // /proc/stat ticks 100 times a second: a 0.1 s interval's reading is coarse, their
            // time-weighted mean is not.
            if (s.otherCpus && s.stealShare) {
                m_otherCpuSeconds += *s.otherCpus * *s.intervalSeconds;
                m_stealSeconds += *s.stealShare * *s.intervalSeconds;
                m_loadSeconds += *s.intervalSeconds;
            }
            for (const auto& [phase, secs] : s.stepBreakdown) {
                m_phases[phase].add(secs);
            }
            if (m_workerPhases.size() < s.workerStepBreakdown.size()) {
                m_workerPhases.resize(s.workerStepBreakdown.size());
            }
            for (std::size_t r = 0; r < s.workerStepBreakdown.size(); ++r) {
                for (const auto& [phase, secs] : s.workerStepBreakdown[r]) {
                    m_workerPhases[r][phase].add(secs);
                }
            }
            if (s.energyJoules && s.samplesPerSec) {
                m_energy += *s.energyJoules;
                m_energySamples += static_cast<std::int64_t>(*s.samplesPerSec * *s.intervalSeconds + 0.5);
            } else {
                m_energyMissing = true;
            }
        }
        if (s.lr) {
            out.lr = s.lr;
        }
        break;
    case SampleKind::Eval:
        if (s.accuracy || s.loss) {
            // A script's evaluation may say only its loss (a language model's, a TensorBoard
            // val_loss); the accuracy target then never matches it (NaN compares false).
            if (s.accuracy) {
                out.finalTestAccuracy = s.accuracy;
            }
            out.finalTestLoss = s.loss;
            m_evals.push_back({s.time, s.accuracy.value_or(std::numeric_limits<double>::quiet_NaN()),
                               s.loss.value_or(std::numeric_limits<double>::infinity())});
        }
        break;
    case SampleKind::State:
        out.state = s.state;
        // Preparing -> the first Running: the time to the first step (imports, data, compilation).
        if (s.state == LaneState::Preparing && !m_preparingSince) {
            m_preparingSince = s.wallTime;
        } else if (s.state == LaneState::Running && m_preparingSince && !out.preparingSeconds &&
                   s.wallTime >= *m_preparingSince) {
            out.preparingSeconds = s.wallTime - *m_preparingSince;
        }
        if (!s.message.empty()) {
            out.error = s.message;
        }
        if (s.flopsPerSample) {
            out.flopsPerSample = s.flopsPerSample;
        }
        if (s.peakFlopsPerSec) {
            out.peakFlopsPerSec = s.peakFlopsPerSec;
            out.peakSource = s.peakSource;
        }
        if (!s.energySource.empty()) {
            out.energySource = s.energySource;
        }
        if (s.machineCpus) {
            out.machineCpus = s.machineCpus;
        }
        break;
    }
}

LaneSummary RunningSummary::summary(const LaneSpec& spec, std::int64_t batch, const QualityTarget& target) const {
    LaneSummary out = m_base;
    out.name = spec.name;
    out.device = spec.device;
    out.host = spec.host;
    out.kind = laneKind(spec);
    out.threads = spec.threads;
    out.precision = spec.precision;
    out.args = spec.args.value_or("");
    out.batch = batch;
    out.costPerHour = spec.costPerHour;
    if (target.loss || target.accuracy) {
        for (const auto& e : m_evals) {
            if (target.loss ? e.loss <= *target.loss : e.accuracy >= *target.accuracy) {
                out.timeToTargetSeconds = e.time;
                break;
            }
        }
    }
    if (out.costPerHour) {
        out.totalCostUsd = out.wallSeconds / 3600.0 * *out.costPerHour;
        if (out.timeToTargetSeconds) {
            out.costToTargetUsd = *out.timeToTargetSeconds / 3600.0 * *out.costPerHour;
        }
    }
    if (!m_sampleRates.empty()) {
        out.samplesPerSec = m_sampleRates.median();
    }
    if (!m_stepRates.empty()) {
        out.stepsPerSec = m_stepRates.median();
    }
    if (!m_shares.empty()) {
        out.allreduceShare = m_shares.median();
    }
    for (const auto& rates : m_workerRates) {
        out.workerSamplesPerSec.push_back(rates.empty() ? 0.0 : rates.median());
    }
    for (const auto& speeds : m_threadSpeeds) {
        out.threadSpeeds.push_back(speeds.empty() ? 0.0 : speeds.median());
    }
    // Each thread's median is taken on its own, so when the fastest thread changed during the race
    // no median need be 1; rescale so the fastest reads 1, as in every sample.
    if (const auto fastest = std::max_element(out.threadSpeeds.begin(), out.threadSpeeds.end());
        fastest != out.threadSpeeds.end() && *fastest > 0) {
        const double scale = *fastest;
        for (double& v : out.threadSpeeds) {
            v /= scale;
        }
    }
    if (m_loadSeconds > 0) {
        out.otherCpus = m_otherCpuSeconds / m_loadSeconds;
        out.stealShare = m_stealSeconds / m_loadSeconds;
    }
    double phaseSum = 0;
    for (const auto& [phase, secs] : m_phases) {
        out.stepBreakdown[phase] = secs.median();
        phaseSum += out.stepBreakdown[phase];
    }
    if (phaseSum > 0) {
        const auto data = out.stepBreakdown.find("data");
        out.dataShare = data == out.stepBreakdown.end() ? 0.0 : data->second / phaseSum;
        out.inputBound = *out.dataShare > kInputBoundShare;
    }
    for (const auto& rank : m_workerPhases) {
        std::map<std::string, double> phases;
        for (const auto& [phase, secs] : rank) {
            phases[phase] = secs.median();
        }
        out.workerStepBreakdown.push_back(std::move(phases));
    }
    out.slowestRank = slowestRankText(out.workerStepBreakdown);
    if (out.flopsPerSample && out.samplesPerSec) {
        out.achievedFlopsPerSec = *out.flopsPerSample * *out.samplesPerSec;
        if (out.peakFlopsPerSec && *out.peakFlopsPerSec > 0) {
            // Never above 100%: a lane past its peak means the peak was measured low
            // (finishRaceSummary says so; the lane drops that cached figure).
            out.utilization = std::min(1.0, *out.achievedFlopsPerSec / *out.peakFlopsPerSec);
        }
    }
    // Energy only when every measured interval carried a reading (else a partial sum would
    // flatter the lane).
    if (!m_energyMissing && m_energy > 0) {
        out.energyJoules = m_energy;
        out.samplesPerJoule = static_cast<double>(m_energySamples) / m_energy;
    }
    if (out.kind == LaneKind::Parallel || out.kind == LaneKind::Slurm || out.kind == LaneKind::Attached) {
        out.workers = static_cast<int>(std::max<std::size_t>(laneRanks(spec).size(), m_workerRates.size()));
    }
    return out;
}

std::optional<SlowestRank> slowestRank(const std::vector<std::map<std::string, double>>& ranks) {
    if (ranks.size() < 2) {
        return std::nullopt;
    }
    std::vector<double> busy, waitShare;
    for (const auto& phases : ranks) {
        double b = 0, total = 0, wait = 0;
        for (const auto& [phase, secs] : phases) {
            total += secs;
            if (phase == "communication") {
                wait = secs;
            } else if (phase != "other") {
                b += secs;
            }
        }
        busy.push_back(b);
        waitShare.push_back(total > 0 ? wait / total : 0.0);
    }
    const auto slowest = static_cast<std::size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    std::vector<double> others, othersWait;
    for (std::size_t r = 0; r < busy.size(); ++r) {
        if (r != slowest) {
            others.push_back(busy[r]);
            othersWait.push_back(waitShare[r]);
        }
    }
    const double typical = median(others);
    if (typical <= 0 || busy[slowest] < 1.05 * typical) {
        return std::nullopt;
    }
    return SlowestRank{slowest, busy[slowest], typical, median(othersWait)};
}

std::string slowestRankText(const std::vector<std::map<std::string, double>>& ranks) {
    const auto slow = slowestRank(ranks);
    if (!slow) {
        return {};
    }
    return fmt::format("rank {} is {:.0f}% slower ({:.1f} ms of work per step against {:.1f} ms): the other ranks "
                       "wait for it, communication {:.0f}% of their step",
                       slow->rank, 100 * slow->slowerBy(), slow->busySeconds * 1e3, slow->typicalSeconds * 1e3,
                       100 * slow->othersWaitShare);
}

LaneSummary summarize(const LaneSpec& spec, std::int64_t batch, std::span<const MetricSample> samples,
                      const QualityTarget& target) {
    RunningSummary running;
    for (const auto& s : samples) {
        running.add(s);
    }
    return running.summary(spec, batch, target);
}

} // namespace devicerace
