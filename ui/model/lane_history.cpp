#include "model/lane_history.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace devicerace::ui {

namespace {
bool finite(const std::optional<double>& v) { return v && std::isfinite(*v); }
} // namespace

void LaneHistory::append(const MetricSample& s) {
    lastStep = std::max(lastStep, s.step);
    lastTime = std::max(lastTime, s.time);
    lastEpoch = std::max(lastEpoch, s.epoch);
    if (s.memoryBytes) {
        peakMemory = std::max(peakMemory.value_or(0), *s.memoryBytes);
    }
    switch (s.kind) {
    case SampleKind::Train:
        // A chart keeps the last finite point: intervals without a finite rate are dropped. A
        // script lane may say steps/s without samples/s (its batch unseen), or no loss for an
        // interval (the previous one stands; before the first there is no point).
        if (finite(s.stepsPerSec) && (finite(s.loss) || !loss.empty()) &&
            (finite(s.samplesPerSec) || !s.samplesPerSec)) {
            Point p;
            p.time = s.time;
            p.step = static_cast<double>(s.step);
            p.samples = static_cast<double>(s.samples);
            p.samplesPerSec = s.samplesPerSec.value_or(0.0);
            samplesSeen = samplesSeen || s.samplesPerSec.has_value();
            stepsOnly = !samplesSeen;
            p.stepsPerSec = *s.stepsPerSec;
            p.loss = finite(s.loss) ? *s.loss : loss.back();
            p.cost = costPerHour ? s.time / 3600.0 * *costPerHour : 0.0;
            p.warmup = s.warmup;
            const double weight = m_lastRawTime ? std::max(0.0, s.time - *m_lastRawTime) : 0.0;
            m_lastRawTime = s.time;
            appendPoint(p, weight);
            if (finite(s.lr) && *s.lr > 0) {
                if (lastLr && (*s.lr >= 1.5 * *lastLr || *s.lr * 1.5 <= *lastLr)) {
                    lrTime.push_back(s.time);
                    lrStep.push_back(static_cast<double>(s.step));
                    lrSamples.push_back(static_cast<double>(s.samples));
                    lrCost.push_back(costPerHour ? s.time / 3600.0 * *costPerHour : 0.0);
                }
                lastLr = s.lr;
            }
            if (!s.warmup && s.stepsPerSec && s.intervalSeconds) { // as the summary counts an interval
                if (s.samplesPerSec) {
                    m_rates.add(*s.samplesPerSec);
                }
                for (const auto& [phase, secs] : s.stepBreakdown) {
                    m_phases[phase].add(secs);
                }
            }
            if (!s.warmup) {
                if (s.samplesPerSec) {
                    recentSamplesPerSec = s.samplesPerSec;
                }
                if (!s.stepBreakdown.empty()) {
                    lastBreakdown = s.stepBreakdown;
                }
                if (!s.workerStepBreakdown.empty()) {
                    lastRankBreakdowns = s.workerStepBreakdown;
                }
                if (finite(s.energyJoules) && *s.energyJoules > 0 && finite(s.intervalSeconds) && s.samplesPerSec) {
                    energyJoules += *s.energyJoules;
                    energySamples += *s.samplesPerSec * *s.intervalSeconds;
                }
            }
        }
        break;
    case SampleKind::Eval:
        if (finite(s.accuracy) || finite(s.loss)) {
            constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
            evalTime.push_back(s.time);
            evalStep.push_back(static_cast<double>(s.step));
            evalSamples.push_back(static_cast<double>(s.samples));
            evalAccuracy.push_back(finite(s.accuracy) ? *s.accuracy : kNone);
            evalLoss.push_back(finite(s.loss) ? *s.loss : (evalLoss.empty() ? kNone : evalLoss.back()));
            evalCost.push_back(costPerHour ? s.time / 3600.0 * *costPerHour : 0.0);
            if (finite(s.accuracy)) {
                lastAccuracy = s.accuracy;
            }
            if (finite(s.loss)) {
                lastEvalLoss = s.loss;
            }
        }
        if (!s.text.empty()) {
            lastText = QString::fromStdString(s.text);
            lastTextStep = s.step;
        }
        break;
    case SampleKind::State:
        state = s.state;
        if (!s.message.empty()) {
            message = QString::fromStdString(s.message);
        }
        if (s.flopsPerSample) {
            flopsPerSample = s.flopsPerSample;
        }
        if (s.peakFlopsPerSec) {
            peakFlopsPerSec = s.peakFlopsPerSec;
            peakSource = QString::fromStdString(s.peakSource);
        }
        break;
    }
}

