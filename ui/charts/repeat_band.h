#pragma once
// The band a lane's curves draw across the repeats of a race ("is the gap real?"):
// at each x, the lowest and highest of the repeats' (smoothed) curves, filled behind the lines.
// Pure functions; GUI thread or any.
#include <QList>
#include <QPointF>

#include <cstdint>
#include <span>
#include <vector>

namespace devicerace::ui {

struct LaneHistory;

/// One repeat's curve of one lane: x ascending (equal x allowed), y as drawn.
struct BandCurve {
    std::span<const double> x, y;
};

/// The envelope of `curves` over [lo, hi], sampled at `points` evenly spaced x positions
/// (linear between a curve's points; a curve covers [its first x, its last x]). One closed
/// polygon per run of positions that at least two curves cover: the upper edge left to right,
/// then the lower edge right to left. Empty with fewer than two curves.
std::vector<QList<QPointF>> envelopeBands(const std::vector<BandCurve>& curves, double lo, double hi, int points);

/// A lane's other repeats, by lane index of the window's histories: finished repeats of the
/// live race, or the earlier repeats of a recorded repeat set. `generation` changes whenever a
/// pointer may have changed meaning (charts drop their caches then).
struct BandSources {
    std::uint64_t generation = 0;
    std::vector<std::vector<const LaneHistory*>> perLane;
};

} // namespace devicerace::ui
