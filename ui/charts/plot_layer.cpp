#include "plot_layer.h"

#include <QFontMetricsF>
#include <QPainter>
#include <QtCharts/QChart>
#include <QtCharts/QLegend>

namespace devicerace::ui {

PlotLayer::PlotLayer(QChart* chart) : QGraphicsObject(chart), m_chart(chart) {
    setZValue(10); // above the grid and the (empty) series
    connect(chart, &QChart::plotAreaChanged, this, [this] {
        prepareGeometryChange();
        update();
    });
}

void PlotLayer::setLines(std::vector<PlotLine> lines, double xMin, double xMax, double yMin, double yMax) {
    m_lines = std::move(lines);
    m_xMin = xMin;
    m_xMax = xMax > xMin ? xMax : xMin + 1;
    m_yMin = yMin;
    m_yMax = yMax > yMin ? yMax : yMin + 1;
    update();
}

void PlotLayer::setCrosshair(std::optional<double> x, std::vector<std::pair<QString, QColor>> text) {
    if (!x && !m_crossX) {
        return;
    }
    m_crossX = x;
    m_crossText = std::move(text);
    update();
}

void PlotLayer::paintCrosshair(QPainter* painter, const QRectF& area) {
    if (!m_crossX || *m_crossX < m_xMin || *m_crossX > m_xMax) {
        return;
    }
    const double px = area.left() + (*m_crossX - m_xMin) * area.width() / (m_xMax - m_xMin);
    painter->setRenderHint(QPainter::Antialiasing, false);
    const QColor fg = m_chart->theme() == QChart::ChartThemeDark ? QColor(230, 230, 230) : QColor(60, 60, 60);
    QPen pen(fg, 0, Qt::DashLine);
    pen.setCosmetic(true);
    painter->setPen(pen);
    painter->drawLine(QPointF(px, area.top()), QPointF(px, area.bottom()));
    if (m_crossText.empty()) {
        return;
    }
    // The values box sits right of the line, or left of it near the right edge.
    painter->setFont(m_chart->legend()->font());
    const QFontMetricsF fm(painter->font());
    double w = 0;
    for (const auto& [text, color] : m_crossText) {
        w = std::max(w, fm.horizontalAdvance(text));
    }
    const double pad = 4, h = fm.height() * static_cast<double>(m_crossText.size()) + 2 * pad;
    w += 2 * pad;
    const double left = px + 8 + w <= area.right() ? px + 8 : px - 8 - w;
    const QRectF box(left, area.top() + 4, w, h);
    const QColor bg = m_chart->theme() == QChart::ChartThemeDark ? QColor(30, 30, 34) : QColor(255, 255, 255);
    painter->setPen(QPen(fg, 0));
    painter->setBrush(bg);
    painter->drawRect(box);
    double y = box.top() + pad + fm.ascent();
    for (const auto& [text, color] : m_crossText) {
        painter->setPen(color.isValid() ? color : fg);
        painter->drawText(QPointF(box.left() + pad, y), text);
        y += fm.height();
    }
}

int PlotLayer::pointCount() const {
    int n = 0;
    for (const auto& l : m_lines) {
        n += static_cast<int>(l.points.size());
    }
    return n;
}

QRectF PlotLayer::boundingRect() const { return m_chart->plotArea().adjusted(-6, -6, 6, 6); }

void PlotLayer::paint(QPainter* painter, const QStyleOptionGraphicsItem*, QWidget*) {
    const QRectF area = m_chart->plotArea();
    if (area.isEmpty()) {
        return;
    }
    painter->save();
    // No clip needed: decimation already drops the points outside the x range.
    painter->setRenderHint(QPainter::Antialiasing);
    const double sx = area.width() / (m_xMax - m_xMin);
    const double sy = area.height() / (m_yMax - m_yMin);
    for (const auto& line : m_lines) {
        if (line.points.isEmpty()) {
            continue;
        }
        if (line.boundaries) {
            // Learning-rate schedule boundaries: dashed lines across the whole plot.
            painter->setRenderHint(QPainter::Antialiasing, false);
            QPen pen(line.color, line.width, Qt::DashLine);
            painter->setPen(pen);
            for (const auto& p : line.points) {
                const double x = area.left() + (p.x() - m_xMin) * sx;
                painter->drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
            }
            continue;
        }
        if (line.marks) {
            // Evaluations on a training chart: ticks rising from the bottom edge.
            painter->setRenderHint(QPainter::Antialiasing, false);
            painter->setPen(QPen(line.color, line.width));
            const double tick = std::max(6.0, area.height() * 0.04);
            for (const auto& p : line.points) {
                const double x = area.left() + (p.x() - m_xMin) * sx;
                painter->drawLine(QPointF(x, area.bottom()), QPointF(x, area.bottom() - tick));
            }
            continue;
        }
        m_scratch.resize(line.points.size());
        for (qsizetype i = 0; i < line.points.size(); ++i) {
            const QPointF& p = line.points[i];
            m_scratch[i] = QPointF(area.left() + (p.x() - m_xMin) * sx, area.bottom() - (p.y() - m_yMin) * sy);
        }
        if (line.fill) {
            // A band across repeats: one translucent polygon (a few hundred points) under the lines.
            painter->setRenderHint(QPainter::Antialiasing);
            painter->setPen(Qt::NoPen);
            painter->setBrush(line.color);
            painter->drawPolygon(m_scratch);
            continue;
        }
        // Thin lines go through the fast aliased 1-pixel path (antialiased wide strokes cost
        // ~15 us a point on the raster engine); only the thick smoothed lines are antialiased.
        const bool thin = line.width <= 1.0;
        painter->setRenderHint(QPainter::Antialiasing, !thin);
        QPen pen(line.color, thin ? 0.0 : line.width);
        pen.setCosmetic(thin);
        pen.setCapStyle(thin ? Qt::SquareCap : Qt::FlatCap);
        pen.setJoinStyle(Qt::BevelJoin);
        painter->setPen(pen);
        painter->setBrush(Qt::NoBrush);
        if (m_scratch.size() > 1 && thin) {
            painter->drawPolyline(m_scratch);
        } else if (m_scratch.size() > 1) {
            // A wide antialiased polyline is filled as one self-overlapping path (~30 us a
            // point); separate segments are ~20x cheaper and look the same with round caps.
            m_segments.resize(m_scratch.size() - 1);
            for (qsizetype i = 1; i < m_scratch.size(); ++i) {
                m_segments[i - 1] = QLineF(m_scratch[i - 1], m_scratch[i]);
            }
            painter->drawLines(m_segments);
        }
        // Dots mark evaluations while they are a few per chart; hundreds of them (an eval
        // every few seconds of an hours-long race) would merge into the line anyway, and each
        // antialiased dot costs ~10 us: above one per 8 pixels only the line is drawn.
        const bool sparse = static_cast<double>(m_scratch.size()) <= area.width() / 8;
        if ((line.dots && sparse) || m_scratch.size() == 1) {
            painter->setRenderHint(QPainter::Antialiasing);
            painter->setBrush(line.color);
            const double r = std::max(2.5, line.width * 1.6);
            for (const auto& p : m_scratch) {
                painter->drawEllipse(p, r, r);
            }
        }
    }
    paintCrosshair(painter, area);
    painter->restore();
}

} // namespace devicerace::ui
