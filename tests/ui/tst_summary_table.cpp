// The results table's scaling column: shown only for data-parallel lanes, with seed 002's
// speedup and efficiency against the lane with the fewest workers.
#include <QtTest>

#include <QHeaderView>

#include "charts/palette.h"
#include "race_controller.h"
#include "summary_table.h"
#include "theme.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

LaneSummary parallelLane(const std::string& name, int workers, double rate, double share) {
    LaneSummary l;
    l.name = name;
    l.device = "cpu";
    l.kind = LaneKind::Parallel;
    l.workers = workers;
    l.batch = 128 * workers;
    l.samplesPerSec = rate;
    l.allreduceShare = share;
    l.state = LaneState::Finished;
    return l;
}

// A summary of `count` lanes named "lane N", each in its palette colour, with their infos.
std::pair<RaceSummary, std::vector<LaneInfo>> namedLanes(int count) {
    RaceSummary s;
    std::vector<LaneInfo> lanes;
    for (int i = 0; i < count; ++i) {
        LaneSummary l;
        l.name = "lane " + std::to_string(i);
        s.lanes.push_back(l);
        LaneInfo info;
        info.name = QString::fromStdString(l.name);
        info.color = laneColor(i);
        lanes.push_back(info);
    }
    return {s, lanes};
}

} // namespace

