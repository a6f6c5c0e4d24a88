// Video export: a recording rendered offscreen and encoded by ffmpeg; ffprobe checks the
// frame count, duration and size against the requested speed. Also the headless command
// line (devicerace --replay DIR --video out.mp4 ..., and --screenshot at a --window-size) and a
// clear error without ffmpeg.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>

#include "fake_recording.h"
#include "video_export.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

struct Probe {
    int width = 0, height = 0, frames = 0;
    double seconds = 0;
};

// ffprobe's view of the first video stream (frames counted by decoding).
std::optional<Probe> probe(const QString& path) {
    QProcess p;
    p.start(QStringLiteral("ffprobe"),
            {QStringLiteral("-v"), QStringLiteral("error"), QStringLiteral("-count_frames"),
             QStringLiteral("-select_streams"), QStringLiteral("v:0"), QStringLiteral("-show_entries"),
             QStringLiteral("stream=width,height,nb_read_frames:format=duration"), QStringLiteral("-of"),
             QStringLiteral("default=nw=1"), path});
    if (!p.waitForFinished(60000) || p.exitCode() != 0) {
        return std::nullopt;
    }
    Probe out;
    for (const auto& line : QString::fromUtf8(p.readAllStandardOutput()).split(QLatin1Char('\n'))) {
        const QString key = line.section(QLatin1Char('='), 0, 0), value = line.section(QLatin1Char('='), 1);
        if (key == QStringLiteral("width")) {
            out.width = value.toInt();
        } else if (key == QStringLiteral("height")) {
            out.height = value.toInt();
        } else if (key == QStringLiteral("nb_read_frames")) {
            out.frames = value.toInt();
        } else if (key == QStringLiteral("duration")) {
            out.seconds = value.toDouble();
        }
    }
    return out;
}

} // namespace

class TestVideoExport : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_recording;