std::optional<double> LaneHistory::samplesPerJoule() const {
    if (energyJoules <= 0) {
        return std::nullopt;
    }
    return energySamples / energyJoules;
}

namespace {
bool ended(LaneState s) { return s == LaneState::Finished || s == LaneState::Stopped; }
} // namespace

std::optional<double> LaneHistory::laneSamplesPerSec() const {
    return m_rates.empty() ? std::nullopt : std::optional<double>(m_rates.median());
}

std::optional<double> LaneHistory::utilization() const {
    const auto rate = ended(state) && laneSamplesPerSec() ? laneSamplesPerSec() : recentSamplesPerSec;
    if (!flopsPerSample || !peakFlopsPerSec || *peakFlopsPerSec <= 0 || !rate) {
        return std::nullopt;
    }
    // Never above 100% (the engine's summary clamps the same way and says why).
    return std::min(1.0, *flopsPerSample * *rate / *peakFlopsPerSec);
}

std::map<std::string, double> LaneHistory::shownBreakdown() const {
    if (!ended(state) || m_phases.empty()) {
        return lastBreakdown;
    }
    std::map<std::string, double> out;
    for (const auto& [phase, secs] : m_phases) {
        out[phase] = secs.median();
    }
    return out;
}

void LaneHistory::push(const Point& p) {
    time.push_back(p.time);
    step.push_back(p.step);
    samples.push_back(p.samples);
    samplesPerSec.push_back(p.samplesPerSec);
    stepsPerSec.push_back(p.stepsPerSec);
    loss.push_back(p.loss);
    cost.push_back(p.cost);
    warmup.push_back(p.warmup ? 1 : 0);
}

void LaneHistory::appendPoint(const Point& p, double weight) {
    if (stride == 1) {
        push(p);
    } else {
        // Gather `stride` intervals into one point: it ends where the last one ends, its rates
        // are the time-weighted means (the true rate over the span), its loss the mean.
        m_acc.warmup = m_accCount == 0 ? p.warmup : (m_acc.warmup && p.warmup);
        m_acc.time = p.time;
        m_acc.step = p.step;
        m_acc.samples = p.samples;
        m_acc.cost = p.cost;
        m_accWeight += weight;
        m_accSps += p.samplesPerSec * weight;
        m_accSteps += p.stepsPerSec * weight;
        m_accLoss += p.loss;
        ++m_accCount;
        if (m_accCount < stride) {
            return;
        }
        m_acc.samplesPerSec = m_accWeight > 0 ? m_accSps / m_accWeight : p.samplesPerSec;
        m_acc.stepsPerSec = m_accWeight > 0 ? m_accSteps / m_accWeight : p.stepsPerSec;
        m_acc.loss = m_accLoss / static_cast<double>(m_accCount);
        push(m_acc);
        m_accCount = 0;
        m_accWeight = m_accSps = m_accSteps = m_accLoss = 0;
    }
    if (time.size() >= kMaxPoints) {
        mergePairs();
    }
}

