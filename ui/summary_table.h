#pragma once
// The per-lane results table: device, median samples/s and steps/s after warm-up, final
// accuracy, time to target, peak memory, $/hour, status or error. GUI thread only.
#include <QTableWidget>

#include "devicerace/race.h"
#include "race_controller.h"

namespace devicerace::ui {

/// "61,204" — numbers the audience reads are rounded for reading.
QString groupedNumber(double value);
/// "1.2 GB"
QString formatBytes(std::uint64_t bytes);

class SummaryTable : public QTableWidget {
    Q_OBJECT
public:
    explicit SummaryTable(QWidget* parent = nullptr);
    void showSummary(const RaceSummary& summary, const std::vector<LaneInfo>& lanes);
};

} // namespace devicerace::ui
