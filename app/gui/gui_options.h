#pragma once
// The window's command line: the CLI's race options plus --start, --presentation and
// --screenshot FILE. Parsing is separate from main() so it can be tested.
#include <QSize>
#include <QString>
#include <QStringList>

#include <optional>

#include "devicerace/lane_spec.h"

namespace devicerace::gui {

struct GuiOptions {
    std::optional<RaceSpec> race; // set when any race option was given
    bool start = false;
    bool presentation = false;
    QString screenshot;
    QStringList replays;    // recordings to play beside (or instead of) a live race
    double replaySpeed = 1; // 0: instantly
    bool record = true;
    QString recordDir;
    QString video;          // render the replays to this file (.mp4 / .gif) and exit
    double videoSpeed = 10; // race seconds per video second
    double videoFps = 30;
    QSize videoSize{1280, 720};
    std::optional<bool> dark; // --theme dark / light: the window's theme, normal and presentation mode
    QSize windowSize; // --window-size: the window's first size (kept inside the screen; with --screenshot, as asked)
    QString error;    // non-empty: bad usage, print and exit 2
};

GuiOptions parseGuiOptions(const QStringList& arguments);

} // namespace devicerace::gui
