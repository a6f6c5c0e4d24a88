#include "palette.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace devicerace::ui {

QColor laneColor(int index) {
    // Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
    static const std::array<QRgb, 8> kColors = {0xE69F00, 0x0072B2, 0x009E73, 0xD55E00,
                                                0xCC79A7, 0x56B4E9, 0xF0E442, 0x999999};
    return QColor::fromRgb(kColors[static_cast<std::size_t>(index < 0 ? 0 : index) % kColors.size()]);
}

} // namespace devicerace::ui

namespace devicerace::ui {

namespace {
double luminance(const QColor& c) {
    auto channel = [](double v) { return v <= 0.03928 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF());
}
} // namespace

double contrastRatio(const QColor& a, const QColor& b) {
    const double la = luminance(a), lb = luminance(b);
    return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

QColor readableOn(const QColor& color, const QColor& background, double minRatio) {
    if (contrastRatio(color, background) >= minRatio) {
        return color;
    }
    // Mix toward white on dark backgrounds, toward black on light ones, in small steps.
    const QColor target = luminance(background) < 0.18 ? QColor(Qt::white) : QColor(Qt::black);
    for (int i = 1; i <= 20; ++i) {
        const double t = i / 20.0;
        const QColor mixed = QColor::fromRgbF(static_cast<float>(color.redF() * (1 - t) + target.redF() * t),
                                              static_cast<float>(color.greenF() * (1 - t) + target.greenF() * t),
                                              static_cast<float>(color.blueF() * (1 - t) + target.blueF() * t));
        if (contrastRatio(mixed, background) >= minRatio) {
            return mixed;
        }
    }
    return target;
}

QColor warningOn(const QColor& background, double minRatio) {
    return readableOn(background.lightness() < 128 ? QColor(255, 196, 64) : QColor(160, 90, 0), background, minRatio);
}

QColor failureOn(const QColor& background, double minRatio) {
    return readableOn(background.lightness() < 128 ? QColor(235, 90, 90) : QColor(200, 50, 50), background, minRatio);
}

} // namespace devicerace::ui
