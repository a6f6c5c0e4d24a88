#pragma once
// Axis ticks that read: 1-2-5 steps, thousands separators, time as s / m:ss / h:mm:ss by
// range, logarithmic decades. Pure functions (no widgets), unit-tested. Thread-safe.
#include <QString>
#include <QStringList>

#include <optional>
#include <vector>

namespace devicerace::ui {

/// The ticks of one axis. For a log axis `lo`, `hi` and `values` are log10 of the data values.
struct AxisTicks {
    double lo = 0, hi = 1;      // the axis range (covers the data; ends on ticks unless fixed)
    double step = 0;            // distance between ticks (0 on a log axis)
    std::vector<double> values; // tick positions, ascending, within [lo, hi]
    QStringList labels;         // one per value, unique
    int style = 0;              // time axes: the TimeStyle the labels use
};

/// How time labels are written; chosen from the largest value on the axis.
enum class TimeStyle { Seconds, MinSec, HourMinSec };
/// The style of `ticks` made by timeTicks().
inline TimeStyle timeStyleOf(const AxisTicks& ticks) { return static_cast<TimeStyle>(ticks.style); }

/// The smallest 1-2-5 × 10^k step that divides `span` into at most `maxTicks - 1` intervals.
double niceStep(double span, int maxTicks);

/// Linear ticks over [lo, hi]. With `extend` the range grows outward to whole steps (auto
/// scaling); without, it stays as given (a zoomed range). With `anchor` (a target line) a
/// coarser 1-2-5 step that puts a gridline on the anchor is preferred when one fits.
AxisTicks niceTicks(double lo, double hi, int maxTicks, bool extend = true, std::optional<double> anchor = {});

/// Time ticks (seconds) with steps of 1-2-5 s, 10/15/30 s, 1/2/5/10/15/30 min, 1/2/3/6/12 h, ...
AxisTicks timeTicks(double lo, double hi, int maxTicks, bool extend = true);

/// Log ticks for data in [lo, hi] (both > 0): whole decades, with 2 and 5 in between when
/// there is room. The range extends to the enclosing ticks.
AxisTicks logTicks(double lo, double hi, int maxTicks);

/// "61,204", "0.85", "1,200.5": fixed decimals, comma-grouped thousands, no "-0".
QString formatNumber(double value, int decimals);
/// A tick label: formatNumber, except from 100,000 up, whole thousands as "500k" and whole
/// millions (to three decimals) as "2M", "1.5M" (a language model's tokens/s: "2,000,000"
/// labels took the plot's width at 1280 px).
QString formatTick(double value, int decimals);
/// Decimals that show a multiple of `step` exactly (0 for steps >= 1).
int decimalsFor(double step);
TimeStyle timeStyleFor(double maxSeconds);
/// "45", "2:05", "1:02:03" (fractions of a second kept when `decimals` > 0).
QString formatTime(double seconds, TimeStyle style, int decimals = 0);
/// The unit suffix for an axis title: "s", "m:ss", "h:mm:ss".
QString timeUnit(TimeStyle style);

/// True when throughputs spread over more than `ratio` (e.g. 10): a linear axis would flatten
/// the slow lanes. Non-positive rates are ignored.
bool wantsLogAxis(const std::vector<double>& rates, double ratio = 10.0);

} // namespace devicerace::ui
