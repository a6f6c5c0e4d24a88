// Redraw cost of the live charts with a long history: 8 lanes x 1,000,000 train samples each.
// One "tick" = 8 new samples (one per lane) + refresh of the three charts (decimate +
// replace) + the events that paint them, each once (until 2026-11-24 the bench also repainted
// every chart synchronously after the events: two paints a tick). Prints the median and max
// over the ticks, in ms.
// Usage: bench_gui_redraw [samples-per-lane] [ticks] [WIDTHxHEIGHT]     (runs offscreen)
// A wide window (1280x720, 1920x1080) places the charts in one row, as the dashboard does.
#include <QApplication>
#include <QElapsedTimer>
#include <QBoxLayout>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "charts/metric_chart.h"
#include "charts/palette.h"
#include "support/chart_paint.h"

using namespace devicerace;
using namespace devicerace::ui;

int main(int argc, char** argv) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    const std::size_t perLane = argc > 1 ? std::stoul(argv[1]) : 1000000;
    const int ticks = argc > 2 ? std::stoi(argv[2]) : 40;
    constexpr int kLanes = 8;

    std::vector<LaneInfo> lanes;
    std::vector<LaneHistory> hist(kLanes);
    for (int l = 0; l < kLanes; ++l) {
        LaneInfo info;
        info.name = QStringLiteral("lane %1").arg(l);
        info.color = laneColor(l);
        lanes.push_back(info);
    }
    auto sampleFor = [](int lane, std::size_t i) {
        MetricSample s;
        s.kind = SampleKind::Train;
        s.step = static_cast<std::int64_t>(i) * 10;
        s.samples = s.step * 128;
        s.time = static_cast<double>(i) * 0.1; // one interval per 100 ms
        s.samplesPerSec = 1000.0 * (lane + 1) + 50 * std::sin(static_cast<double>(i) / 30.0);
        s.stepsPerSec = *s.samplesPerSec / 128;
        s.loss = 2.0 / (1.0 + static_cast<double>(i) / 1000.0);
        s.warmup = i < 2;
        return s;
    };
    for (int l = 0; l < kLanes; ++l) {
        for (std::size_t i = 0; i < perLane; ++i) {
            hist[l].append(sampleFor(l, i));
        }
    }
    QSize size(1600, 1200);
    if (argc > 3) {
        const QStringList wh = QString::fromLocal8Bit(argv[3]).split(QLatin1Char('x'));
        size = QSize(wh.value(0).toInt(), wh.value(1).toInt());
    }
    QWidget window;
    auto* layout = new QBoxLayout(
        size.width() > size.height() * 3 / 2 ? QBoxLayout::LeftToRight : QBoxLayout::TopToBottom, &window);
    std::vector<MetricChart*> charts = {new MetricChart(QStringLiteral("Throughput"), Metric::SamplesPerSec),
                                        new MetricChart(QStringLiteral("Loss"), Metric::Loss),
                                        new MetricChart(QStringLiteral("Accuracy"), Metric::Accuracy)};
    for (auto* c : charts) {
        layout->addWidget(c);
        c->setLanes(lanes);
    }
    window.resize(size);
    window.show();
    QApplication::processEvents();
    for (auto* c : charts) {
        c->refresh(hist); // first refresh builds the smoothing caches
    }
    std::vector<double> ms, refreshMs;
    std::uint64_t paints = 0;
    for (int t = 0; t < ticks; ++t) {
        for (int l = 0; l < kLanes; ++l) {
            hist[l].append(sampleFor(l, perLane + static_cast<std::size_t>(t)));
        }
        QElapsedTimer clock;
        clock.start();
        for (auto* c : charts) {
            c->refresh(hist);
        }
        refreshMs.push_back(static_cast<double>(clock.nsecsElapsed()) / 1e6);
        paints += bench::paintCharts(charts).paints; // the events paint each chart once
        ms.push_back(static_cast<double>(clock.nsecsElapsed()) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    std::sort(refreshMs.begin(), refreshMs.end());
    std::printf("refresh (decimate + replace) median %.2f ms\n", refreshMs[refreshMs.size() / 2]);
    int points = 0;
    for (auto* c : charts) {
        points += c->pointCount();
    }
    std::printf("redraw at %dx%d: %d lanes x %zu samples, %d ticks: median %.2f ms, max %.2f ms per tick "
                "(%d points handed to the series; %.1f chart paints per tick)\n",
                size.width(), size.height(), kLanes, perLane, ticks, ms[ms.size() / 2], ms.back(), points,
                static_cast<double>(paints) / ticks);
    return 0;
}
