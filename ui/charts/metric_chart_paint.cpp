#include "metric_chart.h"

#include <QGraphicsTextItem>
#include <QtCharts/QCategoryAxis>
#include <QtCharts/QChart>

#include <algorithm>
#include <cmath>

#include "plot_layer.h"

// MetricChart's hand-over to the plot layer and the static-item cache (split from
// metric_chart.cpp).
namespace devicerace::ui {

namespace {
// Smallest throughput a log axis shows (samples/s): keeps log10 finite for a stalled lane.
constexpr double kLogFloor = 1e-3;
} // namespace

void MetricChart::cacheStaticItems() {
    // Grid, axes, labels, titles and the background change only when the ticks or the size
    // do: drawing them from pixmaps leaves a tick's paint mostly to the data lines.
    const auto top = m_chart->childItems();
    std::vector<QGraphicsItem*> todo(top.begin(), top.end());
    while (!todo.empty()) {
        QGraphicsItem* item = todo.back();
        todo.pop_back();
        if (item == m_layer) {
            continue;
        }
        // Text items are left alone: QtCharts moves and rotates its titles after layout, and a
        // cached copy of them can come out blank.
        if (dynamic_cast<QGraphicsTextItem*>(item) == nullptr &&
            item->cacheMode() != QGraphicsItem::DeviceCoordinateCache) {
            item->setCacheMode(QGraphicsItem::DeviceCoordinateCache);
        }
        const auto children = item->childItems();
        todo.insert(todo.end(), children.begin(), children.end());
    }
}

void MetricChart::pushLines() {
    // A log axis shows log10 of the values (the layer maps linearly).
    const bool log = m_log && isRate(m_metric);
    auto shown = [log](const QList<QPointF>& pts) {
        if (!log) {
            return pts;
        }
        QList<QPointF> out(pts.size());
        for (qsizetype i = 0; i < pts.size(); ++i) {
            out[i] = QPointF(pts[i].x(), std::log10(std::max(kLogFloor, pts[i].y())));
        }
        return out;
    };
    std::vector<PlotLine> lines;
    lines.reserve(m_series.size() * 4);
    // Bands across repeats first, under every lane's lines.
    const bool dark = m_chart->theme() == QChart::ChartThemeDark;
    for (const auto& s : m_series) {
        QColor tint = s.color;
        tint.setAlphaF(dark ? 0.30f : 0.22f);
        for (const auto& band : s.bands) {
            PlotLine fill{tint, 0.0, false, shown(band)};
            fill.fill = true;
            lines.push_back(std::move(fill));
        }
    }
    for (const auto& s : m_series) {
        // Opaque blends of the lane colour with the background: alpha-blended lines take a
        // much slower raster path.
        const QColor bg = m_chart->theme() == QChart::ChartThemeDark ? QColor(40, 40, 44) : QColor(255, 255, 255);
        const QColor faint =
            QColor::fromRgbF(0.35f * s.color.redF() + 0.65f * bg.redF(), 0.35f * s.color.greenF() + 0.65f * bg.greenF(),
                             0.35f * s.color.blueF() + 0.65f * bg.blueF());
        if (!s.warm.isEmpty()) {
            lines.push_back({QColor(150, 150, 150), 1.0, false, shown(s.warm)});
        }
        if (!s.raw.isEmpty()) {
            lines.push_back({faint, 1.0, false, shown(s.raw)});
        }
        lines.push_back({s.color, 2.5 * m_fontScale, isEval(m_metric), shown(s.smooth)});
        if (!s.lrMarks.isEmpty()) {
            PlotLine bounds{s.color, 1.0 * m_fontScale, false, s.lrMarks};
            bounds.boundaries = true;
            lines.push_back(std::move(bounds));
        }
        if (!s.evals.isEmpty() && !isEval(m_metric)) {
            PlotLine marks{s.color, 1.5 * m_fontScale, false, s.evals};
            marks.marks = true;
            lines.push_back(std::move(marks));
        }
    }
    m_layer->setLines(std::move(lines), m_x->min(), m_x->max(), m_y->min(), m_y->max());
}

} // namespace devicerace::ui
