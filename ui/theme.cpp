#include "theme.h"

#include <QApplication>
#include <QToolTip>

#include <optional>

namespace devicerace::ui {

QPalette darkPalette() {
    QPalette p;
    const QColor text(235, 235, 235);
    p.setColor(QPalette::Window, QColor(30, 30, 34));
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, QColor(24, 24, 28));
    p.setColor(QPalette::AlternateBase, QColor(40, 40, 46)); // not the light default under light text
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(45, 45, 50));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, QColor(255, 120, 120));
    p.setColor(QPalette::Light, QColor(70, 70, 76));
    p.setColor(QPalette::Midlight, QColor(58, 58, 64));
    p.setColor(QPalette::Mid, QColor(70, 70, 76));
    p.setColor(QPalette::Dark, QColor(20, 20, 22));
    p.setColor(QPalette::Shadow, QColor(10, 10, 10));
    p.setColor(QPalette::Highlight, QColor(0x2a, 0x6f, 0xb0));
    p.setColor(QPalette::HighlightedText, QColor(255, 255, 255));
    p.setColor(QPalette::ToolTipBase, QColor(45, 45, 50));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::Link, QColor(0x7c, 0xc4, 0xff));
    // The "auto"/"default" hints in empty fields: visible, but clearly not a value.
    p.setColor(QPalette::PlaceholderText, QColor(150, 150, 158));
    // Disabled controls must look disabled (the setup while racing).
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText}) {
        p.setColor(QPalette::Disabled, role, QColor(118, 118, 124));
    }
    p.setColor(QPalette::Disabled, QPalette::Base, QColor(34, 34, 38));
    p.setColor(QPalette::Disabled, QPalette::Button, QColor(36, 36, 40));
    p.setColor(QPalette::Disabled, QPalette::PlaceholderText, QColor(96, 96, 102));
    return p;
}

namespace {
struct Light {
    QPalette application;
    QPalette toolTip;
};
std::optional<Light>& light() {
    static std::optional<Light> saved;
    return saved;
}
} // namespace

QPalette lightPalette() { return light() ? light()->application : QApplication::palette(); }

void applyApplicationTheme(bool dark) {
    if (!light()) {
        light() = Light{QApplication::palette(), QToolTip::palette()};
    }
    if (dark) {
        const QPalette p = darkPalette();
        QApplication::setPalette(p);
        QToolTip::setPalette(p);
    } else {
        QApplication::setPalette(light()->application);
        QToolTip::setPalette(light()->toolTip);
    }
    // Qt posts the change to the widgets: delivered now, the window reads its new palette at once.
    QCoreApplication::sendPostedEvents(nullptr, QEvent::ApplicationPaletteChange);
}

} // namespace devicerace::ui