private Q_SLOTS:
    void initTestCase() {
        if (ffmpegProgram().isEmpty() || QStandardPaths::findExecutable(QStringLiteral("ffprobe")).isEmpty()) {
            QSKIP("ffmpeg/ffprobe not installed (scripts/setup installs them)");
        }
        // A 60-second CPU lane beside one ten times faster.
        m_recording = m_dir.filePath(QStringLiteral("race"));
        QVERIFY(test::writeFakeRecording(m_recording, {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 170, 60},
                                                       {QStringLiteral("cuda:0"), QStringLiteral("cuda:0"), 1700, 6}}));
    }

    void frameCountAndDurationFollowTheSpeed_data() {
        QTest::addColumn<double>("speed");
        QTest::addColumn<double>("fps");
        QTest::addColumn<QSize>("size");
        QTest::newRow("10x, 10 fps, 640x360") << 10.0 << 10.0 << QSize(640, 360);
        QTest::newRow("20x, 24 fps, 1280x720") << 20.0 << 24.0 << QSize(1280, 720);
    }
    void frameCountAndDurationFollowTheSpeed() {
        QFETCH(double, speed);
        QFETCH(double, fps);
        QFETCH(QSize, size);
        VideoOptions o;
        o.path = m_dir.filePath(QStringLiteral("race %1x.mp4").arg(speed));
        o.recordings = {m_recording};
        o.speed = speed;
        o.fps = fps;
        o.size = size;
        int calls = 0, total = 0;
        const auto result = exportVideo(o, [&](int frame, int frames) {
            calls = frame;
            total = frames;
            return true;
        });
        QVERIFY2(result.error.isEmpty(), qPrintable(result.error));
        // 60 s of race at `speed`x: 60/speed seconds of video, one frame per 1/fps, plus t = 0.
        const int expected = static_cast<int>(std::ceil(60.0 / speed * fps)) + 1;
        QCOMPARE(result.frames, expected);
        QCOMPARE(calls, expected);
        QCOMPARE(total, expected);
        const auto p = probe(o.path);
        QVERIFY(p);
        QCOMPARE(p->frames, expected);
        QCOMPARE(p->width, size.width());
        QCOMPARE(p->height, size.height());
        QVERIFY2(std::abs(p->seconds - expected / fps) < 1.5 / fps, qPrintable(QString::number(p->seconds)));
        qInfo("%d frames at %dx%d: %.1f frames/s rendered and encoded", result.frames, size.width(), size.height(),
              result.renderFps);
    }

    // The last frame is the race's final state, whatever order its last samples came in: a
    // lane's final evaluation can end after the time its finish carries (the review's video
    // ended on "evaluating on the test set… acc 0.828", not done with 0.835).
    void theLastFrameIsTheFinalState() {
        const QString rec = m_dir.filePath(QStringLiteral("late-eval"));
        QVERIFY(test::writeFakeRecording(rec, {{QStringLiteral("slow"), QStringLiteral("cpu"), 170, 20},
                                               {QStringLiteral("fast"), QStringLiteral("cuda:0"), 1700, 2}}));
        QFile file(rec + QStringLiteral("/slow.jsonl"));
        QVERIFY(file.open(QIODevice::ReadOnly));
        QList<QByteArray> lines = file.readAll().trimmed().split('\n');
        file.close();
        auto finish = sampleFromJsonLine(lines.takeLast().toStdString()); // Finished at t = 20
        QVERIFY(finish.state == LaneState::Finished);
        MetricSample evaluating = finish, eval = finish;
        evaluating.state = LaneState::Evaluating;
        eval.kind = SampleKind::Eval;
        eval.time = finish.time + 1.5; // the evaluation took 1.5 s after the last step
        eval.accuracy = 0.8351;
        for (const auto& s : {evaluating, eval, finish}) {
            lines << QByteArray::fromStdString(toJsonLine(s));
        }
        QVERIFY(file.open(QIODevice::WriteOnly | QIODevice::Truncate));
        file.write(lines.join('\n') + '\n');
        file.close();
        VideoOptions o;
        o.path = m_dir.filePath(QStringLiteral("late-eval.mp4"));
        o.recordings = {rec};
        o.speed = 10;
        o.fps = 5;
        o.size = QSize(640, 360);
        const auto result = exportVideo(o, {});
        QVERIFY2(result.error.isEmpty(), qPrintable(result.error));
        const QString texts = result.finalTexts.join(QStringLiteral(" | "));
        QVERIFY2(!texts.contains(QStringLiteral("evaluating")), qPrintable(texts));
        QVERIFY2(texts.contains(QStringLiteral("done")) && texts.contains(QStringLiteral("0.835")), qPrintable(texts));
        // The clip covers the evaluation too: 21.5 s of race at 10x, 5 frames/s, plus t = 0.
        QCOMPARE(result.frames, static_cast<int>(std::ceil(21.5 / 10 * 5)) + 1);
    }

    void gifExport() {
        VideoOptions o;
        o.path = m_dir.filePath(QStringLiteral("race.gif"));
        o.recordings = {m_recording};
        o.speed = 30;
        o.fps = 10;
        o.size = QSize(640, 360);
        const auto result = exportVideo(o);
        QVERIFY2(result.error.isEmpty(), qPrintable(result.error));
        const auto p = probe(o.path);
        QVERIFY(p);
        QCOMPARE(p->width, 640);
        QCOMPARE(p->frames, videoFrameCount(60, 10, 30));
    }

    void headlessCommandLine() {
        const QString out = m_dir.filePath(QStringLiteral("cli.mp4"));
        QProcess p;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        p.setProcessEnvironment(env);
        p.start(QStringLiteral(DEVICERACE_GUI_BIN), {QStringLiteral("--replay"), m_recording, QStringLiteral("--video"),
                                                     out, QStringLiteral("--video-speed"), QStringLiteral("10"),
                                                     QStringLiteral("--video-size"), QStringLiteral("1280x720")});
        QVERIFY(p.waitForFinished(120000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const auto probed = probe(out);
        QVERIFY(probed);
        QCOMPARE(probed->frames, videoFrameCount(60, 30, 10)); // 30 fps by default
        QCOMPARE(QSize(probed->width, probed->height), QSize(1280, 720));
        // Bad sizes are refused before anything is rendered.
        p.start(QStringLiteral(DEVICERACE_GUI_BIN), {QStringLiteral("--replay"), m_recording, QStringLiteral("--video"),
                                                     out, QStringLiteral("--video-size"), QStringLiteral("1281x720")});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QVERIFY(p.readAllStandardError().contains("even numbers"));
    }

    // --window-size with --screenshot is the window at that size, whatever the offscreen platform's
    // "screen" (800x600, which the window used to be squeezed into: a 691-pixel dashboard with cut
    // axis titles at "1280x720", and an 800x800 presentation). The dashboard is the window less
    // its toolbar, status bar and setup panel; in presentation mode, all of it.
    void screenshotHasTheWindowSizeAsked() {
        for (const QSize size : {QSize(1280, 720), QSize(1920, 1080)}) {
            const QString out = m_dir.filePath(QStringLiteral("shot-%1.png").arg(size.width()));
            QProcess p;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
            p.setProcessEnvironment(env);
            p.start(QStringLiteral(DEVICERACE_GUI_BIN),
                    {QStringLiteral("--replay"), m_recording, QStringLiteral("--replay-speed"), QStringLiteral("0"),
                     QStringLiteral("--window-size"), QStringLiteral("%1x%2").arg(size.width()).arg(size.height()),
                     QStringLiteral("--screenshot"), out});
            QVERIFY(p.waitForFinished(120000));
            QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
            const QImage shot(out);
            QVERIFY(!shot.isNull());
            QVERIFY2(shot.width() > size.width() * 6 / 10 && shot.width() <= size.width(),
                     qPrintable(QStringLiteral("%1 wide in a %2-wide window").arg(shot.width()).arg(size.width())));
            QVERIFY2(shot.height() > size.height() * 8 / 10 && shot.height() <= size.height(),
                     qPrintable(QStringLiteral("%1 high in a %2-high window").arg(shot.height()).arg(size.height())));
            // Presentation mode fills a screen of that size: the dashboard is the whole of it.
            p.start(QStringLiteral(DEVICERACE_GUI_BIN),
                    {QStringLiteral("--replay"), m_recording, QStringLiteral("--replay-speed"), QStringLiteral("0"),
                     QStringLiteral("--presentation"), QStringLiteral("--window-size"),
                     QStringLiteral("%1x%2").arg(size.width()).arg(size.height()), QStringLiteral("--screenshot"),
                     out});
            QVERIFY(p.waitForFinished(120000));
            QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
            QCOMPARE(QImage(out).size(), size);
        }
    }

    // --theme picks the picture's theme in both modes, and a --screenshot run leaves the user's
    // saved settings (last race, geometry, theme) exactly as they were.
    void screenshotTakesTheThemeAskedAndLeavesTheSettings() {
        const QString config = m_dir.filePath(QStringLiteral("config"));
        QVERIFY(QDir().mkpath(config + QStringLiteral("/DeviceRace")));
        const QString conf = config + QStringLiteral("/DeviceRace/DeviceRace.conf");
        const QByteArray saved = "[race]\nworkload=fashion-cnn\nsteps=5\n\n[window]\ndark=true\n";
        {
            QFile f(conf);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(saved);
        }
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        env.insert(QStringLiteral("XDG_CONFIG_HOME"), config);
        const QString out = m_dir.filePath(QStringLiteral("themed.png"));
        for (const bool presentation : {false, true}) {
            for (const QString& theme : {QStringLiteral("dark"), QStringLiteral("light")}) {
                QProcess p;
                p.setProcessEnvironment(env);
                QStringList args{QStringLiteral("--replay"),       m_recording,
                                 QStringLiteral("--replay-speed"), QStringLiteral("0"),
                                 QStringLiteral("--theme"),        theme,
                                 QStringLiteral("--window-size"),  QStringLiteral("1280x720"),
                                 QStringLiteral("--screenshot"),   out};
                if (presentation) {
                    args << QStringLiteral("--presentation");
                }
                p.start(QStringLiteral(DEVICERACE_GUI_BIN), args);
                QVERIFY(p.waitForFinished(120000));
                QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
                const int lightness = QImage(out).pixelColor(2, 2).lightness();
                QVERIFY2(theme == QStringLiteral("dark") ? lightness < 80 : lightness > 200,
                         qPrintable(QStringLiteral("%1 theme%2: background lightness %3")
                                        .arg(theme, presentation ? QStringLiteral(", presentation") : QString())
                                        .arg(lightness)));
            }
        }
        QFile f(conf);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), saved);
    }

    void missingEncoderIsAClearError() {
        qputenv("DEVICERACE_FFMPEG", "/nonexistent/ffmpeg");
        VideoOptions o;
        o.path = m_dir.filePath(QStringLiteral("none.mp4"));
        o.recordings = {m_recording};
        const auto result = exportVideo(o);
        qunsetenv("DEVICERACE_FFMPEG");
        QVERIFY(result.error.contains(QStringLiteral("ffmpeg program was not found")));
        QVERIFY(result.error.contains(QStringLiteral("apt-get install ffmpeg")));
        QVERIFY(!QFile::exists(o.path));
        // Nothing to render is said as plainly.
        o.recordings.clear();
        QVERIFY(exportVideo(o).error.contains(QStringLiteral("no recording")));
    }

    void cancellingRemovesThePartialFile() {
        VideoOptions o;
        o.path = m_dir.filePath(QStringLiteral("cancelled.mp4"));
        o.recordings = {m_recording};
        o.size = QSize(320, 180);
        const auto result = exportVideo(o, [](int frame, int) { return frame < 5; });
        QVERIFY(result.error.contains(QStringLiteral("cancelled")));
        QVERIFY(!QFile::exists(o.path));
    }

    void sizesParse() {
        QCOMPARE(parseVideoSize(QStringLiteral("1920x1080")), QSize(1920, 1080));
        QVERIFY(!parseVideoSize(QStringLiteral("1281x720")).isValid());
        QVERIFY(!parseVideoSize(QStringLiteral("big")).isValid());
        QCOMPARE(videoFrameCount(300, 30, 10), 901); // a 5-minute race as a 30-second clip
    }
};

QTEST_MAIN(TestVideoExport)
#include "tst_video_export.moc"
