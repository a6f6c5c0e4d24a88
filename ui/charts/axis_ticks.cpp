#include "axis_ticks.h"

#include <QLocale>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

namespace devicerace::ui {

namespace {

// Relative slack when comparing tick positions: a value within 1e-9 steps of a tick is on it.
constexpr double kEps = 1e-9;

double prevNiceStep(double step) {
    const double mag = std::pow(10.0, std::floor(std::log10(step) + kEps));
    const double m = step / mag;
    if (m < 1.5) {
        return 0.5 * mag;
    }
    return m < 3.5 ? mag : 2 * mag;
}

double nextNiceStep(double step) {
    const double mag = std::pow(10.0, std::floor(std::log10(step) + kEps));
    const double m = step / mag;
    if (m < 1.5) {
        return 2 * mag;
    }
    if (m < 3.5) {
        return 5 * mag;
    }
    return 10 * mag;
}

// Tick values k*step covering [lo, hi]: outward (extend) or inward.
std::vector<double> stepValues(double lo, double hi, double step, bool extend) {
    const double first = extend ? std::floor(lo / step + kEps) : std::ceil(lo / step - kEps);
    const double last = extend ? std::ceil(hi / step - kEps) : std::floor(hi / step + kEps);
    std::vector<double> out;
    for (double k = first; k <= last + 0.5; k += 1) {
        const double v = k * step;
        out.push_back(std::abs(v) < step * kEps ? 0.0 : v);
    }
    return out;
}

bool onGrid(double value, double step) {
    const double q = value / step;
    return std::abs(q - std::round(q)) < 1e-6;
}

AxisTicks fromValues(std::vector<double> values, double lo, double hi, double step, bool extend) {
    AxisTicks t;
    t.step = step;
    t.values = std::move(values);
    t.lo = extend && !t.values.empty() ? std::min(lo, t.values.front()) : lo;
    t.hi = extend && !t.values.empty() ? std::max(hi, t.values.back()) : hi;
    return t;
}

// Seconds per step for time axes past a minute's worth of 1-2-5 steps: clock-friendly units.
constexpr std::array<double, 16> kTimeSteps = {1,   2,   5,   10,   15,   30,   60,    120,
                                               300, 600, 900, 1800, 3600, 7200, 10800, 21600};

} // namespace

double niceStep(double span, int maxTicks) {
    const int intervals = std::max(1, maxTicks - 1);
    if (!(span > 0) || !std::isfinite(span)) {
        return 1;
    }
    const double raw = span / intervals;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
        if (m * mag >= raw * (1 - kEps)) {
            return m * mag;
        }
    }
    return 10 * mag;
}

AxisTicks niceTicks(double lo, double hi, int maxTicks, bool extend, std::optional<double> anchor) {
    if (!std::isfinite(lo) || !std::isfinite(hi)) {
        lo = 0;
        hi = 1;
    }
    if (hi < lo) {
        std::swap(lo, hi);
    }
    if (hi == lo) {
        const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
        hi = lo + pad;
        if (lo != 0) {
            lo -= pad;
        }
    }
    maxTicks = std::max(2, maxTicks);
    double step = niceStep(hi - lo, maxTicks);
    auto values = stepValues(lo, hi, step, extend);
    while (static_cast<int>(values.size()) > maxTicks) { // extending added an interval
        step = nextNiceStep(step);
        values = stepValues(lo, hi, step, extend);
    }
    while (values.size() < 2) { // a fixed (zoomed) range between two ticks: go finer
        step = prevNiceStep(step);
        values = stepValues(lo, hi, step, extend);
    }
    if (anchor && *anchor >= lo && *anchor <= hi && !onGrid(*anchor, step)) {
        // A target line reads best on a gridline: take the next finer or a coarser 1-2-5 step
        // that has one there, as long as the axis keeps three to maxTicks ticks.
        for (double s : {prevNiceStep(step), nextNiceStep(step), nextNiceStep(nextNiceStep(step)),
                         nextNiceStep(nextNiceStep(nextNiceStep(step)))}) {
            auto v = stepValues(lo, hi, s, extend);
            if (onGrid(*anchor, s) && v.size() >= 3 && static_cast<int>(v.size()) <= maxTicks) {
                step = s;
                values = std::move(v);
                break;
            }
        }
    }
    int decimals = decimalsFor(step);
    if (anchor && *anchor >= lo && *anchor <= hi && !onGrid(*anchor, step) && values.size() >= 2) {
        // No 1-2-5 step within maxTicks has a gridline there: the anchor becomes a labelled tick
        // of its own, replacing the inner ticks that would crowd its label (the ends stay: they
        // are the range). Beside an end tick it stays unlabelled rather than overlap.
        const double crowd = 0.4 * step;
        if (std::abs(*anchor - values.front()) >= crowd && std::abs(*anchor - values.back()) >= crowd) {
            std::vector<double> kept{values.front()};
            for (std::size_t i = 1; i + 1 < values.size(); ++i) {
                if (std::abs(values[i] - *anchor) >= crowd) {
                    kept.push_back(values[i]);
                }
            }
            kept.push_back(values.back());
            while (static_cast<int>(kept.size()) + 1 > maxTicks && kept.size() > 2) {
                // the inner tick nearest the anchor makes room
                auto nearest = std::min_element(kept.begin() + 1, kept.end() - 1, [&](double a, double b) {
                    return std::abs(a - *anchor) < std::abs(b - *anchor);
                });
                kept.erase(nearest);
            }
            kept.insert(std::upper_bound(kept.begin(), kept.end(), *anchor), *anchor);
            values = std::move(kept);
            for (int d = decimals; d <= 6; ++d) { // enough decimals to write the anchor exactly
                if (std::abs(std::round(*anchor * std::pow(10.0, d)) - *anchor * std::pow(10.0, d)) < 1e-6) {
                    decimals = d;
                    break;
                }
            }
        }
    }
    auto t = fromValues(std::move(values), lo, hi, step, extend);
    for (double v : t.values) {
        t.labels << formatTick(v, decimals);
    }
    return t;
}

