#include "tick_axis.h"

#include <QFontMetricsF>
#include <QtCharts/QCategoryAxis>

#include <algorithm>

namespace devicerace::ui {

namespace {
// Pixels between two labels besides their own width (QtCharts pads each label by a few
// pixels and elides what would touch its neighbour).
constexpr double kLabelGap = 18;
// Vertical axes: a label every ~2 text lines reads comfortably.
constexpr double kLinesPerTick = 2.0;
constexpr int kMostTicks = 12;
} // namespace

void applyTicks(QCategoryAxis* axis, const AxisTicks& ticks) {
    const QStringList current = axis->categoriesLabels();
    bool same = current == ticks.labels;
    for (qsizetype i = 0; same && i < current.size(); ++i) {
        same = axis->endValue(current[i]) == ticks.values[static_cast<std::size_t>(i)];
    }
    if (!same) {
        for (const auto& label : current) {
            axis->remove(label);
        }
        if (!ticks.values.empty()) {
            // The first category starts below the range: its label then sits on the first tick.
            const double first = ticks.values.front();
            const double below = ticks.values.size() > 1 ? ticks.values[1] - first : 1.0;
            axis->setStartValue(first - below);
            for (std::size_t i = 0; i < ticks.values.size(); ++i) {
                axis->append(ticks.labels[static_cast<qsizetype>(i)], ticks.values[i]);
            }
        }
    }
    axis->setRange(ticks.lo, ticks.hi);
}

AxisTicks fitTicks(const std::function<AxisTicks(int)>& make, const QFont& font, double length, bool horizontal) {
    const QFontMetricsF fm(font);
    if (!horizontal) {
        // Two lines a tick; and no two labels closer than a line and a fifth, or QtCharts drops
        // one: a target tick (0.85) beside an end tick (0.90) on a 130 px accuracy plot did.
        for (int n = std::clamp(static_cast<int>(length / (fm.height() * kLinesPerTick)), 2, kMostTicks); n > 2; --n) {
            auto t = make(n);
            if (t.hi <= t.lo) {
                return t;
            }
            double closest = length;
            for (std::size_t i = 1; i < t.values.size(); ++i) {
                closest = std::min(closest, (t.values[i] - t.values[i - 1]) / (t.hi - t.lo) * length);
            }
            if (closest >= 1.2 * fm.height()) {
                return t;
            }
        }
        return make(2);
    }
    for (int n = std::clamp(static_cast<int>(length / 40), 2, kMostTicks); n > 2; --n) {
        auto t = make(n);
        double widest = 0;
        for (const auto& label : t.labels) {
            widest = std::max(widest, fm.horizontalAdvance(label));
        }
        // QtCharts gives each label about length / ticks pixels (tst_window_layout checks it).
        if ((widest + kLabelGap) * static_cast<double>(t.values.size()) <= length) {
            return t;
        }
    }
    return make(2);
}

} // namespace devicerace::ui
