#include "metric_chart.h"

#include <deque>

// MetricChart's bands across repeats (split from metric_chart.cpp).
namespace devicerace::ui {

void MetricChart::setBandSources(BandSources sources) {
    if (sources.generation != m_bandSources.generation) {
        m_bandSmoothed.clear();
    }
    m_bandSources = std::move(sources);
}

std::vector<QList<QPointF>> MetricChart::bands(std::size_t lane) const {
    return lane < m_series.size() ? m_series[lane].bands : std::vector<QList<QPointF>>{};
}

void MetricChart::updateBand(LaneSeries& s, std::size_t lane, BandCurve own, double lo, double hi, int points,
                             double tau, double yScale) {
    s.bands.clear();
    if (lane >= m_bandSources.perLane.size() || m_bandSources.perLane[lane].empty()) {
        return;
    }
    if (tau != m_bandTau) {
        m_bandSmoothed.clear();
        m_bandTau = tau;
    }
    const bool eval = isEval(m_metric);
    std::vector<BandCurve> curves;
    std::deque<EvalPoints> evalPoints; // the other lanes' evaluations that have the figure (kept for the spans)
    if (!own.x.empty()) {
        curves.push_back(own);
    }
    for (const LaneHistory* other : m_bandSources.perLane[lane]) {
        if (m_axis == XAxis::Cost && !other->costPerHour) {
            continue;
        }
        const auto& xs = xColumn(*other, m_axis, eval);
        const auto& ys = yColumn(*other, m_metric);
        const std::size_t n = std::min(xs.size(), ys.size());
        if (eval) {
            const auto& points = evalPoints.emplace_back(
                finiteEvals(std::span<const double>(xs.data(), n), std::span<const double>(ys.data(), n)));
            curves.push_back({points.x, points.y});
            continue;
        }
        // Train curves as the line draws them: after the warm-up, smoothed alike.
        std::size_t k = 0;
        while (k < other->warmup.size() && other->warmup[k]) {
            ++k;
        }
        k = std::min(k, n);
        const std::span<const double> rx(xs.data() + k, n - k), ry(ys.data() + k, n - k);
        if (tau <= 0) {
            curves.push_back({rx, ry});
            continue;
        }
        auto [it, fresh] = m_bandSmoothed.try_emplace(other);
        if (fresh) {
            it->second =
                smoothEma(std::vector<double>(rx.begin(), rx.end()), std::vector<double>(ry.begin(), ry.end()), tau);
        }
        curves.push_back({rx, it->second});
    }
    s.bands = envelopeBands(curves, lo, hi, points);
    if (yScale != 1.0) {
        for (auto& band : s.bands) {
            for (auto& p : band) {
                p.setY(p.y() * yScale);
            }
        }
    }
}

} // namespace devicerace::ui
