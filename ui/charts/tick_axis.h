#pragma once
// Puts computed ticks (axis_ticks.h) on a QtCharts axis: a QCategoryAxis with one label at each
// tick value, so QtCharts draws the gridlines there and never formats a number itself.
// GUI thread only.
#include <functional>

#include "axis_ticks.h"

class QCategoryAxis;
class QFont;

namespace devicerace::ui {

/// Shows `ticks` on `axis` (labels on the values) and sets its range; the categories are
/// rebuilt only when the ticks changed.
void applyTicks(QCategoryAxis* axis, const AxisTicks& ticks);

/// The densest ticks from `make(maxTicks)` whose labels all fit along `length` pixels
/// of a horizontal (or vertical) axis in `font` without QtCharts eliding any of them.
AxisTicks fitTicks(const std::function<AxisTicks(int)>& make, const QFont& font, double length, bool horizontal);

} // namespace devicerace::ui
