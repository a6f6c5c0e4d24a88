#pragma once
// A QChartView that survives Qt 6.4's traps (RELIABILITY.md): a click on an empty area
// (QTBUG-118669) no longer reaches QChartView, and wheel/right-click drive the linked zoom.
// GUI thread only.
#include <QtCharts/QChartView>

#include <cstdint>

namespace devicerace::ui {

class SafeChartView : public QChartView {
    Q_OBJECT
public:
    SafeChartView(QChart* chart, QWidget* parent = nullptr);

    /// Milliseconds the last paint took (the dashboard paces chart refreshes with it).
    double lastPaintMs() const { return m_lastPaintMs; }
    /// Paints so far (benchmarks count the paints a tick costs).
    std::uint64_t paintCount() const { return m_paints; }

Q_SIGNALS:
    /// Wheel: factor < 1 zooms in around `centerX` (chart x value); Shift+wheel pans by `panFraction`.
    void wheelZoom(double factor, double centerX);
    void wheelPan(double panFraction);
    void resetZoomRequested();
    /// The pointer is over the plot at chart x value `x` (crosshair), or has left it.
    void hovered(double x);
    void hoverLeft();

protected:
    void mousePressEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;

private:
    double m_lastPaintMs = 0;
    std::uint64_t m_paints = 0;
};

} // namespace devicerace::ui