class TstSummaryTable : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void scalingColumnReadsSpeedupAndEfficiency() {
        RaceSummary s;
        s.lanes = {parallelLane("one", 1, 1000, 0.0), parallelLane("four", 4, 3600, 0.06)};
        fillScaling(s.lanes);
        SummaryTable table;
        table.showSummary(s, {});
        QVERIFY(!table.isColumnHidden(SummaryTable::kScalingColumn));
        QCOMPARE(table.item(1, SummaryTable::kScalingColumn)->text(),
                 QStringLiteral("4 workers · batch 512 · 3.60× · 90% efficient · allreduce 6%"));
        QCOMPARE(table.item(0, SummaryTable::kScalingColumn)->text(),
                 QStringLiteral("1 worker · batch 128 · 1.00× · 100% efficient · allreduce 0%"));
    }

    void noScalingColumnWithoutParallelLanes() {
        RaceSummary s;
        LaneSummary l;
        l.name = "cpu·2";
        l.samplesPerSec = 500;
        s.lanes = {l};
        fillScaling(s.lanes);
        SummaryTable table;
        table.showSummary(s, {});
        QVERIFY(table.isColumnHidden(SummaryTable::kScalingColumn));
        QCOMPARE(table.item(0, SummaryTable::kScalingColumn)->text(), QStringLiteral("–"));
    }

    // The three cost columns read "–" in every row unless a lane has a price: hidden then, shown
    // (with the price and its ratio) as soon as one lane has one.
    void costColumnsOnlyWhenALaneHasAPrice() {
        const int costColumns[] = {SummaryTable::kCostPerHourColumn, SummaryTable::kCostToTargetColumn,
                                   SummaryTable::kCostRatioColumn};
        RaceSummary s;
        LaneSummary a;
        a.name = "cpu·1";
        a.samplesPerSec = 500;
        LaneSummary b = a;
        b.name = "cpu·2";
        s.lanes = {a, b};
        SummaryTable table;
        for (const int c : costColumns) { // before any race too
            QVERIFY2(table.isColumnHidden(c), qPrintable(table.horizontalHeaderItem(c)->text()));
        }
        table.showSummary(s, {});
        for (const int c : costColumns) {
            QVERIFY2(table.isColumnHidden(c), qPrintable(table.horizontalHeaderItem(c)->text()));
        }
        QVERIFY(!table.isColumnHidden(SummaryTable::kPeakColumn));

        s.lanes[1].costPerHour = 2.5;
        s.lanes[1].costToTargetUsd = 0.0125;
        s.lanes[1].costVsBaseline = 1.5;
        table.showSummary(s, {});
        for (const int c : costColumns) {
            QVERIFY2(!table.isColumnHidden(c), qPrintable(table.horizontalHeaderItem(c)->text()));
        }
        QCOMPARE(table.item(1, SummaryTable::kCostPerHourColumn)->text(), QStringLiteral("2.50"));
        QCOMPARE(table.item(1, SummaryTable::kCostToTargetColumn)->text(), QStringLiteral("$0.0125"));
        QCOMPARE(table.item(1, SummaryTable::kCostRatioColumn)->text(), QStringLiteral("1.50×"));
        QCOMPARE(table.item(0, SummaryTable::kCostPerHourColumn)->text(), QStringLiteral("–"));
    }

    // Long devices and errors wrap inside the table's width (their rows grow) instead of a
    // horizontal scroll bar that hid the right-hand columns; every cell shows its whole text.
    void longCellsWrapWithinTheWidth() {
        RaceSummary s;
        LaneSummary gpu;
        gpu.name = "cuda:0 (rec)";
        gpu.device = "cuda:0 NVIDIA H100 80GB HBM3 (recorded 2026-11-27)";
        gpu.samplesPerSec = 61204;
        gpu.state = LaneState::Finished;
        LaneSummary lost;
        lost.name = "box/cpu·2";
        lost.device = "cpu";
        lost.state = LaneState::Failed;
        lost.error = "the connection to the lane's host was lost after 41 s (ssh exited with status 255)";
        lost.utilization = 0.42;
        s.lanes = {gpu, lost};
        SummaryTable table;
        table.resize(800, 200); // about the dashboard's width in a 1280 px window
        table.show();
        QVERIFY(QTest::qWaitForWindowExposed(&table));
        table.showSummary(s, {});
        QVERIFY2(table.horizontalHeader()->length() <= table.viewport()->width(),
                 qPrintable(QStringLiteral("%1 px of columns in %2 px")
                                .arg(table.horizontalHeader()->length())
                                .arg(table.viewport()->width())));
        for (int r = 0; r < table.rowCount(); ++r) {
            for (int c = 0; c < table.columnCount(); ++c) {
                if (table.isColumnHidden(c)) {
                    continue;
                }
                const auto* item = table.item(r, c);
                const QFontMetrics fm(table.font());
                const QRect need = fm.boundingRect(QRect(0, 0, table.columnWidth(c) - 8, 1000),
                                                   Qt::TextWordWrap | Qt::TextWrapAnywhere, item->text());
                QVERIFY2(need.height() <= table.rowHeight(r),
                         qPrintable(QStringLiteral("row %1, \"%2\": %3 px tall in a %4 px row")
                                        .arg(r)
                                        .arg(item->text())
                                        .arg(need.height())
                                        .arg(table.rowHeight(r))));
            }
        }
        QVERIFY(table.rowHeight(0) > table.verticalHeader()->defaultSectionSize()); // the device wrapped
        QCOMPARE(table.item(1, SummaryTable::kPeakColumn)->text(), QStringLiteral("42%"));
    }

    // Every lane name reads at 4.5:1 or better on its own row, alternate rows included, in the
    // dark theme (the blue lane read 4.0:1 on the dark alternate rows) and the light one.
    void laneNamesReadOnEveryRowInBothThemes() {
        for (const bool dark : {true, false}) {
            SummaryTable table;
            if (dark) {
                table.setPalette(darkPalette());
            }
            const auto [s, lanes] = namedLanes(8);
            table.showSummary(s, lanes);
            QVERIFY(table.alternatingRowColors());
            for (int r = 0; r < 8; ++r) {
                const QColor bg = table.palette().color(r % 2 ? QPalette::AlternateBase : QPalette::Base);
                const QColor fg = table.item(r, 0)->foreground().color();
                QVERIFY2(contrastRatio(fg, bg) >= 4.5,
                         qPrintable(QStringLiteral("%1 theme, row %2: %3 on %4, %5:1")
                                        .arg(dark ? QStringLiteral("dark") : QStringLiteral("light"))
                                        .arg(r)
                                        .arg(fg.name(), bg.name())
                                        .arg(contrastRatio(fg, bg))));
            }
        }
    }

    // Every cell, the warnings in the data and status columns included (synthetic data, a failed
    // lane), reads at 4.5:1 or better in the theme the window has now: also when the theme
    // changed after the race was shown (the status and data columns stayed near-black on the
    // dark theme).
    void everyCellReadsAfterTheThemeChanges() {
        for (const bool darkFirst : {false, true}) {
            SummaryTable table;
            table.setPalette(darkFirst ? darkPalette() : QApplication::palette());
            auto [s, lanes] = namedLanes(4);
            for (std::size_t i = 0; i < s.lanes.size(); ++i) {
                auto& l = s.lanes[i];
                l.datasetName = i % 2 ? "synthetic" : "Fashion-MNIST";
                l.synthetic = i % 2 == 1;
                l.state = i == 2 ? LaneState::Failed : LaneState::Finished;
                l.error = i == 2 ? "failed: out of memory" : "";
            }
            table.showSummary(s, lanes);
            table.setPalette(darkFirst ? QApplication::palette() : darkPalette());
            for (int r = 0; r < table.rowCount(); ++r) {
                const QColor bg = table.palette().color(r % 2 ? QPalette::AlternateBase : QPalette::Base);
                for (int c = 0; c < table.columnCount(); ++c) {
                    const QColor fg = table.item(r, c)->foreground().color();
                    QVERIFY2(contrastRatio(fg, bg) >= 4.5,
                             qPrintable(QStringLiteral("%1 theme after %2, row %3 column %4 (\"%5\"): %6 on %7, %8:1")
                                            .arg(darkFirst ? QStringLiteral("light") : QStringLiteral("dark"),
                                                 darkFirst ? QStringLiteral("dark") : QStringLiteral("light"))
                                            .arg(r)
                                            .arg(c)
                                            .arg(table.item(r, c)->text(), fg.name(), bg.name())
                                            .arg(contrastRatio(fg, bg), 0, 'f', 1)));
                }
            }
            // The warnings keep their hue: red for a failed lane, amber for synthetic data.
            const QColor failed = table.item(2, SummaryTable::kStatusColumn)->foreground().color();
            const QColor synthetic = table.item(1, SummaryTable::kDataColumn)->foreground().color();
            QVERIFY2(failed.hslHue() <= 15 || failed.hslHue() >= 345, qPrintable(failed.name()));
            QVERIFY2(synthetic.hslHue() >= 25 && synthetic.hslHue() <= 50, qPrintable(synthetic.name()));
        }
    }
};

QTEST_MAIN(TstSummaryTable)
#include "tst_summary_table.moc"
