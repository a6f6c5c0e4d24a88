#include "palette.h"

#include <array>

namespace devicerace::ui {

QColor laneColor(int index) {
    // Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision deficiency.
    static const std::array<QRgb, 8> kColors = {0xE69F00, 0x0072B2, 0x009E73, 0xD55E00,
                                                0xCC79A7, 0x56B4E9, 0xF0E442, 0x999999};
    return QColor::fromRgb(kColors[static_cast<std::size_t>(index < 0 ? 0 : index) % kColors.size()]);
}

} // namespace devicerace::ui
