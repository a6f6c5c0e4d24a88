#include "summary_table.h"

#include <QHeaderView>
#include <QResizeEvent>
#include <QScrollBar>

#include <algorithm>
#include <cmath>
#include <vector>

#include "devicerace/format.h"
#include "charts/palette.h"
#include "race_strip.h"

namespace devicerace::ui {

QString groupedNumber(double value) {
    return std::isfinite(value) ? QString::fromStdString(groupThousands(value)) : QStringLiteral("–");
}

QString formatBytes(std::uint64_t bytes) { return QString::fromStdString(devicerace::formatBytes(bytes)); }

SummaryTable::SummaryTable(QWidget* parent) : QTableWidget(parent) {
    setColumnCount(kColumns);
    setHorizontalHeaderLabels({tr("lane"), tr("device"), tr("samples/s"), tr("steps/s"), tr("test acc"),
                               tr("time→target"), tr("peak mem"), tr("$/h"), tr("status"), tr("data"), tr("$→target"),
                               tr("cost ×"), tr("of peak"), tr("scaling")});
    // Before the first race, as after one without prices or data-parallel lanes: the header
    // fits the dashboard (all 14 at Qt's default width needed a scroll bar at 1280 px).
    for (const int c : {kCostPerHourColumn, kCostToTargetColumn, kCostRatioColumn, kScalingColumn}) {
        setColumnHidden(c, true);
    }
    verticalHeader()->setVisible(false);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    setSelectionMode(QAbstractItemView::NoSelection);
    setAlternatingRowColors(true);
    resizeColumnsToContents();
}

QString scalingText(const LaneSummary& l) {
    if (l.workers == 0) {
        return QStringLiteral("–");
    }
    // "2 workers · batch 256 · 1.87× · 94% · allreduce 6%": seed 002's speedup and efficiency.
    QStringList parts{l.workers == 1 ? QObject::tr("1 worker") : QObject::tr("%1 workers").arg(l.workers),
                      QObject::tr("batch %1").arg(groupedNumber(static_cast<double>(l.batch)))};
    if (l.scalingSpeedup && l.scalingEfficiency) {
        parts << QStringLiteral("%1×").arg(*l.scalingSpeedup, 0, 'f', 2)
              << QObject::tr("%1% efficient").arg(*l.scalingEfficiency * 100, 0, 'f', 0);
    }
    if (l.allreduceShare) {
        parts << QObject::tr("allreduce %1%").arg(*l.allreduceShare * 100, 0, 'f', 0);
    }
    return parts.join(QStringLiteral(" · "));
}

void SummaryTable::showSummary(const RaceSummary& summary, const std::vector<LaneInfo>& lanes) {
    setRowCount(static_cast<int>(summary.lanes.size()));
    bool parallel = false;
    bool priced = false;
    for (const auto& l : summary.lanes) {
        parallel = parallel || l.workers > 0;
        priced = priced || l.costPerHour.has_value();
    }
    setColumnHidden(kScalingColumn, !parallel);
    for (const int c : {kCostPerHourColumn, kCostToTargetColumn, kCostRatioColumn}) {
        setColumnHidden(c, !priced);
    }
    // Language models: the throughput column in tokens/s, accuracy per next character.
    const bool lm = summary.tokensPerSample > 0;
    horizontalHeaderItem(2)->setText(lm ? tr("tokens/s") : tr("samples/s"));
    horizontalHeaderItem(4)->setText(lm ? tr("val acc") : tr("test acc"));
    auto dash = QStringLiteral("–");
    m_rowColours.assign(summary.lanes.size(), RowColours{});
    for (int r = 0; r < rowCount(); ++r) {
        const auto& l = summary.lanes[static_cast<std::size_t>(r)];
        const QString status = l.error.empty() || l.state == LaneState::Finished
                                   ? QString::fromStdString(toString(l.state))
                                   : (l.error.rfind(toString(l.state), 0) == 0
                                          ? QString::fromStdString(l.error)
                                          : QString::fromStdString(toString(l.state) + ": " + l.error));
        const QStringList cells = {
            QString::fromStdString(l.name),
            QString::fromStdString(l.kind == LaneKind::Slurm      ? "slurm/" + l.device
                                   : l.kind == LaneKind::Attached ? "job/" + l.device
                                   : l.host.empty()               ? l.device
                                                                  : parseSshTarget(l.host).host + "/" + l.device),
            lm ? (l.tokensPerSec ? groupedNumber(*l.tokensPerSec) : dash)
               : (l.samplesPerSec ? groupedNumber(*l.samplesPerSec) : dash),
            l.stepsPerSec ? QString::number(*l.stepsPerSec, 'f', 1) : dash,
            l.finalTestAccuracy ? QString::number(*l.finalTestAccuracy, 'f', 4) : dash,
            l.timeToTargetSeconds ? formatDuration(*l.timeToTargetSeconds) : dash,
            l.peakMemoryBytes ? formatBytes(*l.peakMemoryBytes) : dash,
            l.costPerHour ? QString::number(*l.costPerHour, 'f', 2) : dash,
            status,
            QString::fromStdString(l.datasetName),
            l.costToTargetUsd ? QStringLiteral("$%1").arg(*l.costToTargetUsd, 0, 'f', 4) : dash,
            l.costVsBaseline ? QStringLiteral("%1×").arg(*l.costVsBaseline, 0, 'f', 2) : dash,
            l.utilization ? QStringLiteral("%1%").arg(*l.utilization * 100, 0, 'f', *l.utilization < 0.1 ? 1 : 0)
                          : dash,
            scalingText(l),
        };
        for (int c = 0; c < cells.size(); ++c) {
            auto* item = this->item(r, c);
            if (!item) {
                item = new QTableWidgetItem();
                setItem(r, c, item);
            }
            item->setText(cells[c]);
            item->setTextAlignment((c >= 2 && c <= kCostPerHourColumn) || c == kCostToTargetColumn ||
                                           c == kCostRatioColumn || c == kPeakColumn
                                       ? (Qt::AlignRight | Qt::AlignVCenter)
                                       : (Qt::AlignLeft | Qt::AlignVCenter));
            if (c == kPeakColumn) {
                // Which peak, and what the lane's energy was (or why none): the "why" in a hover.
                QString tip = l.peakFlopsPerSec ? tr("%1 GFLOP/s achieved of %2 GFLOP/s (%3)")
                                                      .arg(l.achievedFlopsPerSec.value_or(0) / 1e9, 0, 'f', 1)
                                                      .arg(*l.peakFlopsPerSec / 1e9, 0, 'f', 0)
                                                      .arg(QString::fromStdString(l.peakSource))
                                                : tr("no peak known for this device");
                if (l.energyJoules) {
                    tip += tr("\nenergy %1 J · %2 samples/J")
                               .arg(*l.energyJoules, 0, 'f', 1)
                               .arg(groupedNumber(l.samplesPerJoule.value_or(0)));
                } else if (!l.energySource.empty()) {
                    tip += QStringLiteral("\nenergy: ") + QString::fromStdString(l.energySource);
                }
                item->setToolTip(tip);
            }
            if (c == kStatusColumn) {
                item->setToolTip(status);
            }
        }
        m_rowColours[static_cast<std::size_t>(r)] = {
            r < static_cast<int>(lanes.size()) ? lanes[static_cast<std::size_t>(r)].color : QColor(), l.synthetic,
            l.state == LaneState::Failed || l.state == LaneState::Diverged};
    }
    colourRows();
    fitColumns();
    fitHeight();
}

void SummaryTable::colourRows() {
    const auto rows = std::min(rowCount(), static_cast<int>(m_rowColours.size()));
    for (int r = 0; r < rows; ++r) {
        const auto& colours = m_rowColours[static_cast<std::size_t>(r)];
        // Readable on the row's own background (alternate rows are another shade), in either theme.
        const QColor background =
            palette().color(alternatingRowColors() && r % 2 ? QPalette::AlternateBase : QPalette::Base);
        const QColor text = palette().color(QPalette::Text);
        for (int c = 0; c < columnCount(); ++c) {
            auto* item = this->item(r, c);
            if (!item) {
                continue;
            }
            QColor fg = text;
            if (c == 0 && colours.lane.isValid()) {
                fg = readableOn(colours.lane, background);
            } else if (c == kDataColumn && colours.synthetic) {
                fg = warningOn(background); // synthetic data
            } else if (c == kStatusColumn && colours.bad) {
                fg = failureOn(background); // failed or diverged
            }
            item->setForeground(fg);
        }
    }
}

void SummaryTable::changeEvent(QEvent* event) {
    QTableWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) {
        colourRows();
    }
}

