#include "gui_options.h"

#include <QCommandLineParser>

#include "devicerace/errors.h"
#include "devicerace/workload.h"
#include "lanes_table.h"
#include "video_export.h"

namespace devicerace::gui {

GuiOptions parseGuiOptions(const QStringList& arguments) {
    GuiOptions out;
    QCommandLineParser p;
    p.setApplicationDescription(QStringLiteral("DeviceRace: race the same training job on several devices"));
    p.addHelpOption();
    p.addVersionOption();
    const QCommandLineOption workload(QStringLiteral("workload"), QStringLiteral("Workload name"), QStringLiteral("W"));
    const QCommandLineOption lane(QStringLiteral("lane"), QStringLiteral("DEVICE[,key=value]... (as devicerace-cli)"),
                                  QStringLiteral("SPEC"));
    const QCommandLineOption epochs(QStringLiteral("epochs"), QStringLiteral("Epochs per lane"), QStringLiteral("N"));
    const QCommandLineOption steps(QStringLiteral("steps"), QStringLiteral("Steps per lane"), QStringLiteral("N"));
    const QCommandLineOption data(QStringLiteral("data"), QStringLiteral("real or synthetic"), QStringLiteral("MODE"));
    const QCommandLineOption evalEvery(QStringLiteral("eval-every"),
                                       QStringLiteral("Evaluate every N steps (default: about ten times per race)"),
                                       QStringLiteral("N"));
    const QCommandLineOption fair(QStringLiteral("fair"),
                                  QStringLiteral("Run lanes one after another, each alone on the machine"));
    const QCommandLineOption live(
        QStringLiteral("live"),
        QStringLiteral(
            "Race the lanes at once (the default race, without --lane, is fair where lanes would share cores)"));
    const QCommandLineOption start(QStringLiteral("start"), QStringLiteral("Start the race at once"));
    const QCommandLineOption present(QStringLiteral("presentation"), QStringLiteral("Open in presentation mode"));
    const QCommandLineOption shot(QStringLiteral("screenshot"),
                                  QStringLiteral("Run the race to its end, save the dashboard as PNG, exit"),
                                  QStringLiteral("FILE"));
    const QCommandLineOption replay(QStringLiteral("replay"), QStringLiteral("Play back a recording (repeatable)"),
                                    QStringLiteral("DIR"));
    const QCommandLineOption speed(QStringLiteral("replay-speed"),
                                   QStringLiteral("Playback speed: 1, 2, 10, ... or 0 for instantly"),
                                   QStringLiteral("X"));
    const QCommandLineOption record(QStringLiteral("record"), QStringLiteral("Record races into DIR"),
                                    QStringLiteral("DIR"));
    const QCommandLineOption noRecord(QStringLiteral("no-record"), QStringLiteral("Do not record races"));
    const QCommandLineOption video(
        QStringLiteral("video"),
        QStringLiteral("Render the --replay recordings to FILE (.mp4 or .gif) with ffmpeg, exit"),
        QStringLiteral("FILE"));
    const QCommandLineOption videoSpeed(QStringLiteral("video-speed"),
                                        QStringLiteral("Race seconds per video second (default 10)"),
                                        QStringLiteral("X"));
    const QCommandLineOption videoSize(QStringLiteral("video-size"), QStringLiteral("WIDTHxHEIGHT (default 1280x720)"),
                                       QStringLiteral("SIZE"));
    const QCommandLineOption videoFps(QStringLiteral("video-fps"), QStringLiteral("Frames per second (default 30)"),
                                      QStringLiteral("N"));
    const QCommandLineOption windowSize(
        QStringLiteral("window-size"),
        QStringLiteral("The window's first size, e.g. 1920x1080 (kept inside the screen; a --screenshot has it whole)"),
        QStringLiteral("SIZE"));
    const QCommandLineOption theme(
        QStringLiteral("theme"),
        QStringLiteral("light or dark, in normal and presentation mode (default: the theme last chosen; "
                       "presentation mode dark)"),
        QStringLiteral("THEME"));
    p.addOptions({workload, lane,  epochs,     steps,     evalEvery, data,       fair,
                  live,     start, present,    shot,      replay,    speed,      record,
                  noRecord, video, videoSpeed, videoSize, videoFps,  windowSize, theme});
    if (!p.parse(arguments)) {
        out.error = p.errorText();
        return out;
    }
    if (p.isSet(QStringLiteral("help")) || p.isSet(QStringLiteral("help-all")) || p.isSet(QStringLiteral("version"))) {
        p.process(arguments); // prints and exits
    }
    out.start = p.isSet(start);
    out.presentation = p.isSet(present);
    out.screenshot = p.value(shot);
    out.replays = p.values(replay);
    out.record = !p.isSet(noRecord);
    out.recordDir = p.value(record);
    if (p.isSet(speed)) {
        bool ok = false;
        out.replaySpeed = p.value(speed).toDouble(&ok);
        if (!ok || out.replaySpeed < 0) {
            out.error =
                QStringLiteral("--replay-speed %1: expected 0 (instantly) or a positive factor").arg(p.value(speed));
            return out;
        }
    }
    out.video = p.value(video);
    auto positive = [&](const QCommandLineOption& o, double& into) {
        if (!p.isSet(o)) {
            return true;
        }
        bool ok = false;
        into = p.value(o).toDouble(&ok);
        if (!ok || !(into > 0) || into > 1e6) {
            out.error = QStringLiteral("--%1 %2: expected a number above 0").arg(o.names().first(), p.value(o));
            return false;
        }
        return true;
    };
    if (!positive(videoSpeed, out.videoSpeed) || !positive(videoFps, out.videoFps)) {
        return out;
    }
    if (p.isSet(videoSize)) {
        out.videoSize = ui::parseVideoSize(p.value(videoSize));
        if (!out.videoSize.isValid()) {
            out.error = QStringLiteral("--video-size %1: expected WIDTHxHEIGHT with even numbers, e.g. 1280x720")
                            .arg(p.value(videoSize));
            return out;
        }
    }
    if (p.isSet(windowSize)) {
        out.windowSize = ui::parseVideoSize(p.value(windowSize));
        if (!out.windowSize.isValid()) {
            out.error =
                QStringLiteral("--window-size %1: expected WIDTHxHEIGHT, e.g. 1920x1080").arg(p.value(windowSize));
            return out;
        }
    }
    if (p.isSet(theme)) {
        const QString t = p.value(theme).toLower();
        if (t != QStringLiteral("light") && t != QStringLiteral("dark")) {
            out.error = QStringLiteral("--theme %1: expected light or dark").arg(p.value(theme));
            return out;
        }
        out.dark = t == QStringLiteral("dark");
    }
    if (!out.video.isEmpty() && out.replays.isEmpty()) {
        out.error = QStringLiteral("--video renders recordings: give one or more --replay DIR");
        return out;
    }
    // A screenshot runs the race to its end: start it, unless only recordings are shown.
    if (!out.screenshot.isEmpty() && (out.replays.isEmpty() || p.isSet(workload) || p.isSet(lane))) {
        out.start = true;
    }
    // After --: the user's own training command, as devicerace-cli race takes it.
    const QStringList command = p.positionalArguments();
    if (!command.isEmpty() && !arguments.contains(QStringLiteral("--"))) {
        out.error = QStringLiteral("unexpected '%1': give your training command after -- (devicerace --lane cpu -- "
                                   "python3 train.py)")
                        .arg(command.front());
        return out;
    }
    try {
        if (p.isSet(workload) || p.isSet(lane) || p.isSet(epochs) || p.isSet(steps) || p.isSet(data) || p.isSet(fair) ||
            p.isSet(live) || p.isSet(evalEvery) || !command.isEmpty()) {
            RaceSpec spec;
            if (p.isSet(workload)) {
                spec.workload = p.value(workload).toStdString();
                findWorkload(spec.workload);
            }
            for (const auto& word : command) {
                spec.command.push_back(word.toStdString());
            }
            if (!command.isEmpty() && !p.isSet(workload)) {
                spec.workload = kScriptWorkload; // every lane runs the command
            }
            for (const auto& text : p.values(lane)) {
                spec.lanes.push_back(parseLaneSpec(text.toStdString()));
                // The window refuses what the CLI refuses: a device this machine cannot use.
                // (A remote lane's device is checked on its host when the race starts.)
                if (const QString why =
                        spec.lanes.back().host.empty() ? ui::deviceProblem(spec.lanes.back().device) : QString();
                    !why.isEmpty()) {
                    throw UsageError(QStringLiteral("--lane %1: %2").arg(text, why).toStdString());
                }
            }
            auto number = [&](const QCommandLineOption& o) {
                bool ok = false;
                const qlonglong v = p.value(o).toLongLong(&ok);
                if (!ok || v < 1) {
                    throw UsageError(QStringLiteral("--%1 %2: expected a whole number of 1 or more")
                                         .arg(o.names().first(), p.value(o))
                                         .toStdString());
                }
                return v;
            };
            if (p.isSet(epochs) && p.isSet(steps)) {
                throw UsageError("--epochs and --steps exclude each other");
            }
            if (p.isSet(epochs)) {
                spec.epochs = static_cast<int>(number(epochs));
            }
            if (p.isSet(steps)) {
                spec.steps = number(steps);
            }
            if (p.isSet(evalEvery)) {
                spec.evalEverySteps = number(evalEvery);
            }
            if (p.isSet(data)) {
                if (p.value(data) != QStringLiteral("real") && p.value(data) != QStringLiteral("synthetic")) {
                    throw UsageError(
                        QStringLiteral("--data %1: expected real or synthetic").arg(p.value(data)).toStdString());
                }
                spec.data = p.value(data) == QStringLiteral("synthetic") ? DataMode::Synthetic : DataMode::Real;
            }
            // Without lanes it is the engine's first race: fair where that one is (unless --live).
            if (p.isSet(fair) && p.isSet(live)) {
                throw UsageError("--fair and --live exclude each other");
            }
            spec.fair = p.isSet(fair) || (!p.isSet(live) && spec.lanes.empty() && defaultRace().fair);
            if (spec.lanes.empty() && !p.isSet(workload) && command.isEmpty()) { // the first race's workload and length
                const auto first = defaultRace();
                spec.workload = first.workload;
                if (!spec.epochs && !spec.steps) {
                    spec.steps = first.steps;
                }
            }
            out.race = spec;
        }
    } catch (const std::exception& e) {
        out.error = QString::fromStdString(e.what());
    }
    return out;
}

} // namespace devicerace::gui
