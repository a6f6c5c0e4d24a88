#pragma once
// One redraw tick's painting, as the GUI benches measure it (bench/gui_redraw.cpp,
// bench/gui_soak.cpp): deliver the window's events, where each changed chart paints once, then
// repaint synchronously any chart those events left unpainted, so every tick paints every chart
// exactly once. Counting paints (SafeChartView::paintCount) keeps the figure honest: until
// 2026-11-24 both benches painted each chart twice a tick.
#include <QApplication>
#include <QElapsedTimer>

#include <cstdint>
#include <vector>

#include "charts/metric_chart.h"
#include "charts/safe_chart_view.h"

namespace devicerace::bench {

struct ChartPaintTick {
    double eventsMs = 0;  ///< the window's events, in which the charts paint
    double repaintMs = 0; ///< charts the events left unpainted, repainted synchronously
    std::uint64_t paints = 0;
};

template <typename Charts>
ChartPaintTick paintCharts(const Charts& charts) {
    ChartPaintTick tick;
    std::vector<std::uint64_t> seen;
    for (const ui::MetricChart* c : charts) {
        seen.push_back(c->view()->paintCount());
    }
    QElapsedTimer clock;
    clock.start();
    QApplication::processEvents();
    tick.eventsMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
    std::size_t i = 0;
    for (ui::MetricChart* c : charts) {
        if (c->view()->paintCount() == seen[i]) {
            c->view()->viewport()->repaint();
        }
        tick.paints += c->view()->paintCount() - seen[i];
        ++i;
    }
    tick.repaintMs = static_cast<double>(clock.nsecsElapsed()) / 1e6 - tick.eventsMs;
    return tick;
}

} // namespace devicerace::bench