void SummaryTable::fitColumns() {
    resizeColumnsToContents(); // each column as wide as its contents and header
    int excess = -viewport()->width();
    for (int c = 0; c < columnCount(); ++c) {
        excess += isColumnHidden(c) ? 0 : columnWidth(c);
    }
    const auto floorOf = [this](int c) { return std::max(kMinWrapWidth, horizontalHeader()->sectionSizeHint(c)); };
    while (excess > 0) {
        // The widest wrappable column above its floor narrows first, to the next one's width at most.
        std::vector<int> open;
        for (const int c : kWrapColumns) {
            if (!isColumnHidden(c) && columnWidth(c) > floorOf(c)) {
                open.push_back(c);
            }
        }
        if (open.empty()) {
            break; // nothing left to wrap: the scroll bar shows the rest
        }
        std::sort(open.begin(), open.end(), [this](int a, int b) { return columnWidth(a) > columnWidth(b); });
        const int c = open.front();
        const int next = open.size() > 1 ? columnWidth(open[1]) : 0;
        const int give = std::max(1, std::min(excess, columnWidth(c) - std::max(floorOf(c), next)));
        setColumnWidth(c, columnWidth(c) - give);
        excess -= give;
    }
    // Rows as tall as ever, taller where a wrapped cell needs it.
    for (int r = 0; r < rowCount(); ++r) {
        setRowHeight(r, std::max(verticalHeader()->defaultSectionSize(), sizeHintForRow(r)));
    }
}

