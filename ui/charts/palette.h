#pragma once
// Lane colours: a colour-blind-safe palette, and lane text that stays readable (WCAG 4.5:1)
// on light and dark backgrounds. Thread-safe (pure functions).
#include <QColor>

namespace devicerace::ui {

/// The colour of lane `index` (Okabe & Ito palette, repeating).
QColor laneColor(int index);
/// WCAG 2 contrast ratio of two colours, 1 to 21.
double contrastRatio(const QColor& a, const QColor& b);
/// `color`, lightened or darkened just enough to reach `minRatio` against `background`
/// (the hue stays recognisable): lane names in the strip, the table and exports.
QColor readableOn(const QColor& color, const QColor& background, double minRatio = 4.5);
/// The warning amber (synthetic data, a preset's notes, the stage's note under the lanes),
/// readable on `background`: a bright amber on dark backgrounds, a deep one on light.
QColor warningOn(const QColor& background, double minRatio = 4.5);
/// The failure red (a failed or diverged lane), readable on `background`.
QColor failureOn(const QColor& background, double minRatio = 4.5);

} // namespace devicerace::ui
