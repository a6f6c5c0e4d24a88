#include "metric_chart.h"

#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QFontMetricsF>
#include <QGraphicsTextItem>
#include <QTimer>
#include <QtCharts/QCategoryAxis>

#include <algorithm>
#include <cmath>
#include <limits>

#include "plot_layer.h"
#include "safe_chart_view.h"
#include "tick_axis.h"

namespace devicerace::ui {

namespace {

// Smoothing time constant at full slider: a quarter of the data's x span, rounded to a
// power of two so it (and the cached smoothed line) changes only when the span doubles.
double tauFor(double amount, double span) {
    if (amount <= 0 || span <= 0) {
        return 0;
    }
    return amount * amount * std::exp2(std::round(std::log2(span / 4.0)));
}

QString axisTitle(XAxis axis, TimeStyle style) {
    switch (axis) {
    case XAxis::Step: return QObject::tr("step");
    case XAxis::Samples: return QObject::tr("samples seen");
    case XAxis::Cost: return QObject::tr("cost so far (USD, lanes with $/hour)");
    case XAxis::Time: break;
    }
    return QObject::tr("time since lane start (%1)").arg(timeUnit(style));
}

QCategoryAxis* newAxis(QObject* parent) {
    auto* axis = new QCategoryAxis(parent);
    axis->setLabelsPosition(QCategoryAxis::AxisLabelsPositionOnValue);
    return axis;
}

QString metricTitle(Metric m) {
    switch (m) {
    case Metric::SamplesPerSec: return QObject::tr("samples/s");
    case Metric::TokensPerSec: return QObject::tr("tokens/s");
    case Metric::StepsPerSec: return QObject::tr("steps/s");
    case Metric::Loss: return QObject::tr("training loss");
    case Metric::EvalLoss: return QObject::tr("validation loss");
    case Metric::Accuracy: break;
    }
    return QObject::tr("test accuracy");
}

} // namespace

MetricChart::MetricChart(const QString& title, Metric metric, QWidget* parent)
    : QWidget(parent), m_metric(metric), m_title(title) {
    m_chart = new QChart();
    m_chart->legend()->setAlignment(Qt::AlignBottom);
    m_chart->setMargins(QMargins(4, 4, 4, 4));
    m_x = newAxis(m_chart);
    m_y = newAxis(m_chart);
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    m_targetSeries = new QLineSeries(m_chart);
    QPen pen(QColor(120, 120, 120));
    pen.setStyle(Qt::DashLine);
    pen.setWidthF(1.5);
    m_targetSeries->setPen(pen);
    m_chart->addSeries(m_targetSeries);
    m_targetSeries->attachAxis(m_x);
    m_targetSeries->attachAxis(m_y);
    m_chart->legend()->markers(m_targetSeries).constFirst()->setVisible(false);

    m_layer = new PlotLayer(m_chart);
    m_view = new SafeChartView(m_chart, this);
    // Grid and axes are straight lines: no antialiasing needed (the plot layer sets its own).
    m_view->setRenderHint(QPainter::Antialiasing, false);
    m_view->setViewportUpdateMode(QGraphicsView::MinimalViewportUpdate);
    m_view->setRubberBand(QChartView::HorizontalRubberBand);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_view);

    connect(m_x, &QValueAxis::rangeChanged, this, [this](qreal lo, qreal hi) {
        if (m_settingRange) {
            return;
        }
        m_zoomed = true; // the user zoomed (rubber band) — tell the linked charts
        Q_EMIT xRangeChanged(lo, hi);
        // Redraw the lines for the new range once QChart has finished zooming.
        QTimer::singleShot(0, this, [this] {
            if (m_last) {
                refresh(*m_last);
            }
        });
    });
    connect(m_view, &SafeChartView::resetZoomRequested, this, &MetricChart::resetZoomRequested);
    connect(m_view, &SafeChartView::hovered, this, [this](double x) { Q_EMIT hoveredAt(x); });
    connect(m_view, &SafeChartView::hoverLeft, this, [this] { Q_EMIT hoveredAt(std::nullopt); });
    connect(m_view, &SafeChartView::wheelZoom, this, [this](double factor, double center) {
        auto [lo, hi] = xRange();
        const double nlo = center - (center - lo) * factor, nhi = center + (hi - center) * factor;
        setXRange(std::max(0.0, nlo), nhi);
        Q_EMIT xRangeChanged(m_x->min(), m_x->max());
    });
    connect(m_view, &SafeChartView::wheelPan, this, [this](double fraction) {
        auto [lo, hi] = xRange();
        const double shift = (hi - lo) * fraction;
        setXRange(lo + shift, hi + shift);
        Q_EMIT xRangeChanged(m_x->min(), m_x->max());
    });
    updateTitles();
}

