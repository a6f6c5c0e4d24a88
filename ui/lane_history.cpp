#include "lane_history.h"

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
        // A chart keeps the last finite point: intervals without a finite rate/loss are dropped.
        if (finite(s.samplesPerSec) && finite(s.stepsPerSec) && finite(s.loss)) {
            time.push_back(s.time);
            step.push_back(static_cast<double>(s.step));
            samples.push_back(static_cast<double>(s.samples));
            samplesPerSec.push_back(*s.samplesPerSec);
            stepsPerSec.push_back(*s.stepsPerSec);
            loss.push_back(*s.loss);
            warmup.push_back(s.warmup ? 1 : 0);
            if (!s.warmup) {
                recentSamplesPerSec = s.samplesPerSec;
            }
        }
        break;
    case SampleKind::Eval:
        if (finite(s.accuracy)) {
            evalTime.push_back(s.time);
            evalStep.push_back(static_cast<double>(s.step));
            evalSamples.push_back(static_cast<double>(s.samples));
            evalAccuracy.push_back(*s.accuracy);
            lastAccuracy = s.accuracy;
        }
        break;
    case SampleKind::State:
        state = s.state;
        if (!s.message.empty()) {
            message = QString::fromStdString(s.message);
        }
        break;
    }
}

const std::vector<double>& xColumn(const LaneHistory& h, XAxis axis, bool eval) {
    switch (axis) {
    case XAxis::Step: return eval ? h.evalStep : h.step;
    case XAxis::Samples: return eval ? h.evalSamples : h.samples;
    case XAxis::Time: break;
    }
    return eval ? h.evalTime : h.time;
}

const std::vector<double>& yColumn(const LaneHistory& h, Metric metric) {
    switch (metric) {
    case Metric::SamplesPerSec: return h.samplesPerSec;
    case Metric::StepsPerSec: return h.stepsPerSec;
    case Metric::Loss: return h.loss;
    case Metric::Accuracy: break;
    }
    return h.evalAccuracy;
}

QList<QPointF> decimateMinMax(const std::vector<double>& xs, const std::vector<double>& ys, double xMin, double xMax,
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
