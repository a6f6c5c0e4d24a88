#include "repeat_band.h"

#include <algorithm>
#include <limits>

namespace devicerace::ui {

namespace {
// The curve's value at x, or nullopt-like NaN outside [first x, last x].
double valueAt(const BandCurve& c, double x) {
    const std::size_t n = std::min(c.x.size(), c.y.size());
    if (n == 0 || x < c.x[0] || x > c.x[n - 1]) {
        return std::numeric_limits<double>::quiet_NaN();
    }
    const auto end = c.x.begin() + static_cast<std::ptrdiff_t>(n);
    const auto it = std::lower_bound(c.x.begin(), end, x);
    const auto j = static_cast<std::size_t>(it - c.x.begin());
    if (j == 0 || c.x[j] == x) {
        return c.y[j];
    }
    const double x0 = c.x[j - 1], x1 = c.x[j];
    const double t = x1 > x0 ? (x - x0) / (x1 - x0) : 1.0;
    return c.y[j - 1] + t * (c.y[j] - c.y[j - 1]);
}
} // namespace

std::vector<QList<QPointF>> envelopeBands(const std::vector<BandCurve>& curves, double lo, double hi, int points) {
    std::vector<QList<QPointF>> bands;
    if (curves.size() < 2 || points < 2 || !(hi > lo)) {
        return bands;
    }
    QList<QPointF> upper, lower;
    auto close = [&] {
        if (upper.size() >= 2) {
            QList<QPointF> polygon = upper;
            std::reverse(lower.begin(), lower.end());
            polygon.append(lower);
            bands.push_back(std::move(polygon));
        }
        upper.clear();
        lower.clear();
    };
    for (int i = 0; i < points; ++i) {
        const double x = lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(points - 1);
        int covered = 0;
        double low = std::numeric_limits<double>::infinity(), high = -low;
        for (const auto& c : curves) {
            const double y = valueAt(c, x);
            if (y == y) { // not NaN
                ++covered;
                low = std::min(low, y);
                high = std::max(high, y);
            }
        }
        if (covered < 2) {
            close();
            continue;
        }
        upper.append(QPointF(x, high));
        lower.append(QPointF(x, low));
    }
    close();
    return bands;
}

} // namespace devicerace::ui
