#pragma once
// The window's themes: the dark palette (every palette role a widget reads, disabled controls
// included), and the application-wide switch between it and the light one, so dialogs, message
// boxes, file pickers and tooltips follow the window. GUI thread only.
#include <QPalette>

namespace devicerace::ui {

/// The dark palette (light text on near-black; disabled text dimmed, alternate rows dark).
QPalette darkPalette();
/// The application's light palette: its palette before the first `applyApplicationTheme`.
QPalette lightPalette();
/// Gives the whole application the dark or the light palette: the window and every top-level
/// window it opens (a dialog does not inherit its parent's palette, the application's it does),
/// tooltips included.
void applyApplicationTheme(bool dark);

} // namespace devicerace::ui
