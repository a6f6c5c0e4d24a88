#include "safe_chart_view.h"

#include <QElapsedTimer>
#include <QMouseEvent>
#include <QWheelEvent>

#include <cmath>

namespace devicerace::ui {

SafeChartView::SafeChartView(QChart* chart, QWidget* parent) : QChartView(chart, parent) {
    setMouseTracking(true); // hover crosshair without a button pressed
}

void SafeChartView::mouseMoveEvent(QMouseEvent* event) {
    if (chart()) {
        const QPointF scene = mapToScene(event->position().toPoint());
        const QPointF local = chart()->mapFromScene(scene);
        if (chart()->plotArea().contains(local)) {
            Q_EMIT hovered(chart()->mapToValue(local).x());
        } else {
            Q_EMIT hoverLeft();
        }
    }
    QChartView::mouseMoveEvent(event);
}

void SafeChartView::leaveEvent(QEvent* event) {
    Q_EMIT hoverLeft();
    QChartView::leaveEvent(event);
}

void SafeChartView::mousePressEvent(QMouseEvent* event) {
    if (itemAt(event->position().toPoint()) == nullptr) {
        QGraphicsView::mousePressEvent(event); // QTBUG-118669: QChartView crashes here
        return;
    }
    if (event->button() == Qt::RightButton) {
        event->accept(); // right-click resets the zoom of every chart (on release)
        return;
    }
    QChartView::mousePressEvent(event);
}

void SafeChartView::mouseReleaseEvent(QMouseEvent* event) {
    if (event->button() == Qt::RightButton) {
        Q_EMIT resetZoomRequested();
        event->accept();
        return;
    }
    QChartView::mouseReleaseEvent(event);
}

void SafeChartView::wheelEvent(QWheelEvent* event) {
    if (!chart()) {
        return;
    }
    const double steps = event->angleDelta().y() / 120.0;
    if (steps == 0) {
        return;
    }
    if (event->modifiers() & Qt::ShiftModifier) {
        Q_EMIT wheelPan(-0.1 * steps);
    } else {
        const QPointF value = chart()->mapToValue(chart()->mapFromScene(mapToScene(event->position().toPoint())));
        Q_EMIT wheelZoom(std::pow(0.8, steps), value.x());
    }
    event->accept();
}

} // namespace devicerace::ui

namespace devicerace::ui {

void SafeChartView::paintEvent(QPaintEvent* event) {
    QElapsedTimer clock;
    clock.start();
    QChartView::paintEvent(event);
    m_lastPaintMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    ++m_paints;
}

} // namespace devicerace::ui
