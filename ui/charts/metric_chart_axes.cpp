#include "metric_chart.h"

#include <QtCharts/QCategoryAxis>
#include <QtCharts/QChart>
#include <QtCharts/QLineSeries>

#include <algorithm>
#include <cmath>

#include "palette.h"
#include "plot_layer.h"
#include "safe_chart_view.h"
#include "tick_axis.h"

// MetricChart's axes: log scale, fitted ticks, labels (split from metric_chart.cpp).
namespace devicerace::ui {

namespace {
// Smallest throughput a log axis shows (samples/s): keeps log10 finite for a stalled lane.
constexpr double kLogFloor = 1e-3;
} // namespace

void MetricChart::setLogScale(bool on) {
    if (on == m_log) {
        return;
    }
    m_log = on;
    updateTitles();
    if (m_last) {
        refresh(*m_last);
    }
}

double MetricChart::plotLength(bool horizontal) const {
    // Before the first layout the plot area is empty: estimate it from the view.
    const QRectF area = m_chart->plotArea();
    if (horizontal) {
        return area.width() > 20 ? area.width() : std::max(100.0, m_view->width() - 90.0);
    }
    return area.height() > 20 ? area.height() : std::max(60.0, m_view->height() - 120.0);
}

AxisTicks MetricChart::autoXTicks(double xMax) const {
    const double hi = xMax > 0 ? xMax : 1;
    const bool time = m_axis == XAxis::Time;
    return fitTicks([&](int n) { return time ? timeTicks(0, hi, n) : niceTicks(0, hi, n); }, m_x->labelsFont(),
                    plotLength(true), true);
}

void MetricChart::showCrosshair(std::optional<double> x) {
    if (!x) {
        m_layer->setCrosshair(std::nullopt);
        return;
    }
    std::vector<std::pair<QString, QColor>> text;
    text.emplace_back(m_axis == XAxis::Time ? formatTime(*x, m_timeStyle, m_timeStyle == TimeStyle::Seconds ? 1 : 0)
                                            : formatNumber(*x, 0),
                      QColor());
    const QColor bg = m_chart->theme() == QChart::ChartThemeDark ? QColor(30, 30, 34) : QColor(255, 255, 255);
    const bool rate = isRate(m_metric);
    for (const auto& s : m_series) {
        // The drawn (smoothed) line's point nearest to x; accuracy: the last evaluation up to x.
        const auto& pts = s.smooth;
        auto it = std::lower_bound(pts.begin(), pts.end(), *x, [](const QPointF& p, double v) { return p.x() < v; });
        if (isEval(m_metric)) {
            if (it == pts.end() || it->x() > *x) {
                if (it == pts.begin()) {
                    continue;
                }
                --it;
            }
        } else if (it == pts.end()) {
            continue; // the lane has no data this far right
        } else if (it != pts.begin() && std::abs(std::prev(it)->x() - *x) < std::abs(it->x() - *x)) {
            --it;
        }
        if (it == pts.end() || (!isEval(m_metric) && it == pts.begin() && it->x() > *x)) {
            continue;
        }
        const double v = it->y();
        const QString value = rate ? formatNumber(v, v < 100 ? 1 : 0) : formatNumber(v, 3);
        text.emplace_back(s.legend->name() + QStringLiteral("  ") + value, readableOn(s.color, bg));
    }
    m_layer->setCrosshair(x, std::move(text));
}

QStringList MetricChart::xLabels() const { return m_x->categoriesLabels(); }
QStringList MetricChart::yLabels() const { return m_y->categoriesLabels(); }
void MetricChart::applyYTicks(double yMin, double yMax) {
    const bool empty = !std::isfinite(yMin);
    const bool rate = isRate(m_metric);
    const double length = plotLength(false);
    const QFont font = m_y->labelsFont();
    AxisTicks yt;
    if (rate && m_log && !empty) {
        yt = fitTicks([&](int n) { return logTicks(std::max(kLogFloor, yMin), std::max(kLogFloor, yMax), n); }, font,
                      length, false);
    } else if (m_metric == Metric::Accuracy) {
        // Accuracy lives in [0, 1]; a small margin below the lowest point, the target on a gridline.
        const double lo = empty ? 0.0 : std::max(0.0, yMin - 0.02);
        const double hi = empty ? 1.0 : std::min(1.0, yMax + 0.01);
        yt = fitTicks([&](int n) { return niceTicks(lo, hi, n, true, m_target); }, font, length, false);
    } else if (empty) {
        yt = fitTicks([](int n) { return niceTicks(0, 1, n); }, font, length, false);
    } else {
        // Throughput from 0 (speed reads against zero); loss from a little below its minimum.
        const double pad = (yMax - yMin) * 0.05;
        const double lo = rate ? 0.0 : std::max(0.0, yMin - pad);
        yt = fitTicks([&](int n) { return niceTicks(lo, yMax + pad, n); }, font, length, false);
    }
    applyTicks(m_y, yt);
}

} // namespace devicerace::ui
