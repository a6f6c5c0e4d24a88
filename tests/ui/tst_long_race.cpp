// Long races in the window: the chart history stays bounded, the poller keeps in memory only
// what the recording lacks, and the CSV export holds every sample either way. Lanes are
// synthetic sample sources (bench/support/synthetic_lane.h): hours of samples in a second.
#include <QtTest>

#include <QElapsedTimer>
#include <QTemporaryDir>

#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include "charts/metric_chart.h"
#include "devicerace/lane_spec.h"
#include "model/lane_history.h"
#include "charts/palette.h"
#include "race_controller.h"
#include "synthetic_lane.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

MetricSample train(std::int64_t i) {
    MetricSample s;
    s.kind = SampleKind::Train;
    s.step = i;
    s.samples = i * 32;
    s.time = static_cast<double>(i) * 0.001;
    s.samplesPerSec = i % 2 ? 1000.0 : 3000.0; // alternating: merged pairs average to 2000
    s.stepsPerSec = *s.samplesPerSec / 32;
    s.loss = i % 2 ? 1.0 : 3.0;
    s.warmup = i <= 4;
    return s;
}

std::int64_t countLines(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        return -1;
    }
    std::int64_t n = 0;
    while (!f.atEnd()) {
        f.readLine();
        ++n;
    }
    return n;
}

} // namespace

