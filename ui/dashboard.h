#pragma once
// The right-hand side of the window: the live charts (throughput, accuracy, loss), their
// controls (x axis, smoothing, samples/steps), the device panel, the race strip with its
// baseline picker, and the summary table. Exported as one picture. GUI thread only.
#include <QElapsedTimer>
#include <QWidget>

#include "model/lane_history.h"
#include "race_controller.h"

class QComboBox;
class QGridLayout;
class QSlider;
class QLabel;

namespace devicerace::ui {

class DevicePanel;
class MetricChart;
class RaceStrip;
class SummaryTable;
class TextStrip;
class BreakdownBars;

class Dashboard : public QWidget {
    Q_OBJECT
public:
    explicit Dashboard(RaceController* race, QWidget* parent = nullptr);

    MetricChart* throughputChart() const { return m_throughput; }
    MetricChart* accuracyChart() const { return m_accuracy; }
    MetricChart* lossChart() const { return m_loss; }
    RaceStrip* strip() const { return m_strip; }
    TextStrip* textStrip() const { return m_text; }
    BreakdownBars* breakdownBars() const { return m_breakdown; }
    SummaryTable* summaryTable() const { return m_summary; }
    DevicePanel* devicePanel() const { return m_devices; }
    QList<MetricChart*> charts() const;
    QLabel* titleLabel() const { return m_title; }

    /// Inside a scroll area: the parts are fitted to its viewport's height (the dashboard itself
    /// is at least as tall as its parts, and the area scrolls the rest).
    void fitInside(QWidget* viewport);
    /// The least height its parts take at `width` (the fitted parts, readable charts): a scroll
    /// area around the dashboard scrolls only past that, not past the parts' preferred heights.
    int heightForWidth(int width) const override;

    /// Presentation: only charts + strip + headline, large fonts.
    void setPresentation(bool on, double fontScale);
    bool presentation() const { return m_presentation; }

    /// How the charts are placed: 2x2 with the device panel (tall windows), or one row of
    /// three (short or wide ones: 1280x720, projectors), chosen from the size on resize.
    enum class Arrangement { Grid, Row };
    Arrangement arrangement() const { return m_arrangement; }
    void setDark(bool dark);
    int baseline() const;
    /// Before a race, the speedup box lists the lanes Start would race (the setup's plan), so
    /// the baseline can be chosen first; the race keeps the chosen lane by name.
    void setPlannedLanes(const QStringList& names);

    /// The title above the charts: "fashion-mlp · Fashion-MNIST (real) · live mode"; in
    /// presentation mode the speedup headline replaces it once there is one.
    void setHeadline(const QString& text);
    QString titleText() const;
    /// Rebuilds series for a new race; refreshes charts and strip from the histories.
    void onRaceStarted();
    /// Updates the strip, and the charts when their pacing allows: chart work (refresh +
    /// paint) is kept under ~25% of the GUI thread, so a long history lowers the chart frame
    /// rate instead of taking CPU from the lanes.
    void refresh();
    /// Refreshes the charts now, whatever the pacing.
    void refreshCharts();
    void refreshSummary();
    /// The live race's CPU-sharing warning for the strip ("" : none); a lane explained as slower
    /// takes its place.
    void setSharingNote(const QString& note);
    /// "repeat 2 of 5" while repeating, then the verdict ("5 repeats: cuda:0 41.2× ± 0.8 (N = 5)");
    /// "" hides it.
    void setRepeatNote(const QString& note);
    QString repeatNote() const;

    /// Throughput axis: automatic (log when lanes differ by more than ~10x), linear or log.
    enum class Scale { Auto, Linear, Log };
    void setThroughputScale(Scale scale);
    Scale throughputScale() const { return m_scale; }
    /// Time axis at least this long (seconds; 0: follow the data). Video export shows the
    /// whole race from the first frame.
    void setFixedXMax(double seconds) { m_fixedXMax = seconds; }

protected:
    void resizeEvent(QResizeEvent* event) override;
    bool event(QEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void fillBaseline(const QStringList& names);
    // What gives way where the parts do not all fit (dashboard_fit.h), and the arrangement.
    void fitHeights(bool force = false);
    void arrange(Arrangement want, bool force);
    bool m_fitting = false;
    QWidget* m_viewport = nullptr;           // fitInside's; null: the dashboard's own height
    static constexpr int kTableRowsKept = 2; // the table scrolls, but shows at least these
    void updateTitle();
    void linkZoom();
    bool wantLog();
    Metric firstRate() const; // the throughput combo's first entry: tokens/s or samples/s
    RaceController* m_race;
    MetricChart* m_throughput = nullptr;
    MetricChart* m_accuracy = nullptr;
    MetricChart* m_loss = nullptr;
    DevicePanel* m_devices = nullptr;
    RaceStrip* m_strip = nullptr;
    TextStrip* m_text = nullptr;
    BreakdownBars* m_breakdown = nullptr;
    SummaryTable* m_summary = nullptr;
    QWidget* m_controls = nullptr;
    QComboBox* m_xAxis = nullptr;
    QComboBox* m_rate = nullptr;
    // The throughput chart went to steps/s by itself: the race's lanes report steps but no samples
    // (scripts whose batch cannot be seen); decided once per race, at the first rates.
    bool m_rateDecided = false, m_rateAuto = false;
    bool m_qualityDecided = false; // the quality chart shows accuracy, or the test loss of scripts that say no accuracy
    void chooseRateForScripts();
    void chooseQualityForScripts();
    QComboBox* m_baseline = nullptr;
    QString m_baselineName; // the lane last chosen in m_baseline ("" : none chosen yet)
    QSlider* m_smoothing = nullptr;
    QComboBox* m_scaleBox = nullptr;
    Scale m_scale = Scale::Auto;
    bool m_autoLog = false; // the automatic choice, with hysteresis
    double m_fixedXMax = 0;
    QLabel* m_modeLabel = nullptr;
    QLabel* m_repeatLabel = nullptr;
    QLabel* m_title = nullptr;
    QString m_titleText; // normal mode: workload · data · mode
    QString m_sharingNote;
    QString m_headline; // presentation: the speedup
    QGridLayout* m_grid = nullptr;
    Arrangement m_arrangement = Arrangement::Grid;
    bool m_presentation = false;
    QElapsedTimer m_sinceCharts;
    double m_chartCostMs = 0; // smoothed cost of one chart refresh + paint
};

} // namespace devicerace::ui