AxisTicks timeTicks(double lo, double hi, int maxTicks, bool extend) {
    if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo)) {
        lo = std::isfinite(lo) ? lo : 0;
        hi = lo + 1;
    }
    maxTicks = std::max(2, maxTicks);
    const TimeStyle style = timeStyleFor(std::max(std::abs(lo), std::abs(hi)));
    double step = niceStep(hi - lo, maxTicks);
    if (style != TimeStyle::Seconds && step >= 1) {
        // Minutes and hours divide into 15/30 s, 5/15/30 min, 3/6/12 h; days into 1-2-5 days.
        const double raw = (hi - lo) / (maxTicks - 1);
        step = 0;
        for (double s : kTimeSteps) {
            if (s >= raw * (1 - kEps)) {
                step = s;
                break;
            }
        }
        if (step == 0) {
            step = 86400 * niceStep(raw / 86400, 2);
        }
    }
    auto values = stepValues(lo, hi, step, extend);
    while (values.size() < 2) {
        step = prevNiceStep(step);
        values = stepValues(lo, hi, step, extend);
    }
    while (static_cast<int>(values.size()) > maxTicks) {
        const auto it = std::upper_bound(kTimeSteps.begin(), kTimeSteps.end(), step * (1 + kEps));
        step = style != TimeStyle::Seconds && it != kTimeSteps.end() ? *it : nextNiceStep(step);
        values = stepValues(lo, hi, step, extend);
    }
    auto t = fromValues(std::move(values), lo, hi, step, extend);
    t.style = static_cast<int>(style);
    const int decimals = decimalsFor(step);
    for (double v : t.values) {
        t.labels << formatTime(v, style, decimals);
    }
    return t;
}

AxisTicks logTicks(double lo, double hi, int maxTicks) {
    if (!(hi > 0) || !std::isfinite(hi)) {
        hi = 1;
    }
    if (!(lo > 0) || !std::isfinite(lo) || lo > hi) {
        lo = hi / 10;
    }
    if (lo == hi) {
        lo /= 2;
        hi *= 2;
    }
    maxTicks = std::max(2, maxTicks);
    const int dlo = static_cast<int>(std::floor(std::log10(lo) + kEps));
    const int dhi = static_cast<int>(std::ceil(std::log10(hi) - kEps));
    // Mantissa sets from fine to coarse; the first whose trimmed ticks fit is used.
    const std::vector<std::vector<double>> sets = {{1, 2, 5}, {1, 3}, {1}};
    std::vector<double> ticks;
    for (const auto& set : sets) {
        std::vector<double> all;
        for (int d = dlo; d <= dhi; ++d) {
            for (double m : set) {
                all.push_back(m * std::pow(10.0, d));
            }
        }
        // Keep the ticks inside [lo, hi] plus the nearest one outside on each side.
        auto first = std::upper_bound(all.begin(), all.end(), lo * (1 + kEps));
        auto last = std::lower_bound(all.begin(), all.end(), hi * (1 - kEps));
        first = first == all.begin() ? first : first - 1;
        last = last == all.end() ? last : last + 1;
        ticks.assign(first, last);
        if (static_cast<int>(ticks.size()) <= maxTicks) {
            break;
        }
    }
    if (static_cast<int>(ticks.size()) > maxTicks) {
        // Many decades: every k-th decade.
        for (int k = static_cast<int>(std::ceil(static_cast<double>(dhi - dlo) / (maxTicks - 1)));
             static_cast<int>(ticks.size()) > maxTicks; ++k) {
            ticks.clear();
            for (int d = dlo - ((dlo % k) + k) % k;; d += k) {
                ticks.push_back(std::pow(10.0, d));
                if (d >= dhi) {
                    break;
                }
            }
        }
    }
    AxisTicks t;
    for (double v : ticks) {
        t.values.push_back(std::log10(v));
        const int decimals = v >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(v) - kEps));
        t.labels << formatTick(v, decimals);
    }
    t.lo = t.values.front();
    t.hi = t.values.back();
    return t;
}

