#pragma once
// The per-lane results table: device, median samples/s and steps/s after warm-up, final
// accuracy, time to target, peak memory, $/hour, status or error, and a data-parallel lane's
// scaling (speedup and efficiency against the fewest workers). GUI thread only.
#include <QTableWidget>

#include "devicerace/race.h"
#include "race_controller.h"

namespace devicerace::ui {

/// "61,204" — numbers the audience reads are rounded for reading.
QString groupedNumber(double value);
/// "1.2 GB"
QString formatBytes(std::uint64_t bytes);
/// A data-parallel lane's scaling: "2 workers · batch 256 · 1.87× · 94% efficient · allreduce 6%".
QString scalingText(const LaneSummary& lane);

class SummaryTable : public QTableWidget {
    Q_OBJECT
public:
    explicit SummaryTable(QWidget* parent = nullptr);
    void showSummary(const RaceSummary& summary, const std::vector<LaneInfo>& lanes);

    /// Rows visible without scrolling (tests: every lane's row fits).
    int visibleRows() const;
    /// As tall as the header and the first `rows` rows (all of them: fullHeight).
    int heightOfRows(int rows) const;
    int fullHeight() const { return heightOfRows(rowCount()); }
    /// The dashboard's limit where it is short of height (many lanes): the table is no taller and
    /// scrolls to its other rows; 0: as tall as its rows.
    void setHeightLimit(int pixels);
    int heightLimit() const { return m_heightLimit; }

    static constexpr int kColumns = 14;
    static constexpr int kDeviceColumn = 1;
    static constexpr int kStatusColumn = 8;
    static constexpr int kDataColumn = 9;
    // $/h, $→target and cost ×: shown only when some lane has a price (Setup's "$/h"); without
    // one they read "–" in every row and pushed "of peak" past the edge at 1280 px.
    static constexpr int kCostPerHourColumn = 7;
    static constexpr int kCostToTargetColumn = 10;
    static constexpr int kCostRatioColumn = 11;
    static constexpr int kPeakColumn = 12;    // utilisation: "63%" of the device's peak (tooltip: which peak)
    static constexpr int kScalingColumn = 13; // shown only when a lane is data-parallel

protected:
    void resizeEvent(QResizeEvent* event) override;
    /// A new palette (the theme toggled after a race) colours the text again for it.
    void changeEvent(QEvent* event) override;

private:
    // Each row's text colours for the table's current palette: the lane's own colour, made
    // readable on the row's background, and the data and status columns' warnings.
    void colourRows();
    struct RowColours {
        QColor lane;
        bool synthetic = false;
        bool bad = false;
    };
    std::vector<RowColours> m_rowColours;

    // Every column in the table's width: where their contents are wider, the widest of the
    // columns that may wrap (device, status, data, scaling) narrow, down to their header's
    // width or kMinWrapWidth, and their rows grow to show the wrapped lines — nothing cut or
    // elided, no horizontal scroll bar (a replayed GPU lane's device, "cuda:0 NVIDIA H100 80GB
    // HBM3 (recorded 2026-11-27)", pushed "of peak" out of sight at 1280 px).
    void fitColumns();
    static constexpr int kMinWrapWidth = 110;
    static constexpr int kWrapColumns[] = {kDeviceColumn, kStatusColumn, kDataColumn, kScalingColumn};
    // As tall as its rows (plus the horizontal scroll bar when the columns are wider than the
    // table: at 1280 px it took a row's height and left 1.5 rows visible).
    void fitHeight();
    int m_heightLimit = 0;
};

} // namespace devicerace::ui