void MetricChart::updateTitles() {
    m_chart->setTitle(m_title);
    m_x->setTitleText(axisTitle(m_axis, m_timeStyle));
    const bool rate = isRate(m_metric);
    m_y->setTitleText((m_yTitle.isEmpty() ? metricTitle(m_metric) : m_yTitle) +
                      (rate && m_log ? tr(" (log)") : QString()));
}

void MetricChart::resetCaches() {
    for (auto& s : m_series) {
        s.smoothedTau = -1;
        s.smoothed.clear();
    }
    m_bandSmoothed.clear();
    updateTitles();
    if (m_last) {
        refresh(*m_last);
    }
}

void MetricChart::setTitle(const QString& title, const QString& yTitle) {
    m_title = title;
    m_yTitle = yTitle;
    updateTitles();
}

void MetricChart::setTokensPerSample(std::int64_t tokens) {
    m_tokensPerSample = tokens;
    resetCaches();
}

void MetricChart::setMetric(Metric metric) {
    m_metric = metric;
    resetCaches();
}

void MetricChart::setXAxis(XAxis axis) {
    m_axis = axis;
    m_zoomed = false;
    m_sharedXMax = 0; // the shared range was in the old units: own data until the dashboard's
    resetCaches();
}

void MetricChart::setSmoothing(double amount) {
    m_smoothing = std::clamp(amount, 0.0, 1.0);
    if (m_last) {
        refresh(*m_last);
    }
}

void MetricChart::setTarget(std::optional<double> target) { m_target = target; }

void MetricChart::setDark(bool dark) {
    m_chart->setTheme(dark ? QChart::ChartThemeDark : QChart::ChartThemeLight);
    // The theme resets series pens: give the legend entries their lane colours back.
    for (auto& s : m_series) {
        s.legend->setPen(QPen(s.color, 2.5 * m_fontScale));
    }
    pushLines();
    QPen pen(dark ? QColor(200, 200, 200) : QColor(110, 110, 110));
    pen.setStyle(Qt::DashLine);
    pen.setWidthF(1.5);
    m_targetSeries->setPen(pen);
    setFontScale(m_fontScale);
}

void MetricChart::setFontScale(double scale) {
    m_fontScale = scale;
    QFont f = font();
    f.setPointSizeF(f.pointSizeF() * scale);
    m_x->setLabelsFont(f);
    m_y->setLabelsFont(f);
    m_x->setTitleFont(f);
    m_y->setTitleFont(f);
    m_chart->legend()->setFont(f);
    QFont title = f;
    title.setBold(true);
    title.setPointSizeF(f.pointSizeF() * 1.2);
    m_chart->setTitleFont(title);
}

int MetricChart::readableHeight(bool withLegend) const {
    // The title (1.2x), the x tick labels and the x title take about five lines with the chart's
    // margins (72 px at 1280x720, a 14 px line); the plot is at least as tall as its y title is
    // long, or that title elides ("samples/s (log)" at presentation's 2x fonts: ~200 px).
    const QFontMetrics fm(m_chart->legend()->font());
    const int line = fm.height();
    const int plot = std::max(kReadablePlot, fm.horizontalAdvance(m_y->titleText() + QStringLiteral(" (log)")) + line);
    return plot + 5 * line + (withLegend ? 2 * line : 0);
}

bool MetricChart::legendFits(int width) const {
    const QFontMetrics fm(m_chart->legend()->font());
    int need = 0;
    for (const auto& s : m_series) {
        // A marker (a line's height), its gap and the name, then QtCharts' spacing between entries.
        need += fm.height() + fm.horizontalAdvance(s.legend->name()) + 2 * fm.height();
    }
    return need <= width - 2 * fm.height();
}

