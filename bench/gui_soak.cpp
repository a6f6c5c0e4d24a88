// Soak: an hours-long race through the window's own poller, recorder, charts, strip and
// summary, in minutes. N synthetic lanes (bench/support/synthetic_lane.h) emit R train samples per
// second of lane time each; the driver advances lane time by one poll interval (1/15 s) per
// tick and polls, as the window's timer does, with the dashboard refreshing at its own pace.
// Prints resident memory every simulated 5 minutes, the redraw per tick at the end (chart
// refresh + the window's events, each chart painted once, as bench_gui_redraw measures it), and checks that the
// recording holds every sample (each lane file read back a line at a time, steps counted without a gap). Usage:
// bench_gui_soak [minutes=60] [lanes=8] [rate=1000] [WIDTHxHEIGHT=1920x1080] [DIR|-] [REDRAWS=40]
//        (runs offscreen; the recording goes to DIR, default a temporary folder, removed after)
#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "charts/metric_chart.h"
#include "dashboard.h"
#include "charts/palette.h"
#include "race_controller.h"
#include "support/chart_paint.h"
#include "support/synthetic_lane.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

double residentMiB() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stod(line.substr(6)) / 1024.0;
        }
    }
    return 0;
}

// Train samples in a recorded lane file, and whether their steps ran 1, 2, 3, ... without a gap.
std::pair<std::int64_t, bool> countTrainSamples(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::int64_t count = 0;
    bool contiguous = true;
    while (std::getline(in, line)) {
        const auto s = sampleFromJsonLine(line);
        if (s.kind == SampleKind::Train) {
            ++count;
            contiguous = contiguous && s.step == count;
        }
    }
    return {count, contiguous};
}

} // namespace

