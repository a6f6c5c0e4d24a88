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
#include <QString>

#include <optional>
#include <utility>
#include <vector>

class QChart;

namespace devicerace::ui {

struct PlotLine {
    QColor color;
    double width = 1.0;      // device-independent pixels
    bool dots = false;       // draw a dot on every point (evaluations)
    QList<QPointF> points;   // chart values (x, y)
    bool marks = false;      // only x matters: a short tick at the plot's bottom per point
    bool boundaries = false; // only x matters: a dashed line across the plot per point
    bool fill = false;       // the points close a polygon filled with `color` (its alpha kept)
};

class PlotLayer : public QGraphicsObject {
    Q_OBJECT
public:
    explicit PlotLayer(QChart* chart);
    /// Replaces every line; `xMin..yMax` are the axes' ranges the values map into.
    void setLines(std::vector<PlotLine> lines, double xMin, double xMax, double yMin, double yMax);
    int pointCount() const;
    /// A vertical line at chart x `x` with a box of coloured lines of text beside it; nullopt
    /// removes it.
    void setCrosshair(std::optional<double> x, std::vector<std::pair<QString, QColor>> text = {});
    const std::vector<std::pair<QString, QColor>>& crosshairText() const { return m_crossText; }
    std::optional<double> crosshairX() const { return m_crossX; }
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
    std::optional<double> m_crossX;
    std::vector<std::pair<QString, QColor>> m_crossText;
    void paintCrosshair(QPainter* painter, const QRectF& area);
};

} // namespace devicerace::ui
