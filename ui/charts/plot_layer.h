#pragma once
// Draws the data lines of a chart directly with QPainter::drawPolyline, on top of a QChart
// that supplies axes, grid, title and legend. QLineSeries rebuilds a stroked hover shape for
// every point on each replace() (atan2/hypot per point in Qt 6.4): 8 lanes x 2,000 points
// took ~200 ms per tick; this layer keeps a tick at a few ms. GUI thread only.
#include <QColor>
#include <QGraphicsObject>
#include <QList>
#include <QLineF>
#include <QPointF>

#include <vector>

class QChart;

namespace devicerace::ui {

struct PlotLine {
    QColor color;
    double width = 1.0;             // device-independent pixels
    bool dots = false;              // draw a dot on every point (evaluations)
    QList<QPointF> points;          // chart values (x, y)
};

class PlotLayer : public QGraphicsObject {
    Q_OBJECT
public:
    explicit PlotLayer(QChart* chart);
    /// Replaces every line; `xMin..yMax` are the axes' ranges the values map into.
    void setLines(std::vector<PlotLine> lines, double xMin, double xMax, double yMin, double yMax);
    int pointCount() const;
    /// The lines as last handed over (chart values; tests).
    const std::vector<PlotLine>& lines() const { return m_lines; }
    QRectF boundingRect() const override;
    void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

private:
    QChart* m_chart;
    std::vector<PlotLine> m_lines;
    double m_xMin = 0, m_xMax = 1, m_yMin = 0, m_yMax = 1;
    QPolygonF m_scratch; // reused between paints
    QList<QLineF> m_segments;
};

} // namespace devicerace::ui
