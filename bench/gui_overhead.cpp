// Does an open window slow the lanes? The same race runs headless (engine only, polled at
// 2 Hz like the CLI) and with the window open (offscreen, live charts at ~15 Hz),
// alternately A B A B ..., and the ratio of the lanes' median samples/s is reported.
// Usage: bench_gui_overhead [pairs] [steps]
#include <QApplication>
#include <QEventLoop>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "devicerace/race.h"
#include "main_window.h"
#include "race_controller.h"
#include "setup_panel.h"

using namespace devicerace;

namespace {

RaceSpec benchRace(std::int64_t steps) {
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.steps = steps;
    LaneSpec lane;
    lane.threads = 1;
    spec.lanes = {lane};
    return spec;
}

double headless(std::int64_t steps) {
    Race race(benchRace(steps));
    race.start();
    while (!race.finished()) {
        for (auto* l : race.lanes()) {
            (void)l->takeSamples();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    race.wait();
    return race.summary().lanes.at(0).samplesPerSec.value_or(0);
}

double windowed(std::int64_t steps) {
    ui::MainWindow window;
    window.show();
    window.setupPanel()->setRaceSpec(benchRace(steps));
    QEventLoop loop;
    QObject::connect(&window, &ui::MainWindow::raceFinished, &loop, &QEventLoop::quit);
    window.startRace();
    loop.exec();
    return window.race()->summary()->lanes.at(0).samplesPerSec.value_or(0);
}

} // namespace

int main(int argc, char** argv) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const int pairs = argc > 1 ? std::stoi(argv[1]) : 3;
    const std::int64_t steps = argc > 2 ? std::stoll(argv[2]) : 1500;
    (void)headless(100); // warm the data cache and the allocator
    std::vector<double> ratios;
    for (int p = 0; p < pairs; ++p) {
        const double a = headless(steps);
        const double b = windowed(steps);
        ratios.push_back(b / a);
        std::printf("pair %d: headless %.0f samples/s, window %.0f samples/s, ratio %.3f\n", p + 1, a, b, b / a);
        std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("gui overhead: window/headless samples/s median %.3f (min %.3f, max %.3f) over %d pairs\n",
                ratios[ratios.size() / 2], ratios.front(), ratios.back(), pairs);
    return 0;
}
