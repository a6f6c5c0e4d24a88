#pragma once
// The window's dark theme: every palette role a widget reads, disabled controls included.
// GUI thread only.
#include <QPalette>

namespace devicerace::ui {

/// The dark palette (light text on near-black; disabled text dimmed, alternate rows dark).
QPalette darkPalette();

} // namespace devicerace::ui
