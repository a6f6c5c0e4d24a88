// devicerace: the race window.
#include <algorithm>

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QDateTime>
#include <QElapsedTimer>
#include <QSocketNotifier>
#include <QTimer>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <string_view>

#include <cstdio>
#include <cstdlib>

#include "charts/metric_chart.h"
#include "charts/safe_chart_view.h"
#include "dashboard.h"
#include "exporter.h"
#include "gui_options.h"
#include "main_window.h"
#include "race_controller.h"
#include "setup_panel.h"
#include "video_export.h"
#include "devicerace/environment.h"

namespace {

// QApplication aborts without a display: say so first and point to the CLI.
bool displayAvailable() {
    const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
    if (!platform.isEmpty()) {
        return true; // offscreen, xcb with an explicit choice, ...
    }
    return !qEnvironmentVariableIsEmpty("DISPLAY") || !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY");
}

// --video: renders the recordings offscreen and exits (0 done, 1 failed).
int renderVideo(const devicerace::gui::GuiOptions& options) {
    devicerace::ui::VideoOptions v;
    v.path = options.video;
    v.recordings = options.replays;
    v.size = options.videoSize;
    v.fps = options.videoFps;
    v.speed = options.videoSpeed;
    int lastTenth = -1;
    const auto result = devicerace::ui::exportVideo(v, [&](int frame, int frames) {
        const int tenth = frame * 10 / std::max(1, frames);
        if (tenth != lastTenth) {
            lastTenth = tenth;
            std::fprintf(stderr, "\rdevicerace: rendering %s: %d%%", qPrintable(options.video), tenth * 10);
        }
        return true;
    });
    std::fprintf(stderr, "\n");
    if (!result.error.isEmpty()) {
        std::fprintf(stderr, "devicerace: error: %s\n", qPrintable(result.error));
        return 1;
    }
    std::printf("devicerace: saved %s: %d frames, %.1f s at %g fps (%.1f frames/s rendered)\n",
                qPrintable(QFileInfo(options.video).absoluteFilePath()), result.frames, result.seconds,
                options.videoFps, result.renderFps);
    return 0;
}

// DEVICERACE_STARTUP_TIMING=1 prints when the window's first frame is painted (ms since the
// epoch, and since main() began); =exit also quits there. For measuring open-to-first-frame.
class FirstFrameProbe : public QObject {
public:
    FirstFrameProbe(QElapsedTimer sinceMain, bool quit) : m_sinceMain(sinceMain), m_quit(quit) {}

protected:
    bool eventFilter(QObject* watched, QEvent* event) override {
        if (event->type() == QEvent::Paint && !m_done) {
            m_done = true;
            std::printf("devicerace: first frame at %lld ms since the epoch, %lld ms after main()\n",
                        static_cast<long long>(QDateTime::currentMSecsSinceEpoch()),
                        static_cast<long long>(m_sinceMain.elapsed()));
            std::fflush(stdout);
            if (m_quit) {
                QTimer::singleShot(0, qApp, [] { QApplication::exit(0); });
            }
        }
        return QObject::eventFilter(watched, event);
    }

private:
    QElapsedTimer m_sinceMain;
    bool m_quit;
    bool m_done = false;
};

// SIGINT / SIGTERM close the window as its close button does (stop every lane, record what they
// sent, leave within ~1.5 s even when a lane is stuck): a self-pipe read on the GUI thread.
int g_signalPipe[2] = {-1, -1};

void onSignal(int) {
    const char c = 1;
    [[maybe_unused]] const auto n = ::write(g_signalPipe[1], &c, 1);
}

// A screenshot at --window-size WxH on Qt's offscreen platform: a screen of that size (the
// platform's own is 800x600), so the window fits it as it would a real one, and presentation
// mode fills it. Returns the config file to delete once the platform has read it ("" if none).
std::string offscreenScreenFor(const QStringList& args) {
    const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
    if (platform != "offscreen") {
        return {}; // a real display, or an offscreen platform someone configured
    }
    QSize size;
    for (qsizetype i = 0; i < args.size(); ++i) {
        if (args[i] == QStringLiteral("--window-size") && i + 1 < args.size()) {
            size = devicerace::ui::parseVideoSize(args[i + 1]);
        } else if (args[i].startsWith(QStringLiteral("--window-size="))) {
            size = devicerace::ui::parseVideoSize(args[i].section(QLatin1Char('='), 1));
        }
    }
    if (!size.isValid()) {
        return {}; // a bad size is refused later, with the usage error
    }
    std::string path = QString(QDir::tempPath() + QStringLiteral("/devicerace-screen-XXXXXX")).toStdString();
    const int fd = ::mkstemp(path.data());
    if (fd < 0) {
        return {};
    }
    const std::string json = "{\"windowFrameMargins\": false, \"screens\": [{\"name\": \"screen\", \"x\": 0, "
                             "\"y\": 0, \"width\": " +
                             std::to_string(size.width()) + ", \"height\": " + std::to_string(size.height()) +
                             ", \"logicalDpi\": 96}]}";
    const bool written = ::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size());
    ::close(fd);
    if (!written) {
        ::unlink(path.c_str());
        return {};
    }
    qputenv("QT_QPA_PLATFORM", QByteArray("offscreen:configfile=") + QByteArray::fromStdString(path));
    return path;
}