int SummaryTable::heightOfRows(int rows) const {
    int height = horizontalHeader()->height() + 2 * frameWidth();
    for (int r = 0; r < std::min(rows, rowCount()); ++r) {
        height += rowHeight(r);
    }
    if (horizontalHeader()->length() >
        width() - 2 * frameWidth() - (verticalHeader()->isVisible() ? verticalHeader()->width() : 0)) {
        height += horizontalScrollBar()->sizeHint().height();
    }
    return height;
}

void SummaryTable::setHeightLimit(int pixels) {
    if (pixels != m_heightLimit) {
        m_heightLimit = pixels;
        fitHeight();
    }
}

void SummaryTable::fitHeight() {
    // As tall as its rows, so the dashboard gives the rest to the charts; no taller than the
    // dashboard's limit, if it set one.
    const bool scrolls = m_heightLimit > 0 && fullHeight() > m_heightLimit;
    if (const auto policy = scrolls ? Qt::ScrollBarAlwaysOn : Qt::ScrollBarAlwaysOff;
        verticalScrollBarPolicy() != policy) {
        setVerticalScrollBarPolicy(policy); // lays the viewport out at once:
        fitColumns();                       // the columns fit what is left beside the bar
    }
    const int full = fullHeight();
    const int height = scrolls ? std::min(full, m_heightLimit) : full;
    if (height != this->height() || minimumHeight() != maximumHeight()) {
        setFixedHeight(height);
    }
}

void SummaryTable::resizeEvent(QResizeEvent* event) {
    QTableWidget::resizeEvent(event);
    if (event->oldSize().width() != event->size().width()) {
        fitColumns();
    }
    fitHeight();
}

int SummaryTable::visibleRows() const {
    int rows = 0;
    const int bottom = viewport()->height();
    for (int r = 0; r < rowCount(); ++r) {
        if (rowViewportPosition(r) >= 0 && rowViewportPosition(r) + rowHeight(r) <= bottom) {
            ++rows;
        }
    }
    return rows;
}

} // namespace devicerace::ui
