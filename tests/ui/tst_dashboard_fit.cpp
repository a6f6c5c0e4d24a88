// What gives way when the dashboard's parts do not all fit its height (ui/dashboard_fit.h): the
// order, each step taken only when the one before was not enough, and the charts' share.
#include <QtTest>

#include "dashboard_fit.h"

using namespace devicerace::ui;

namespace {

// A 1280x720 window's dashboard in normal mode, two lanes: everything fits in full.
DashboardHeights twoLanes() {
    DashboardHeights h;
    h.available = 668;
    h.rest = 150;
    h.spacing = 6;
    h.chartMin = 200;
    h.gridChartMin = 230;
    h.chartGap = 6;
    h.barsFull = 66;
    h.barsCompact = 54;
    h.stripFull = 70;
    h.stripCompact = 58;
    h.tableFull = 90;
    h.tableMin = 90;
    return h;
}

} // namespace

class TestDashboardFit : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void everythingAtFullSizeWhereItFits() {
        const auto fit = fitDashboard(twoLanes());
        QVERIFY(!fit.grid && !fit.compactBars && !fit.compactStrip && !fit.hideBars);
        QCOMPARE(fit.tableHeight, 90);
        QCOMPARE(fit.chartsHeight, 668 - 150 - 66 - 70 - 90);
    }

    void twoRowsOfChartsOnlyWhereBothReadAndAllElseIsWhole() {
        auto h = twoLanes();
        h.available = 1040;
        h.gridAllowed = true;
        auto fit = fitDashboard(h);
        QVERIFY(fit.grid);
        QVERIFY(!fit.compactBars && !fit.compactStrip);
        QCOMPARE(fit.tableHeight, h.tableFull);
        // Eight lanes: the rows the parts need leave room for one row of charts only.
        h.available = 1120;
        h.barsFull = 9 * 21;
        h.stripFull = 8 * 30 + 58;
        h.tableFull = 30 + 8 * 30;
        fit = fitDashboard(h);
        QVERIFY(!fit.grid);
        QVERIFY(fit.chartsHeight >= h.chartMin);
        QCOMPARE(fit.tableHeight, h.tableFull);
        QVERIFY(!fit.compactBars);
        // ...and never in presentation (gridAllowed false there).
        h = twoLanes();
        h.available = 1040;
        QVERIFY(!fitDashboard(h).grid);
    }

    void barsThinFirstThenTheStripTightensThenTheTableScrolls() {
        auto h = twoLanes();
        // 10 px short: thinner bars (12 px) are enough.
        h.available = 150 + 66 + 70 + 90 + 200 - 10;
        auto fit = fitDashboard(h);
        QVERIFY(fit.compactBars);
        QVERIFY(!fit.compactStrip);
        QCOMPARE(fit.tableHeight, h.tableFull);
        QVERIFY(fit.chartsHeight >= h.chartMin);
        // 20 px short: the strip tightens too.
        h.available = 150 + 66 + 70 + 90 + 200 - 20;
        fit = fitDashboard(h);
        QVERIFY(fit.compactBars && fit.compactStrip);
        QCOMPARE(fit.tableHeight, h.tableFull);
        // 60 px short with a table of eight rows: the table gives the 36 px still missing, no more.
        h.tableFull = 270;
        h.tableMin = 90;
        h.available = 150 + 66 + 70 + 270 + 200 - 60;
        fit = fitDashboard(h);
        QVERIFY(fit.compactBars && fit.compactStrip);
        QCOMPARE(fit.tableHeight, 270 - (60 - 12 - 12));
        QCOMPARE(fit.chartsHeight, h.chartMin);
        QVERIFY(!fit.hideBars); // not in normal mode: the dashboard scrolls instead
    }

    void theTableKeepsItsLeastRowsAndTheChartsGetWhatIsLeft() {
        auto h = twoLanes();
        h.tableFull = 270;
        h.tableMin = 90;
        h.available = 500;
        const auto fit = fitDashboard(h);
        QCOMPARE(fit.tableHeight, 90);
        QCOMPARE(fit.chartsHeight, 500 - 150 - 54 - 58 - 90); // below chartMin: the window scrolls
        QVERIFY(fit.chartsHeight < h.chartMin);
    }

    void presentationDropsTheBarsAndGivesTheStripItsRowsBack() {
        auto h = twoLanes();
        h.tableFull = h.tableMin = 0; // no table in presentation
        h.mayHideBars = true;
        h.barsFull = 9 * 29;
        h.barsCompact = 9 * 25;
        h.stripFull = 8 * 43 + 60;
        h.stripCompact = 8 * 34 + 60;
        h.available = 720;
        h.rest = 60;
        auto fit = fitDashboard(h);
        QVERIFY(fit.hideBars);
        QVERIFY(!fit.compactStrip); // without the bars the strip reads at full height again
        QCOMPARE(fit.chartsHeight, 720 - 60 + h.spacing - h.stripFull);
        // Where even that is short, the strip stays tight.
        h.available = 60 - h.spacing + h.stripCompact + h.chartMin + 10;
        fit = fitDashboard(h);
        QVERIFY(fit.hideBars && fit.compactStrip);
        QVERIFY(fit.chartsHeight >= h.chartMin);
    }

    void noBarsNothingToHide() {
        auto h = twoLanes();
        h.barsFull = h.barsCompact = 0;
        h.mayHideBars = true;
        h.available = 300;
        const auto fit = fitDashboard(h);
        QVERIFY(!fit.hideBars);
        QCOMPARE(fit.chartsHeight, 300 - 150 - 58 - 90);
    }
};

QTEST_APPLESS_MAIN(TestDashboardFit)
#include "tst_dashboard_fit.moc"