void LaneHistory::mergePairs() {
    const std::size_t n = time.size();
    std::size_t out = 0;
    for (std::size_t i = 0; i + 1 < n; i += 2, ++out) {
        // Each point's weight is the time it spans (from the point before it).
        const double before = i > 0 ? time[i - 1] : time[i] - (time[i + 1] - time[i]);
        const double wa = std::max(0.0, time[i] - before), wb = std::max(0.0, time[i + 1] - time[i]);
        const double w = wa + wb;
        auto mix = [&](const std::vector<double>& col) {
            return w > 0 ? (col[i] * wa + col[i + 1] * wb) / w : (col[i] + col[i + 1]) / 2;
        };
        const double sps = mix(samplesPerSec), steps = mix(stepsPerSec);
        samplesPerSec[out] = sps;
        stepsPerSec[out] = steps;
        loss[out] = (loss[i] + loss[i + 1]) / 2;
        time[out] = time[i + 1];
        step[out] = step[i + 1];
        samples[out] = samples[i + 1];
        cost[out] = cost[i + 1];
        warmup[out] = static_cast<char>(warmup[i] && warmup[i + 1]);
    }
    if (n % 2 == 1) { // an odd last point stays as it is
        time[out] = time[n - 1];
        step[out] = step[n - 1];
        samples[out] = samples[n - 1];
        samplesPerSec[out] = samplesPerSec[n - 1];
        stepsPerSec[out] = stepsPerSec[n - 1];
        loss[out] = loss[n - 1];
        cost[out] = cost[n - 1];
        warmup[out] = warmup[n - 1];
        ++out;
    }
    for (auto* col : {&time, &step, &samples, &samplesPerSec, &stepsPerSec, &loss, &cost}) {
        col->resize(out);
    }
    warmup.resize(out);
    stride *= 2;
    ++compactions;
}

std::optional<double> LaneHistory::medianSamplesPerSec(std::size_t window) const {
    std::vector<double> rates;
    for (std::size_t i = samplesPerSec.size(); i-- > 0 && (window == 0 || rates.size() < window);) {
        if (!warmup[i]) {
            rates.push_back(samplesPerSec[i]);
        }
    }
    if (rates.empty()) {
        return std::nullopt;
    }
    auto mid = rates.begin() + static_cast<std::ptrdiff_t>(rates.size() / 2);
    std::nth_element(rates.begin(), mid, rates.end());
    return *mid;
}

const std::vector<double>& lrColumn(const LaneHistory& h, XAxis axis) {
    switch (axis) {
    case XAxis::Step: return h.lrStep;
    case XAxis::Samples: return h.lrSamples;
    case XAxis::Cost: return h.lrCost;
    case XAxis::Time: break;
    }
    return h.lrTime;
}

const std::vector<double>& xColumn(const LaneHistory& h, XAxis axis, bool eval) {
    switch (axis) {
    case XAxis::Step: return eval ? h.evalStep : h.step;
    case XAxis::Samples: return eval ? h.evalSamples : h.samples;
    case XAxis::Cost: return eval ? h.evalCost : h.cost;
    case XAxis::Time: break;
    }
    return eval ? h.evalTime : h.time;
}

const std::vector<double>& yColumn(const LaneHistory& h, Metric metric) {
    switch (metric) {
    case Metric::SamplesPerSec:
    case Metric::TokensPerSec: return h.samplesPerSec;
    case Metric::StepsPerSec: return h.stepsPerSec;
    case Metric::Loss: return h.loss;
    case Metric::EvalLoss: return h.evalLoss;
    case Metric::Accuracy: break;
    }
    return h.evalAccuracy;
}

EvalPoints finiteEvals(std::span<const double> xs, std::span<const double> ys) {
    EvalPoints out;
    const std::size_t n = std::min(xs.size(), ys.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (std::isfinite(ys[i])) {
            out.x.push_back(xs[i]);
            out.y.push_back(ys[i]);
        }
    }
    return out;
}

