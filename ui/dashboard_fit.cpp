#include "dashboard_fit.h"

#include <algorithm>

namespace devicerace::ui {

DashboardFit fitDashboard(const DashboardHeights& h) {
    DashboardFit fit;
    fit.tableHeight = h.tableFull;
    auto room = [&] {
        const int bars = fit.hideBars ? 0 : (fit.compactBars ? h.barsCompact : h.barsFull);
        const int barsSpacing = fit.hideBars && h.barsFull > 0 ? h.spacing : 0; // a hidden item's
        return h.available - h.rest - bars + barsSpacing - (fit.compactStrip ? h.stripCompact : h.stripFull) -
               fit.tableHeight;
    };
    if (h.gridAllowed && room() >= 2 * h.gridChartMin + h.chartGap) {
        fit.grid = true;
        fit.chartsHeight = room();
        return fit;
    }
    if (room() < h.chartMin && h.barsFull > h.barsCompact) {
        fit.compactBars = true;
    }
    if (room() < h.chartMin && h.stripFull > h.stripCompact) {
        fit.compactStrip = true;
    }
    if (const int short_ = h.chartMin - room(); short_ > 0 && h.tableFull > h.tableMin) {
        fit.tableHeight = std::max(h.tableMin, h.tableFull - short_);
    }
    if (room() < h.chartMin && h.mayHideBars && h.barsFull > 0) {
        fit.hideBars = true;
        // Without the bars the strip may read at its full row height again.
        if (fit.compactStrip && room() - (h.stripFull - h.stripCompact) >= h.chartMin) {
            fit.compactStrip = false;
        }
    }
    fit.chartsHeight = room();
    return fit;
}

} // namespace devicerace::ui
