#pragma once
// Video export: renders a race (any recording, or a finished race recorded to disk) frame by
// frame offscreen from its recorded samples — never a screen grab — and pipes the raw frames
// to Debian's ffmpeg program (MP4/H.264 or GIF). The app stays unlinked from any codec.
// GUI thread only.
#include <QObject>
#include <QSize>
#include <QString>
#include <QStringList>

#include <functional>

namespace devicerace::ui {

struct VideoOptions {
    QString path;           // .mp4 (H.264) or .gif
    QStringList recordings; // recording folders, raced side by side
    QSize size{1280, 720};  // pixels; even numbers (H.264 4:2:0)
    double fps = 30;        // frames per second of the video
    double speed = 10;      // race seconds per video second (a 5-minute race at 10x: 30 s)
    bool dark = true;       // presentation theme
};

/// The result of an export: an empty error on success.
struct VideoResult {
    QString error;
    int frames = 0;
    double seconds = 0;     // video length
    double renderFps = 0;   // frames rendered and encoded per second of wall time
    QStringList finalTexts; // the race strip's texts on the last frame (the race's final state)
};

/// The ffmpeg program (DEVICERACE_FFMPEG, else ffmpeg on PATH), or "" when there is none.
QString ffmpegProgram();

/// Frames a race of `raceSeconds` gives at `fps` and `speed`: one at t = 0, then one per
/// 1/fps of video, the last showing the finish.
int videoFrameCount(double raceSeconds, double fps, double speed);

/// Parses "1280x720"; an invalid size when the text is not WIDTHxHEIGHT with even numbers.
QSize parseVideoSize(const QString& text);

/// Renders and encodes the video. `progress(frame, frames)` is called after each frame;
/// returning false cancels (the partial file is removed).
VideoResult exportVideo(const VideoOptions& options, const std::function<bool(int, int)>& progress = {});

} // namespace devicerace::ui