QList<QPointF> decimateMinMax(std::span<const double> xs, std::span<const double> ys, double xMin, double xMax,
                              int buckets) {
    QList<QPointF> out;
    const std::size_t n = std::min(xs.size(), ys.size());
    // xs is non-decreasing (time, step and samples only grow): binary-search the window.
    const auto first = static_cast<std::size_t>(std::lower_bound(xs.begin(), xs.begin() + n, xMin) - xs.begin());
    const auto last = static_cast<std::size_t>(std::upper_bound(xs.begin(), xs.begin() + n, xMax) - xs.begin());
    if (first >= last) {
        return out;
    }
    const std::size_t count = last - first;
    if (buckets < 1 || count <= static_cast<std::size_t>(2 * buckets)) {
        out.reserve(static_cast<qsizetype>(count));
        for (std::size_t i = first; i < last; ++i) {
            out.append(QPointF(xs[i], ys[i]));
        }
        return out;
    }
    out.reserve(2 * buckets + 2);
    out.append(QPointF(xs[first], ys[first]));
    const double width = (xMax - xMin) / buckets;
    std::size_t i = first + 1;
    for (int b = 0; b < buckets && i < last - 1; ++b) {
        const double edge = b == buckets - 1 ? std::numeric_limits<double>::infinity() : xMin + width * (b + 1);
        std::size_t lo = i, hi = i;
        bool any = false;
        for (; i < last - 1 && xs[i] < edge; ++i) {
            any = true;
            if (ys[i] < ys[lo]) {
                lo = i;
            }
            if (ys[i] > ys[hi]) {
                hi = i;
            }
        }
        if (!any) {
            continue;
        }
        const auto a = std::min(lo, hi), c = std::max(lo, hi);
        out.append(QPointF(xs[a], ys[a]));
        if (c != a) {
            out.append(QPointF(xs[c], ys[c]));
        }
    }
    out.append(QPointF(xs[last - 1], ys[last - 1]));
    return out;
}

void CoarseSeries::clear() {
    m_x.clear();
    m_y.clear();
    m_covered = 0;
    m_next.reset();
}

CoarseSeries& CoarseSeries::next() {
    if (!m_next) {
        m_next = std::make_unique<CoarseSeries>();
    }
    return *m_next;
}

void CoarseSeries::extend(std::span<const double> xs, std::span<const double> ys) {
    const std::size_t n = std::min(xs.size(), ys.size());
    if (n < m_covered) {
        clear(); // the source was replaced
    }
    while (m_covered + kGroup <= n) {
        std::size_t lo = m_covered, hi = m_covered;
        for (std::size_t i = m_covered; i < m_covered + kGroup; ++i) {
            if (ys[i] < ys[lo]) {
                lo = i;
            }
            if (ys[i] > ys[hi]) {
                hi = i;
            }
        }
        const auto a = std::min(lo, hi), b = std::max(lo, hi);
        m_x.push_back(xs[a]);
        m_y.push_back(ys[a]);
        m_x.push_back(xs[b]);
        m_y.push_back(ys[b]);
        m_covered += kGroup;
    }
}

QList<QPointF> decimateLod(std::span<const double> xs, std::span<const double> ys, CoarseSeries& coarse, double xMin,
                           double xMax, int buckets) {
    const std::size_t n = std::min(xs.size(), ys.size());
    const auto first = static_cast<std::size_t>(
        std::lower_bound(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n), xMin) - xs.begin());
    const auto last = static_cast<std::size_t>(
        std::upper_bound(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(n), xMax) - xs.begin());
    // Up to 16 points per bucket, the raw points are cheap enough and exact.
    if (last <= first || last - first <= static_cast<std::size_t>(16 * std::max(1, buckets))) {
        return decimateMinMax(xs.first(n), ys.first(n), xMin, xMax, buckets);
    }
    coarse.extend(xs.first(n), ys.first(n));
    // Recurse: a level with still too many points per bucket hands over to a coarser one.
    auto out = decimateLod(coarse.x(), coarse.y(), coarse.next(), xMin, xMax, buckets);
    const std::size_t tail = coarse.covered();
    if (tail < n) {
        out.append(decimateMinMax(xs.subspan(tail, n - tail), ys.subspan(tail, n - tail), xMin, xMax, buckets));
    }
    return out;
}

std::vector<double> smoothEma(const std::vector<double>& xs, const std::vector<double>& ys, double tau) {
    if (tau <= 0 || ys.empty()) {
        return ys;
    }
    std::vector<double> out(ys.size());
    out[0] = ys[0];
    for (std::size_t i = 1; i < ys.size(); ++i) {
        const double dx = std::max(0.0, xs[i] - xs[i - 1]);
        const double alpha = 1.0 - std::exp(-dx / tau);
        out[i] = out[i - 1] + alpha * (ys[i] - out[i - 1]);
    }
    return out;
}

} // namespace devicerace::ui
