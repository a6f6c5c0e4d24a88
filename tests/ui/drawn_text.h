#pragma once
// What a widget drew, read from its pixels (colours set any way: palette or style sheet): its
// background (the commonest colour) and its text (of the fully opaque pixels, the one farthest
// from `background`, or from the drawn background when none is given).
#include <QColor>
#include <QHash>
#include <QImage>
#include <QWidget>

#include "charts/palette.h"

struct DrawnText {
    QColor text;
    QColor background;
};

inline DrawnText drawnText(QWidget& widget, const QColor& background = {}) {
    const QImage drawn = widget.grab().toImage().convertToFormat(QImage::Format_ARGB32);
    QHash<QRgb, int> counts;
    for (int y = 0; y < drawn.height(); ++y) {
        for (int x = 0; x < drawn.width(); ++x) {
            ++counts[drawn.pixel(x, y)];
        }
    }
    DrawnText out;
    int most = 0;
    for (auto it = counts.cbegin(); it != counts.cend(); ++it) {
        if (it.value() > most) {
            most = it.value();
            out.background = QColor::fromRgba(it.key());
        }
    }
    const QColor against = background.isValid() ? background : out.background;
    out.text = against;
    for (auto it = counts.cbegin(); it != counts.cend(); ++it) {
        const QColor c = QColor::fromRgba(it.key());
        if (c.alpha() == 255 &&
            devicerace::ui::contrastRatio(c, against) > devicerace::ui::contrastRatio(out.text, against)) {
            out.text = c;
        }
    }
    return out;
}