void closeOnSignals(QWidget* window) {
    if (::pipe2(g_signalPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        return;
    }
    auto* notifier = new QSocketNotifier(g_signalPipe[0], QSocketNotifier::Read, window);
    QObject::connect(notifier, &QSocketNotifier::activated, window, [window] {
        char buf[16];
        while (::read(g_signalPipe[0], buf, sizeof buf) > 0) {
        }
        window->close();
    });
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
}

} // namespace

int main(int argc, char** argv) {
    // The window races live lanes side by side, where spin-waiting OpenMP threads take the cores
    // from each other (the CLI decides per race: waitPolicyFor). libgomp reads the variable once,
    // at load: where the user left it unset, start again with passive waits, and say that
    // DeviceRace chose them: a race that should spin then runs its CPU lanes of several threads
    // in processes of their own, which spin (spinsOnlyInProcesses).
    if (!std::getenv("OMP_WAIT_POLICY")) {
        ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        ::setenv("DEVICERACE_OMP_WAIT", "passive", 1);
        ::execv("/proc/self/exe", argv);
    }
    QElapsedTimer sinceMain;
    sinceMain.start();
    QStringList args;
    for (int i = 0; i < argc; ++i) {
        args << QString::fromLocal8Bit(argv[i]);
    }
    const bool screenshot = args.contains(QStringLiteral("--screenshot"));
    const bool video = args.contains(QStringLiteral("--video"));
    // The options before a training command's --: help and the version print on any terminal.
    const QStringList own = args.mid(0, args.contains(QStringLiteral("--")) ? args.indexOf(QStringLiteral("--")) : -1);
    const bool printOnly = std::any_of(own.begin(), own.end(), [](const QString& a) {
        return a == QLatin1String("-h") || a == QLatin1String("--help") || a == QLatin1String("-?") ||
               a == QLatin1String("--help-all") || a == QLatin1String("-v") || a == QLatin1String("--version");
    });
    if ((screenshot || video || printOnly) && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen"); // a screenshot, a video or the help needs no screen
    }
    if (!displayAvailable()) {
        std::fprintf(stderr, "devicerace: no display found (DISPLAY/WAYLAND_DISPLAY unset). Run races headless with "
                             "devicerace-cli, or use --screenshot FILE (renders offscreen).\n");
        return 2;
    }
    const std::string screenConfig = screenshot ? offscreenScreenFor(args) : std::string();
    QApplication app(argc, argv);
    if (!screenConfig.empty()) {
        ::unlink(screenConfig.c_str());
    }
    QApplication::setApplicationName(QStringLiteral("DeviceRace"));
    QApplication::setOrganizationName(QStringLiteral("DeviceRace"));
    QApplication::setApplicationVersion(QStringLiteral(DEVICERACE_VERSION));

    const auto options = devicerace::gui::parseGuiOptions(QApplication::arguments());
    if (!options.error.isEmpty()) {
        std::fprintf(stderr, "devicerace: error: %s\n", qPrintable(options.error));
        return 2;
    }
    if (!options.video.isEmpty()) {
        return renderVideo(options);
    }
    devicerace::ui::MainWindow window;
    if (screenshot) {
        window.setSavesSettings(false); // the same picture whatever was saved, and nothing saved
    } else if (options.race) {
        window.restoreWindowSettings(); // the user's theme and geometry; the race is the command line's
    } else {
        window.restoreSettings();
    }
    if (options.race) {
        window.setupPanel()->setRaceSpec(*options.race);
    }
    if (options.dark) {
        window.setDarkTheme(*options.dark);
        window.setPresentationDark(*options.dark);
    }
    window.setRecording(options.record, options.recordDir);
    if (options.windowSize.isValid() && screenshot) {
        // The size asked, not the offscreen platform's 800x600 "screen": --window-size 1280x720
        // --screenshot is how a 1280x720 window looks.
        window.resize(options.windowSize);
    } else if (options.windowSize.isValid()) {
        window.setInitialSize(options.windowSize);
    } else if (screenshot) {
        window.resize(1500, 950); // offscreen has no real screen to fit: the preferred size
    }
    window.setReplaySpeed(options.replaySpeed);
    std::unique_ptr<FirstFrameProbe> probe;
    if (const char* timing = devicerace::environmentSwitch("DEVICERACE_STARTUP_TIMING"); timing && *timing) {
        probe = std::make_unique<FirstFrameProbe>(sinceMain, std::string_view(timing) == "exit");
        window.dashboard()->throughputChart()->view()->viewport()->installEventFilter(probe.get());
    }
    window.show();
    closeOnSignals(&window);
    for (const auto& dir : options.replays) {
        if (!window.openRecording(dir)) {
            std::fprintf(stderr, "devicerace: error: %s\n", qPrintable(window.lastError()));
            return 2;
        }
    }
    if (!options.replays.isEmpty() && !options.start) {
        window.replayRecordings(); // --replay plays them (at --replay-speed); with --start they race the live lanes
    }
    if (options.presentation) {
        window.setPresentation(true);
    }
    int status = 0;
    if (!options.screenshot.isEmpty()) {
        QObject::connect(&window, &devicerace::ui::MainWindow::raceFinished, &app, [&] {
            const QString error = window.exportDashboardPng(options.screenshot);
            if (!error.isEmpty()) {
                std::fprintf(stderr, "devicerace: error: %s\n", qPrintable(error));
                status = 1;
            } else {
                std::printf("devicerace: saved %s\n", qPrintable(QFileInfo(options.screenshot).absoluteFilePath()));
            }
            QTimer::singleShot(0, &app, [&] { window.close(); });
        });
    }
    if (options.start) {
        const auto refused = [&] {
            std::fprintf(stderr, "devicerace: error: %s\n", qPrintable(window.lastError()));
            if (!options.screenshot.isEmpty()) {
                QApplication::exit(2);
            }
        };
        // Set up off the GUI thread: a race that cannot run says so when its set-up ends.
        QObject::connect(&window, &devicerace::ui::MainWindow::startFailed, &app, refused);
        QTimer::singleShot(0, &window, [&, refused] {
            if (!window.startRace()) {
                refused();
            }
        });
    }
    const int rc = QApplication::exec();
    return rc != 0 ? rc : status;
}