QString formatNumber(double value, int decimals) {
    decimals = std::clamp(decimals, 0, 12);
    if (std::abs(value) < 0.5 * std::pow(10.0, -decimals)) {
        value = 0; // never "-0" or "-0.00"
    }
    static const QLocale kLocale(QLocale::English, QLocale::UnitedStates); // "61,204.5"
    return kLocale.toString(value, 'f', decimals);
}

QString formatTick(double value, int decimals) {
    for (const auto& [unit, suffix, from] : {std::tuple{1e6, 'M', 1e6}, std::tuple{1e3, 'k', 1e5}}) {
        if (std::abs(value) < from) {
            continue;
        }
        for (int d = 0; d <= 3; ++d) {
            const double scaled = value / unit * std::pow(10.0, d);
            if (std::abs(scaled - std::round(scaled)) < 1e-6) {
                return formatNumber(value / unit, d) + QLatin1Char(suffix);
            }
        }
    }
    return formatNumber(value, decimals);
}

int decimalsFor(double step) {
    if (!(step > 0) || step >= 1 - kEps) {
        return 0;
    }
    return static_cast<int>(std::ceil(-std::log10(step) - 1e-6));
}

TimeStyle timeStyleFor(double maxSeconds) {
    // Under two minutes plain seconds read best; under an hour m:ss; then h:mm:ss.
    if (maxSeconds < 120) {
        return TimeStyle::Seconds;
    }
    return maxSeconds <= 3600 ? TimeStyle::MinSec : TimeStyle::HourMinSec; // "60:00" ends an hour
}

QString formatTime(double seconds, TimeStyle style, int decimals) {
    if (style == TimeStyle::Seconds) {
        return formatNumber(seconds, decimals);
    }
    const QString sign = seconds < 0 ? QStringLiteral("-") : QString();
    const double scale = std::pow(10.0, decimals);
    const double rounded = std::round(std::abs(seconds) * scale) / scale;
    const auto whole = static_cast<long long>(std::floor(rounded));
    const double frac = rounded - static_cast<double>(whole);
    QString secs = QStringLiteral("%1").arg(whole % 60, 2, 10, QLatin1Char('0'));
    if (decimals > 0) {
        secs += QString::number(frac, 'f', decimals).mid(1); // ".5"
    }
    if (style == TimeStyle::MinSec) {
        return sign + QString::number(whole / 60) + QLatin1Char(':') + secs;
    }
    return sign + QString::number(whole / 3600) + QLatin1Char(':') +
           QStringLiteral("%1").arg((whole / 60) % 60, 2, 10, QLatin1Char('0')) + QLatin1Char(':') + secs;
}

QString timeUnit(TimeStyle style) {
    switch (style) {
    case TimeStyle::MinSec: return QStringLiteral("m:ss");
    case TimeStyle::HourMinSec: return QStringLiteral("h:mm:ss");
    case TimeStyle::Seconds: break;
    }
    return QStringLiteral("s");
}

bool wantsLogAxis(const std::vector<double>& rates, double ratio) {
    double lo = 0, hi = 0;
    for (double r : rates) {
        if (r > 0 && std::isfinite(r)) {
            lo = lo == 0 ? r : std::min(lo, r);
            hi = std::max(hi, r);
        }
    }
    return lo > 0 && hi / lo > ratio;
}

} // namespace devicerace::ui