void MetricChart::setLanes(const std::vector<LaneInfo>& lanes) {
    for (auto& s : m_series) {
        m_chart->removeSeries(s.legend);
        delete s.legend;
    }
    m_series.clear();
    m_last = nullptr;
    m_zoomed = false;
    for (const auto& lane : lanes) {
        LaneSeries s;
        s.color = lane.color;
        s.legend = new QLineSeries();
        s.legend->setName(lane.name);
        m_chart->addSeries(s.legend);
        s.legend->attachAxis(m_x);
        s.legend->attachAxis(m_y);
        m_series.push_back(std::move(s));
    }
    setDark(m_chart->theme() == QChart::ChartThemeDark);
}

void MetricChart::refresh(const std::vector<LaneHistory>& histories) {
    m_last = &histories;
    const bool eval = isEval(m_metric);
    // Train and evaluation points both count, so every chart of a race shares one x range.
    double xMax = 0;
    for (const auto& h : histories) {
        for (bool e : {false, true}) {
            if (const auto& xs = xColumn(h, m_axis, e); !xs.empty()) {
                xMax = std::max(xMax, xs.back());
            }
        }
    }
    AxisTicks xt;
    if (!m_zoomed && m_sharedXMax <= 0) {
        xt = autoXTicks(xMax);
    } else {
        // A zoomed window, or the dashboard's shared range: keep it, round ticks inside.
        const double zlo = m_zoomed ? m_x->min() : 0.0, zhi = m_zoomed ? m_x->max() : m_sharedXMax;
        const bool time = m_axis == XAxis::Time;
        xt = fitTicks([&](int n) { return time ? timeTicks(zlo, zhi, n, false) : niceTicks(zlo, zhi, n, false); },
                      m_x->labelsFont(), plotLength(true), true);
    }
    m_timeStyle = timeStyleOf(xt);
    if (m_axis == XAxis::Cost) {
        for (auto& label : xt.labels) {
            label.prepend(QLatin1Char('$'));
        }
    }
    // QtCharts centres the last x label on the plot's right edge: leave room for its half.
    const QFontMetricsF fm(m_x->labelsFont());
    const int right =
        static_cast<int>(std::ceil(fm.horizontalAdvance(xt.labels.isEmpty() ? QString() : xt.labels.last()) / 2)) + 6;
    if (m_chart->margins().right() != right) {
        m_chart->setMargins(QMargins(4, 4, right, 4));
    }
    m_settingRange = true;
    applyTicks(m_x, xt);
    m_settingRange = false;
    m_x->setTitleText(axisTitle(m_axis, m_timeStyle));
    const double lo = m_x->min(), hi = m_x->max();
    const int buckets = std::max(100, static_cast<int>(m_chart->plotArea().width()));
    const double tau = tauFor(m_smoothing, xMax);
    double yMin = std::numeric_limits<double>::infinity(), yMax = -yMin;
    auto grow = [&](const QList<QPointF>& pts) {
        for (const auto& p : pts) {
            yMin = std::min(yMin, p.y());
            yMax = std::max(yMax, p.y());
        }
    };
    // tokens/s: the samples/s column times the tokens per example, applied to the few points
    // drawn (decimation and the EMA commute with a positive factor; the cached coarse levels
    // and smoothed values stay in samples/s).
    const double yScale = m_metric == Metric::TokensPerSec ? static_cast<double>(m_tokensPerSample) : 1.0;
    auto scaled = [yScale](QList<QPointF> points) {
        if (yScale != 1.0) {
            for (auto& p : points) {
                p.setY(p.y() * yScale);
            }
        }
        return points;
    };
    for (std::size_t i = 0; i < m_series.size() && i < histories.size(); ++i) {
        auto& s = m_series[i];
        const auto& h = histories[i];
        const auto& xs = xColumn(h, m_axis, eval);
        const auto& ys = yColumn(h, m_metric);
        if (m_axis == XAxis::Cost && !h.costPerHour) {
            s.warm.clear();
            s.raw.clear();
            s.smooth.clear();
            s.lrMarks.clear();
            s.bands.clear();
            continue;
        }
        // Where the learning-rate schedule stepped: dashed lines on every chart.
        s.lrMarks.clear();
        for (double lx : lrColumn(h, m_axis)) {
            if (lx >= lo && lx <= hi) {
                s.lrMarks.append(QPointF(lx, 0));
            }
        }
        if (eval) {
            const auto points = finiteEvals(xs, ys);
            s.smooth = decimateMinMax(points.x, points.y, lo, hi, buckets);
            grow(s.smooth);
            updateBand(s, i, {points.x, points.y}, lo, hi, std::max(50, buckets / 6), 0, yScale);
            s.raw.clear();
            s.warm.clear();
            continue;
        }
        // Where the lane evaluated (its clock paused): marked along the bottom of the plot.
        s.evals.clear();
        for (double ex : xColumn(h, m_axis, true)) {
            if (ex >= lo && ex <= hi) {
                s.evals.append(QPointF(ex, 0));
            }
        }
        // Warm-up intervals (the first few) are drawn grey and kept out of the smoothed line.
        std::size_t k = 0;
        while (k < h.warmup.size() && h.warmup[k]) {
            ++k;
        }
        const std::size_t n = std::min(xs.size(), ys.size());
        k = std::min(k, n);
        const std::span<const double> allX(xs.data(), n), allY(ys.data(), n);
        const std::size_t warmEnd = std::min(k + 1, n);
        s.warm = scaled(decimateMinMax(allX.first(warmEnd), allY.first(warmEnd), lo, hi, buckets));
        grow(s.warm);
        if (s.compactions != h.compactions) { // the history merged its points: rebuild from them
            s.compactions = h.compactions;
            s.rawCoarse.clear();
            s.smoothCoarse.clear();
            s.smoothed.clear();
        }
        if (s.coarseFrom != k || s.smoothedTau < 0) {
            s.rawCoarse.clear();
            s.smoothCoarse.clear();
            s.coarseFrom = k;
        }
        const auto rx = allX.subspan(k), ry = allY.subspan(k);
        // Min/max per 2-pixel bucket: about 1 point per pixel, every spike kept.
        s.raw = scaled(decimateLod(rx, ry, s.rawCoarse, lo, hi, std::max(50, buckets / 2)));
        grow(s.raw);
        if (tau <= 0) {
            s.smooth = s.raw;
            s.raw.clear();
            s.smoothedTau = 0;
            updateBand(s, i, {rx, ry}, lo, hi, std::max(50, buckets / 6), 0, yScale);
            continue;
        }
        // Extend the cached EMA over the new points only.
        if (s.smoothedTau != tau || s.smoothedFrom != k || s.smoothed.size() > ry.size()) {
            s.smoothed.clear();
            s.smoothCoarse.clear();
            s.smoothedTau = tau;
            s.smoothedFrom = k;
        }
        for (std::size_t j = s.smoothed.size(); j < ry.size(); ++j) {
            if (j == 0) {
                s.smoothed.push_back(ry[0]);
                continue;
            }
            const double alpha = 1.0 - std::exp(-std::max(0.0, rx[j] - rx[j - 1]) / tau);
            s.smoothed.push_back(s.smoothed[j - 1] + alpha * (ry[j] - s.smoothed[j - 1]));
        }
        // The smoothed line has no spikes to keep: a point per ~3 pixels draws it faithfully.
        s.smooth = scaled(decimateLod(rx, s.smoothed, s.smoothCoarse, lo, hi, std::max(50, buckets / 6)));
        updateBand(s, i, {rx, s.smoothed}, lo, hi, std::max(50, buckets / 6), tau, yScale);
    }
    for (const auto& s : m_series) {
        for (const auto& band : s.bands) {
            grow(band);
        }
    }
    if (m_target && eval) {
        yMin = std::min(yMin, *m_target);
        yMax = std::max(yMax, *m_target);
        m_targetSeries->replace(QList<QPointF>{{lo, *m_target}, {hi, *m_target}});
    } else {
        m_targetSeries->clear();
    }
    applyYTicks(yMin, yMax);
    pushLines();
    cacheStaticItems();
    if (auto x = m_layer->crosshairX()) {
        showCrosshair(x); // the values under a resting pointer follow the new data
    }
}

void MetricChart::applyRange(double lo, double hi) {
    if (!(hi > lo)) {
        hi = lo + 1;
    }
    m_settingRange = true;
    m_x->setRange(lo, hi);
    m_settingRange = false;
}

void MetricChart::setXRange(double lo, double hi) {
    m_zoomed = true;
    applyRange(lo, hi);
    if (m_last) {
        refresh(*m_last);
    }
}

void MetricChart::resetZoom() {
    m_zoomed = false;
    if (m_last) {
        refresh(*m_last);
    }
}

std::pair<double, double> MetricChart::xRange() const { return {m_x->min(), m_x->max()}; }

int MetricChart::pointCount() const { return m_layer->pointCount(); }

} // namespace devicerace::ui
