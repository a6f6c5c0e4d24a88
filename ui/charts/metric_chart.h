#pragma once
// One live chart of one metric for every lane: raw points (thin), a time-weighted smoothed
// line (thick), warm-up greyed, and an optional target line. The only place QtCharts is
// used, so the chart library can be swapped behind it. GUI thread only.
#include <QWidget>

#include <map>
#include <optional>
#include <vector>

#include "axis_ticks.h"
#include "model/lane_history.h"
#include "model/lane_info.h"
#include "repeat_band.h"

class QCategoryAxis;
class QChart;
class QLineSeries;

namespace devicerace::ui {

class PlotLayer;
class SafeChartView;

class MetricChart : public QWidget {
    Q_OBJECT
public:
    MetricChart(const QString& title, Metric metric, QWidget* parent = nullptr);

    void setMetric(Metric metric);
    Metric metric() const { return m_metric; }
    /// Language models: Metric::TokensPerSec draws samples/s times this.
    void setTokensPerSample(std::int64_t tokens);
    /// The chart's title, and the y axis's ("" : the metric's own).
    void setTitle(const QString& title, const QString& yTitle = {});
    void setXAxis(XAxis axis);
    /// 0 = raw only; up to 1 = heavy smoothing (tau as a fraction of the x span).
    void setSmoothing(double amount);
    void setTarget(std::optional<double> target);
    void setDark(bool dark);
    void setFontScale(double scale);
    /// The height under which its plot would fall below ~130 px and its ticks and axis titles
    /// elide, with or without its legend row, at the current fonts.
    int readableHeight(bool withLegend) const;
    /// Whether every lane's legend entry fits one row of a chart `width` px wide unelided.
    bool legendFits(int width) const;
    void setLanes(const std::vector<LaneInfo>& lanes);
    /// Logarithmic y axis (throughput races of 10x and more).
    void setLogScale(bool on);
    bool logScale() const { return m_log; }
    /// Re-decimates every series from the histories (one replace() per series).
    void refresh(const std::vector<LaneHistory>& histories);
    /// Each lane's other repeats: from the next refresh() on, a lane with at least two curves
    /// (its own and these) draws the band between their lowest and highest, in its colour.
    void setBandSources(BandSources sources);
    /// A lane's band polygons as last computed (chart values; tests).
    std::vector<QList<QPointF>> bands(std::size_t lane) const;

    /// The x ticks this chart would show for data up to `xMax` (auto range, fitted to its width).
    AxisTicks autoXTicks(double xMax) const;
    /// The auto (unzoomed) x range shared by every chart of the dashboard; 0 = own data only.
    void setSharedXMax(double hi) { m_sharedXMax = hi; }
    /// The tick labels on screen (tests): x axis, y axis.
    QStringList xLabels() const;
    QStringList yLabels() const;

    /// Linked zoom: show [lo, hi] on the x axis (stops following new data until reset).
    void setXRange(double lo, double hi);
    void resetZoom();
    bool zoomed() const { return m_zoomed; }
    std::pair<double, double> xRange() const;
    int pointCount() const; // points currently handed to series (tests, benchmarks)
    PlotLayer* plotLayer() const { return m_layer; }
    QChart* chart() const { return m_chart; }
    SafeChartView* view() const { return m_view; }

    /// The hover crosshair at chart x `x` with each lane's (smoothed) value there; nullopt hides it.
    void showCrosshair(std::optional<double> x);

Q_SIGNALS:
    void xRangeChanged(double lo, double hi);
    /// The pointer moved over this chart's plot (x in chart values) or left it (nullopt).
    void hoveredAt(std::optional<double> x);
    void resetZoomRequested();

private:
    static constexpr int kReadablePlot = 130; // px: the plot's height that readableHeight keeps
    struct LaneSeries {
        QLineSeries* legend = nullptr; // empty: gives the lane its legend entry
        QColor color;
        QList<QPointF> warm, raw, smooth; // decimated, in chart values
        QList<QPointF> evals;             // evaluation x positions (marked on train charts)
        QList<QPointF> lrMarks;           // learning-rate schedule boundaries (every chart)
        std::vector<double> smoothed;     // cache, extended incrementally
        std::size_t smoothedFrom = 0;
        double smoothedTau = -1;
        CoarseSeries rawCoarse, smoothCoarse; // level-of-detail copies for long histories
        std::size_t coarseFrom = 0;
        std::uint64_t compactions = 0;     // the history's merges the caches were built after
        std::vector<QList<QPointF>> bands; // across repeats, chart values (tokens/s scaled)
    };
    /// The band of lane `lane` from its own curve and its sources' (same smoothing as the line).
    void updateBand(LaneSeries& s, std::size_t lane, BandCurve own, double lo, double hi, int points, double tau,
                    double yScale);
    void applyRange(double lo, double hi);
    void pushLines();
    void resetCaches(); // after a metric or axis change: the cached lines no longer apply
    void updateTitles();
    double plotLength(bool horizontal) const;
    void applyYTicks(double yMin, double yMax);
    void cacheStaticItems();

    Metric m_metric;
    std::int64_t m_tokensPerSample = 1;
    XAxis m_axis = XAxis::Time;
    double m_smoothing = 0.6;
    std::optional<double> m_target;
    bool m_zoomed = false;
    bool m_settingRange = false;
    double m_fontScale = 1.0;
    QString m_title;
    QString m_yTitle;
    QChart* m_chart = nullptr;
    SafeChartView* m_view = nullptr;
    QCategoryAxis* m_x = nullptr;
    QCategoryAxis* m_y = nullptr;
    bool m_log = false;
    double m_sharedXMax = 0;
    TimeStyle m_timeStyle = TimeStyle::Seconds;
    QLineSeries* m_targetSeries = nullptr;
    PlotLayer* m_layer = nullptr;
    std::vector<LaneSeries> m_series;
    const std::vector<LaneHistory>* m_last = nullptr;
    BandSources m_bandSources;
    // The sources' smoothed curves (they no longer change), for m_bandTau and the current
    // metric and axis; dropped when either or the sources' generation changes.
    std::map<const LaneHistory*, std::vector<double>> m_bandSmoothed;
    double m_bandTau = -1;
};

} // namespace devicerace::ui
