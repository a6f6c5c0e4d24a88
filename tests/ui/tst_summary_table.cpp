// The results table's scaling column: shown only for data-parallel lanes, with seed 002's
// speedup and efficiency against the lane with the fewest workers.
#include <QtTest>

#include "summary_table.h"

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
};

QTEST_MAIN(TstSummaryTable)
#include "tst_summary_table.moc"
