#pragma once
// The right-hand side of the window: the live charts (throughput, accuracy, loss), their
// controls (x axis, smoothing, samples/steps), the device panel, the race strip with its
// baseline picker, and the summary table. Exported as one picture. GUI thread only.
#include <QElapsedTimer>
#include <QWidget>

#include "lane_history.h"
#include "race_controller.h"

class QComboBox;
class QSlider;
class QLabel;

namespace devicerace::ui {

class DevicePanel;
class MetricChart;
class RaceStrip;
class SummaryTable;

class Dashboard : public QWidget {
    Q_OBJECT
public:
    explicit Dashboard(RaceController* race, QWidget* parent = nullptr);

    MetricChart* throughputChart() const { return m_throughput; }
    MetricChart* accuracyChart() const { return m_accuracy; }
    MetricChart* lossChart() const { return m_loss; }
    RaceStrip* strip() const { return m_strip; }
    SummaryTable* summaryTable() const { return m_summary; }
    DevicePanel* devicePanel() const { return m_devices; }
    QList<MetricChart*> charts() const;

    /// Presentation: only charts + strip, dark, large fonts.
    void setPresentation(bool on, double fontScale);
    void setDark(bool dark);
    int baseline() const;

    /// The headline above the charts: "fashion-mlp · Fashion-MNIST (real) · live mode".
    void setHeadline(const QString& text);
    /// Rebuilds series for a new race; refreshes charts and strip from the histories.
    void onRaceStarted();
    /// Updates the strip, and the charts when their pacing allows: chart work (refresh +
    /// paint) is kept under ~25% of the GUI thread, so a long history lowers the chart frame
    /// rate instead of taking CPU from the lanes.
    void refresh();
    /// Refreshes the charts now, whatever the pacing.
    void refreshCharts();
    void refreshSummary();

private:
    void linkZoom();
    RaceController* m_race;
    MetricChart* m_throughput = nullptr;
    MetricChart* m_accuracy = nullptr;
    MetricChart* m_loss = nullptr;
    DevicePanel* m_devices = nullptr;
    RaceStrip* m_strip = nullptr;
    SummaryTable* m_summary = nullptr;
    QWidget* m_controls = nullptr;
    QComboBox* m_xAxis = nullptr;
    QComboBox* m_rate = nullptr;
    QComboBox* m_baseline = nullptr;
    QSlider* m_smoothing = nullptr;
    QLabel* m_modeLabel = nullptr;
    QLabel* m_title = nullptr;
    QElapsedTimer m_sinceCharts;
    double m_chartCostMs = 0; // smoothed cost of one chart refresh + paint
};

} // namespace devicerace::ui
