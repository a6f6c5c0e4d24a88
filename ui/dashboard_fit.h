#pragma once
// What gives way when the dashboard's parts do not all fit its height: with eight lanes the
// step-time bars, the strip and the table grow by a row each, and at 1280x720 they left the
// charts ~50 px tall, axis titles and ticks elided. A pure function of the parts' heights (px),
// so the order is tested without a window.
namespace devicerace::ui {

struct DashboardHeights {
    int available = 0;                 // the dashboard's height
    int rest = 0;                      // everything but charts, bars, strip and table, with their spacing
    int spacing = 0;                   // between two of the layout's items
    int chartMin = 0;                  // a chart whose plot still reads (ticks, axis titles unelided)
    int gridChartMin = 0;              // the same with its legend (the grid arrangement shows legends)
    int chartGap = 0;                  // between the two rows of the grid arrangement
    bool gridAllowed = false;          // tall enough for two rows of charts and not presenting
    int barsFull = 0, barsCompact = 0; // 0: no bars shown
    int stripFull = 0, stripCompact = 0;
    int tableFull = 0, tableMin = 0; // 0: no table shown (presentation)
    bool mayHideBars = false;        // presentation: no scrolling, so the bars can go
};

struct DashboardFit {
    bool grid = false;         // two rows of charts with the device panel
    bool compactBars = false;  // thinner bar rows
    bool compactStrip = false; // tighter strip rows
    int tableHeight = 0;       // the table's height (its full height unless it had to give way)
    bool hideBars = false;
    int chartsHeight = 0; // what the charts get (below chartMin: the dashboard scrolls)
};

/// In order, until the charts have chartMin: the bars' rows thin, the strip's rows tighten, the
/// table scrolls (down to tableMin), and in presentation the bars go. The grid arrangement only
/// where everything fits at full size with two rows of charts.
DashboardFit fitDashboard(const DashboardHeights& h);

} // namespace devicerace::ui