class TestLongRace : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void historyMergesPairsAndStaysBounded() {
        LaneHistory h;
        const auto total = static_cast<std::int64_t>(LaneHistory::kMaxPoints) * 3 + 7;
        for (std::int64_t i = 1; i <= total; ++i) {
            h.append(train(i));
        }
        // 2^19 points merge into 2^18 at stride 2; at 2^19 again, into 2^18 at stride 4; the
        // rest arrive 4 to a point.
        QCOMPARE(h.stride, std::size_t(4));
        QCOMPARE(h.compactions, std::uint64_t(2));
        QVERIFY(h.trainCount() <= LaneHistory::kMaxPoints);
        const std::size_t expected = LaneHistory::kMaxPoints / 2 + (LaneHistory::kMaxPoints + 7) / 4;
        QCOMPARE(h.trainCount(), expected);
        QCOMPARE(h.lastStep, total);
        // Points are evenly spaced, end where their last interval ends, and keep the mean rate.
        QCOMPARE(h.step.back(), static_cast<double>(total - 3)); // 3 intervals still gathering
        QCOMPARE(h.step[1] - h.step[0], 4.0);
        QCOMPARE(h.step[h.trainCount() - 1] - h.step[h.trainCount() - 2], 4.0);
        for (std::size_t i = 2; i < h.trainCount(); i += 9973) {
            // (time-weighted: equal intervals up to the rounding of their float times)
            QVERIFY2(std::abs(h.samplesPerSec[i] - 2000.0) < 1e-3, qPrintable(QString::number(h.samplesPerSec[i])));
            QVERIFY(std::abs(h.stepsPerSec[i] - 2000.0 / 32) < 1e-3);
            QCOMPARE(h.loss[i], 2.0);
        }
        // Only the first points are warm-up, and the warm-up prefix stays a prefix.
        QCOMPARE(h.warmup[0], char(1));
        QCOMPARE(h.warmup[1], char(0));
        QCOMPARE(std::accumulate(h.warmup.begin(), h.warmup.end(), 0), 1);
    }

    void chartFollowsAMergedHistory() {
        MetricChart chart(QStringLiteral("Throughput"), Metric::SamplesPerSec);
        LaneInfo info;
        info.name = QStringLiteral("s0");
        info.color = laneColor(0);
        chart.setLanes({info});
        chart.resize(800, 400);
        chart.show();
        std::vector<LaneHistory> hist(1);
        std::int64_t i = 1;
        for (; i < static_cast<std::int64_t>(LaneHistory::kMaxPoints) - 10; ++i) {
            hist[0].append(train(i));
        }
        chart.refresh(hist); // caches built on unmerged points
        for (; i < static_cast<std::int64_t>(LaneHistory::kMaxPoints) + 5000; ++i) {
            hist[0].append(train(i));
        }
        QCOMPARE(hist[0].compactions, std::uint64_t(1));
        chart.refresh(hist); // the merge is noticed: caches rebuilt, the line reaches the end
        QVERIFY(chart.pointCount() > 0);
        QVERIFY(chart.xRange().second >= hist[0].time.back());
    }

    void recordedRaceKeepsNothingInMemoryAndExportsEverySample() {
        for (const bool record : {true, false}) {
            QTemporaryDir dir;
            QVERIFY(dir.isValid());
            std::vector<bench::SyntheticLane*> sources;
            const LaneFactory factory = bench::syntheticLanes(sources, 1000.0);
            RaceController race;
            const QString recordDir = record ? dir.filePath(QStringLiteral("run")) : QString();
            QSignalSpy started(&race, &RaceController::started);
            QVERIFY(race.start(bench::syntheticRaceSpec(3), {laneColor(0), laneColor(1), laneColor(2)}, recordDir,
                               factory));
            QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 30000); // set up off the GUI thread
            QCOMPARE(sources.size(), std::size_t(3));
            for (int tick = 1; tick <= 60; ++tick) { // 4 s of lane time at 15 Hz
                for (auto* s : sources) {
                    s->emitUntil(tick / 15.0);
                }
                race.poll();
            }
            for (auto* s : sources) {
                s->finish();
            }
            race.poll();
            QVERIFY(race.finished());
            std::int64_t emitted = 0;
            for (auto* s : sources) {
                emitted += s->emitted();
            }
            QCOMPARE(emitted, std::int64_t(3 * 4000));
            // Train samples + one evaluation per 10 s (none in 4 s) + Running and Finished.
            const std::int64_t samples = emitted + 3 * 2;
            QCOMPARE(static_cast<std::int64_t>(race.samplesInMemory()), record ? 0 : samples);
            if (record) {
                std::int64_t lines = 0;
                for (int l = 0; l < 3; ++l) {
                    lines += countLines(dir.filePath(QStringLiteral("run/lane-%1.jsonl").arg(l)));
                }
                QCOMPARE(lines, samples);
            }
            const QString csv = dir.filePath(QStringLiteral("all.csv"));
            race.writeCsv(csv);
            QCOMPARE(countLines(csv), samples + 1); // a header, then every sample
            QVERIFY(race.histories()[2].trainCount() == 4000);
        }
    }

    void recordingIsWrittenOffTheGuiThread() {
        // The GUI thread polls nothing and serves no event here: the recording grows anyway.
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        std::vector<bench::SyntheticLane*> sources;
        const LaneFactory factory = bench::syntheticLanes(sources, 1000.0);
        RaceController race;
        QSignalSpy started(&race, &RaceController::started);
        QVERIFY(race.start(bench::syntheticRaceSpec(1), {laneColor(0)}, dir.filePath(QStringLiteral("run")), factory));
        QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 30000);
        QVERIFY(race.recordingThread() != std::thread::id());
        QVERIFY(race.recordingThread() != std::this_thread::get_id());
        sources[0]->emitUntil(1.0); // 1,000 intervals after the running state
        const QString file = dir.filePath(QStringLiteral("run/lane-0.jsonl"));
        QElapsedTimer waited;
        waited.start();
        while (countLines(file) < 1001 && waited.elapsed() < 30000) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        QCOMPARE(countLines(file), std::int64_t(1001));
        QVERIFY(race.histories()[0].trainCount() == 0); // the window has taken nothing yet
        sources[0]->finish();
        race.poll();
        QVERIFY(race.finished());
        QCOMPARE(race.histories()[0].trainCount(), std::size_t(1000));
        QCOMPARE(countLines(file), std::int64_t(1002));
    }

    void csvExportToAMissingFolderNamesIt() {
        RaceController race;
        QTemporaryDir dir;
        const QString bad = dir.filePath(QStringLiteral("missing/out.csv"));
        try {
            race.writeCsv(bad);
            QFAIL("no error");
        } catch (const std::exception& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("missing")), e.what());
        }
    }
};

QTEST_MAIN(TestLongRace)
#include "tst_long_race.moc"
