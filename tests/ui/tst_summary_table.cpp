// The results table's scaling column: shown only for data-parallel lanes, with seed 002's
// speedup and efficiency against the lane with the fewest workers.
#include <QtTest>

#include "palette.h"
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

    // Every lane name reads at 4.5:1 or better on its own row, alternate rows included, in the
    // dark theme (the blue lane read 4.0:1 on the dark alternate rows) and the light one.
    void laneNamesReadOnEveryRowInBothThemes() {
        for (const bool dark : {true, false}) {
            SummaryTable table;
            if (dark) {
                table.setPalette(darkPalette());
            }
            RaceSummary s;
            std::vector<LaneInfo> lanes;
            for (int i = 0; i < 8; ++i) {
                LaneSummary l;
                l.name = "lane " + std::to_string(i);
                s.lanes.push_back(l);
                LaneInfo info;
                info.name = QString::fromStdString(l.name);
                info.color = laneColor(i);
                lanes.push_back(info);
            }
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
};

QTEST_MAIN(TstSummaryTable)
#include "tst_summary_table.moc"