int main(int argc, char** argv) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const double minutes = argc > 1 ? std::stod(argv[1]) : 60;
    const int laneCount = argc > 2 ? std::stoi(argv[2]) : 8;
    const double rate = argc > 3 ? std::stod(argv[3]) : 1000;
    QSize size(1920, 1080);
    if (argc > 4) {
        const QStringList wh = QString::fromLocal8Bit(argv[4]).split(QLatin1Char('x'));
        size = QSize(wh.value(0).toInt(), wh.value(1).toInt());
    }
    QTemporaryDir temp;
    const QString recordDir =
        (argc > 5 && std::string(argv[5]) != "-" ? QString::fromLocal8Bit(argv[5]) : temp.path()) +
        QStringLiteral("/soak");

    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.data = DataMode::Synthetic;
    spec.trainLimit = 64;
    spec.testLimit = 16;
    std::vector<QColor> colors;
    for (int i = 0; i < laneCount; ++i) {
        spec.lanes.push_back(parseLaneSpec("cpu,threads=1,batch=32,name=lane" + std::to_string(i)));
        colors.push_back(laneColor(i));
    }
    std::vector<bench::SyntheticLane*> sources;
    const LaneFactory factory = bench::syntheticLanes(sources, rate);

    RaceController race;
    Dashboard dashboard(&race);
    dashboard.resize(size);
    dashboard.show();
    QObject::connect(&race, &RaceController::updated, &dashboard, &Dashboard::refresh);
    QElapsedTimer wall;
    wall.start();
    bool ready = false;
    QString failure;
    QObject::connect(&race, &RaceController::started, [&] { ready = true; });
    QObject::connect(&race, &RaceController::setupFailed, [&](const QString& why) { failure = why; });
    if (!race.start(spec, colors, recordDir, factory)) {
        std::fprintf(stderr, "the race did not start\n");
        return 1;
    }
    while (!ready && failure.isEmpty()) { // set up off the GUI thread
        QApplication::processEvents(QEventLoop::AllEvents, 50);
    }
    if (!ready) {
        std::fprintf(stderr, "the race did not start: %s\n", qPrintable(failure));
        return 1;
    }
    dashboard.onRaceStarted();
    QApplication::processEvents();
    const double startMiB = residentMiB();
    std::printf("soak: %d lanes x %.0f samples/s for %.0f min of lane time, window %dx%d, recording to %s\n", laneCount,
                rate, minutes, size.width(), size.height(), qPrintable(recordDir));
    std::printf("  lane min | resident MiB | stored points/lane | stride | samples in memory | wall s\n");
    constexpr double kTick = 1.0 / 15; // the window polls ~15 times a second
    const auto ticks = static_cast<std::int64_t>(minutes * 60 / kTick);
    double maxMiB = startMiB, at5 = 0;
    for (std::int64_t t = 1; t <= ticks; ++t) {
        const double laneTime = static_cast<double>(t) * kTick;
        for (auto* s : sources) {
            s->emitUntil(laneTime);
        }
        race.poll();
        if (t % 30 == 0) { // the window refreshes its summary table at 2 Hz
            dashboard.refreshSummary();
        }
        if (t % 15 == 0) {
            QApplication::processEvents();
        }
        if (t % static_cast<std::int64_t>(300 / kTick) == 0) { // every 5 minutes of lane time
            const double mib = residentMiB();
            maxMiB = std::max(maxMiB, mib);
            if (laneTime <= 300.5) {
                at5 = mib;
            }
            const auto& h = race.histories().front();
            std::printf("  %8.0f | %12.1f | %18zu | %6zu | %17zu | %6.1f\n", laneTime / 60, mib, h.trainCount(),
                        h.stride, race.samplesInMemory(), static_cast<double>(wall.elapsed()) / 1000);
            std::fflush(stdout);
        }
    }
    // The redraw at the end: as bench_gui_redraw measures it, one tick = new samples, a chart
    // refresh and the window's events, which paint each changed chart once (a chart they left
    // unpainted is repainted synchronously, so every tick paints all three).
    std::vector<double> redraw;
    std::vector<std::vector<double>> paint(3), parts(3);
    std::uint64_t paints = 0;
    const int redraws = argc > 6 ? std::max(40, std::stoi(argv[6])) : 40;
    for (int k = 1; k <= redraws; ++k) {
        for (auto* s : sources) {
            s->emitUntil(static_cast<double>(ticks + k) * kTick);
        }
        race.poll();
        QElapsedTimer clock;
        clock.start();
        dashboard.refreshCharts();
        parts[0].push_back(static_cast<double>(clock.nsecsElapsed()) / 1e6);
        const auto tick = bench::paintCharts(dashboard.charts()); // each chart painted once
        parts[1].push_back(tick.eventsMs);
        parts[2].push_back(tick.repaintMs);
        paints += tick.paints;
        redraw.push_back(static_cast<double>(clock.nsecsElapsed()) / 1e6);
        for (int c = 0; c < 3; ++c) {
            paint[static_cast<std::size_t>(c)].push_back(dashboard.charts()[c]->view()->lastPaintMs());
        }
    }
    const double paintsPerTick = static_cast<double>(paints) / redraws;
    std::sort(redraw.begin(), redraw.end());
    for (auto* list : {&paint[0], &paint[1], &paint[2], &parts[0], &parts[1], &parts[2]}) {
        std::sort(list->begin(), list->end());
    }
    for (auto* s : sources) {
        s->finish();
    }
    race.poll();
    const double endMiB = residentMiB();
    maxMiB = std::max(maxMiB, endMiB);
    std::int64_t emitted = 0, recorded = 0;
    bool contiguous = true;
    for (int i = 0; i < laneCount; ++i) {
        emitted += sources[static_cast<std::size_t>(i)]->emitted();
        const auto [count, ok] =
            countTrainSamples(QString(recordDir + QStringLiteral("/lane-%1.jsonl").arg(i)).toStdString());
        recorded += count;
        contiguous = contiguous && ok;
    }
    std::printf("resident memory: %.1f MiB after start, %.1f MiB at 5 min, %.1f MiB at the end, %.1f MiB max\n",
                startMiB, at5, endMiB, maxMiB);
    std::printf("redraw per tick at the end (%dx%d): median %.2f ms, max %.2f ms\n", size.width(), size.height(),
                redraw[redraw.size() / 2], redraw.back());
    std::printf("  of which: chart refresh %.2f ms, events (the window's updates and chart paints) %.2f ms, "
                "charts left unpainted, repainted %.2f ms "
                "(medians); %.1f chart paints per tick\n",
                parts[0][parts[0].size() / 2], parts[1][parts[1].size() / 2], parts[2][parts[2].size() / 2],
                paintsPerTick);
    for (int c = 0; c < 3; ++c) {
        const auto* chart = dashboard.charts()[c];
        std::printf("  chart %d (%dx%d): painting %.2f ms median\n", c, chart->width(), chart->height(),
                    paint[static_cast<std::size_t>(c)][paint[0].size() / 2]);
    }
    std::printf("recording: %lld of %lld train samples, steps %s; wall %.1f s\n", static_cast<long long>(recorded),
                static_cast<long long>(emitted), contiguous ? "without a gap" : "WITH GAPS",
                static_cast<double>(wall.elapsed()) / 1000);
    return recorded == emitted && contiguous ? 0 : 1;
}
