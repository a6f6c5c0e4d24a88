#include "video_export.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QPainter>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>

#include <cmath>
#include <limits>

#include "charts/metric_chart.h"
#include "dashboard.h"
#include "race_controller.h"
#include "race_strip.h"
#include "theme.h"

namespace devicerace::ui {

namespace {
// Presentation fonts scale with the frame height as on a screen of that height.
constexpr double kPixelsPerFontScale = 540.0;
// How long ffmpeg may take to finish after the last frame (ms).
constexpr int kEncoderFinishMs = 120000;
// Largest frame side accepted (pixels): 8K.
constexpr int kMaxSide = 7680;

QString tail(const QByteArray& text) {
    const QString s = QString::fromLocal8Bit(text).trimmed();
    return s.size() > 600 ? s.right(600) : s;
}

QStringList encoderArguments(const VideoOptions& o) {
    QStringList args = {
        QStringLiteral("-hide_banner"), QStringLiteral("-loglevel"),
        QStringLiteral("error"),        QStringLiteral("-y"),
        QStringLiteral("-f"),           QStringLiteral("rawvideo"),
        QStringLiteral("-pix_fmt"),     QStringLiteral("bgra"),
        QStringLiteral("-s"),           QStringLiteral("%1x%2").arg(o.size.width()).arg(o.size.height()),
        QStringLiteral("-r"),           QString::number(o.fps),
        QStringLiteral("-i"),           QStringLiteral("-"),
        QStringLiteral("-an")};
    if (o.path.endsWith(QStringLiteral(".gif"), Qt::CaseInsensitive)) {
        // One palette for the whole clip (lines and text stay crisp), looping forever.
        args << QStringLiteral("-vf")
             << QStringLiteral(
                    "split[a][b];[a]palettegen=stats_mode=diff[p];[b][p]paletteuse=dither=bayer:bayer_scale=3")
             << QStringLiteral("-loop") << QStringLiteral("0");
    } else {
        args << QStringLiteral("-c:v") << QStringLiteral("libx264") << QStringLiteral("-preset")
             << QStringLiteral("veryfast") << QStringLiteral("-crf") << QStringLiteral("20")
             << QStringLiteral("-pix_fmt") << QStringLiteral("yuv420p") << QStringLiteral("-movflags")
             << QStringLiteral("+faststart");
    }
    return args << o.path;
}

} // namespace

QString ffmpegProgram() {
    const QString own = qEnvironmentVariable("DEVICERACE_FFMPEG");
    if (!own.isEmpty()) {
        return QFileInfo(own).isExecutable() ? own : QString();
    }
    return QStandardPaths::findExecutable(QStringLiteral("ffmpeg"));
}

int videoFrameCount(double raceSeconds, double fps, double speed) {
    if (!(raceSeconds > 0) || !(fps > 0) || !(speed > 0)) {
        return 1;
    }
    return static_cast<int>(std::ceil(raceSeconds / speed * fps - 1e-9)) + 1;
}

QSize parseVideoSize(const QString& text) {
    static const QRegularExpression re(QStringLiteral("^(\\d{2,5})x(\\d{2,5})$"));
    const auto m = re.match(text.trimmed());
    if (!m.hasMatch()) {
        return {};
    }
    const QSize s(m.captured(1).toInt(), m.captured(2).toInt());
    if (s.width() % 2 || s.height() % 2 || s.width() > kMaxSide || s.height() > kMaxSide) {
        return {};
    }
    return s;
}

VideoResult exportVideo(const VideoOptions& o, const std::function<bool(int, int)>& progress) {
    VideoResult result;
    if (o.recordings.isEmpty()) {
        result.error = QObject::tr("no recording to render: open a recording, or race with recording on");
        return result;
    }
    if (!o.size.isValid() || o.size.width() % 2 || o.size.height() % 2 || !(o.fps > 0) || !(o.speed > 0)) {
        result.error = QObject::tr("video size must be WIDTHxHEIGHT with even numbers; fps and speed above 0");
        return result;
    }
    const QString ffmpeg = ffmpegProgram();
    if (ffmpeg.isEmpty()) {
        result.error =
            QObject::tr("%1: cannot encode video: the ffmpeg program was not found. Install it (Debian/Ubuntu: "
                        "sudo apt-get install ffmpeg) or point DEVICERACE_FFMPEG at one.")
                .arg(o.path);
        return result;
    }
    // The frames come from a dashboard of its own, never shown, playing the recordings.
    RaceController race;
    for (const auto& dir : o.recordings) {
        QString error;
        if (!race.addRecording(dir, &error)) {
            result.error = error;
            return result;
        }
    }
    race.setReplayTime(0);
    Dashboard dashboard(&race);
    dashboard.setAttribute(Qt::WA_DontShowOnScreen);
    dashboard.setPalette(o.dark ? darkPalette() : lightPalette());
    dashboard.setAutoFillBackground(true);
    dashboard.resize(o.size);
    dashboard.setPresentation(true, std::max(1.0, o.size.height() / kPixelsPerFontScale));
    dashboard.setDark(o.dark);
    dashboard.show();
    dashboard.onRaceStarted();
    // The whole race on one fixed time axis: lanes run across it as the video plays.
    dashboard.setFixedXMax(race.replayLength());
    QStringList names;
    for (const auto& lane : race.lanes()) {
        names << lane.name;
    }
    dashboard.setHeadline(names.join(QObject::tr(" vs ")));
    QApplication::processEvents();

    QProcess encoder;
    encoder.setProgram(ffmpeg);
    encoder.setArguments(encoderArguments(o));
    encoder.start();
    if (!encoder.waitForStarted()) {
        result.error = QObject::tr("%1: cannot start %2: %3").arg(o.path, ffmpeg, encoder.errorString());
        return result;
    }
    const double length = race.replayLength();
    const int frames = videoFrameCount(length, o.fps, o.speed);
    QImage image(o.size, QImage::Format_ARGB32); // bytes B, G, R, A on little-endian: ffmpeg's bgra
    QElapsedTimer clock;
    clock.start();
    for (int i = 0; i < frames; ++i) {
        // The last frame is the race's final state: every sample played, whatever its time.
        race.setReplayTime(i + 1 == frames ? std::numeric_limits<double>::infinity()
                                           : std::min(length, i * o.speed / o.fps));
        race.poll();
        dashboard.refresh();              // charts too: nothing is "running", so no pacing
        QApplication::sendPostedEvents(); // layout requests from the strip and labels
        image.fill(dashboard.palette().color(QPalette::Window));
        {
            QPainter painter(&image);
            dashboard.render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
        }
        const auto bytes = static_cast<qint64>(image.sizeInBytes());
        if (encoder.write(reinterpret_cast<const char*>(image.constBits()), bytes) != bytes ||
            (encoder.bytesToWrite() > 0 && !encoder.waitForBytesWritten(60000))) {
            encoder.kill();
            encoder.waitForFinished();
            result.error = QObject::tr("%1: the encoder stopped taking frames: %2")
                               .arg(o.path, tail(encoder.readAllStandardError()));
            QFile::remove(o.path);
            return result;
        }
        if (i + 1 == frames) {
            for (const auto& t : dashboard.strip()->texts()) {
                result.finalTexts << t.text;
            }
        }
        if (progress && !progress(i + 1, frames)) {
            encoder.kill();
            encoder.waitForFinished();
            QFile::remove(o.path);
            result.error = QObject::tr("%1: cancelled").arg(o.path);
            return result;
        }
    }
    encoder.closeWriteChannel();
    if (!encoder.waitForFinished(kEncoderFinishMs) || encoder.exitStatus() != QProcess::NormalExit ||
        encoder.exitCode() != 0) {
        result.error = QObject::tr("%1: ffmpeg failed (exit %2): %3")
                           .arg(o.path)
                           .arg(encoder.exitCode())
                           .arg(tail(encoder.readAllStandardError()));
        QFile::remove(o.path);
        return result;
    }
    result.frames = frames;
    result.seconds = frames / o.fps;
    result.renderFps = frames / std::max(1e-9, static_cast<double>(clock.nsecsElapsed()) / 1e9);
    return result;
}

} // namespace devicerace::ui
