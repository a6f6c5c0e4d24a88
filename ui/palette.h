#pragma once
// Lane colours: the Okabe-Ito colour-blind-safe palette, one colour per lane everywhere.
#include <QColor>

namespace devicerace::ui {

/// The default colour of the lane at `index` (wraps after 8).
QColor laneColor(int index);

} // namespace devicerace::ui
