// LaneHistory, min/max decimation and the time-weighted EMA (no window needed).
#include <QtTest>

#include <cmath>

#include "charts/repeat_band.h"
#include "model/lane_history.h"
#include "race_strip.h"

using namespace devicerace;
using namespace devicerace::ui;

class TestLaneHistory : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void decimationKeepsExtremesAndOrder() {
        std::vector<double> xs, ys;
        for (int i = 0; i < 100000; ++i) {
            xs.push_back(i);
            ys.push_back(std::sin(i / 50.0));
        }
        ys[31337] = 9.0; // a spike must survive decimation
        ys[70000] = -9.0;
        auto pts = decimateMinMax(xs, ys, 0, 99999, 500);
        QVERIFY(pts.size() <= 2 * 500 + 2);
        QVERIFY(pts.size() > 500);
        double maxY = -1e9, minY = 1e9;
        for (int i = 0; i < pts.size(); ++i) {
            maxY = std::max(maxY, pts[i].y());
            minY = std::min(minY, pts[i].y());
            if (i > 0) {
                QVERIFY(pts[i].x() >= pts[i - 1].x());
            }
        }
        QCOMPARE(maxY, 9.0);
        QCOMPARE(minY, -9.0);
        QCOMPARE(pts.first().x(), 0.0);
        QCOMPARE(pts.last().x(), 99999.0);
    }

    void decimationWindowsAndSmallInputs() {
        std::vector<double> xs = {0, 1, 2, 3, 4, 5}, ys = {5, 4, 3, 2, 1, 0};
        auto all = decimateMinMax(xs, ys, 0, 10, 100);
        QCOMPARE(all.size(), 6); // few points pass through unchanged
        auto window = decimateMinMax(xs, ys, 1.5, 3.5, 100);
        QCOMPARE(window.size(), 2);
        QCOMPARE(window[0], QPointF(2, 3));
        QVERIFY(decimateMinMax(xs, ys, 7, 9, 100).isEmpty());
        QVERIFY(decimateMinMax({}, {}, 0, 1, 10).isEmpty());
    }

    // The band across repeats: the envelope where at least two curves cover x.
    void repeatBandIsTheEnvelopeWhereTwoCurvesOverlap() {
        const std::vector<double> x1{0, 10}, y1{1, 3};         // 1 + x/5
        const std::vector<double> x2{0, 5}, y2{2, 2};          // flat, shorter
        const std::vector<double> x3{20, 30}, y3{0, 0};        // alone: never a band
        QVERIFY(envelopeBands({{x1, y1}}, 0, 10, 11).empty()); // one curve
        const auto bands = envelopeBands({{x1, y1}, {x2, y2}, {x3, y3}}, 0, 30, 31);
        QCOMPARE(bands.size(), std::size_t(1));
        const auto& b = bands[0];
        QCOMPARE(b.size(), 12); // x = 0..5 upper, then 5..0 lower
        QCOMPARE(b.first(), QPointF(0, 2));
        QCOMPARE(b[5], QPointF(5, 2)); // both 2 at x = 5
        QCOMPARE(b[6], QPointF(5, 2));
        QCOMPARE(b.last(), QPointF(0, 1));
        QCOMPARE(b[2], QPointF(2, 2));   // upper: max(1.4, 2)
        QCOMPARE(b[9], QPointF(2, 1.4)); // lower, interpolated
        // Two runs of overlap make two polygons.
        const std::vector<double> x4{0, 2}, y4{0, 0}, x5{8, 10}, y5{5, 5};
        QCOMPARE(envelopeBands({{x1, y1}, {x4, y4}, {x5, y5}}, 0, 10, 11).size(), std::size_t(2));
    }

    void emaIsTimeWeighted() {
        // Two series with the same values but different spacing: the wider gap pulls harder.
        auto tight = smoothEma({0, 0.1}, {0, 10}, 1.0);
        auto wide = smoothEma({0, 5.0}, {0, 10}, 1.0);
        QVERIFY(tight[1] < 1.0);
        QVERIFY(wide[1] > 9.9);
        QCOMPARE(smoothEma({0, 1}, {3, 4}, 0), (std::vector<double>{3, 4}));
    }

    void costAxisFollowsTheLanesPrice() {
        LaneHistory h;
        h.costPerHour = 3.6; // $0.001 a second
        MetricSample s;
        s.kind = SampleKind::Train;
        s.time = 10;
        s.samplesPerSec = 1;
        s.stepsPerSec = 1;
        s.loss = 1;
        h.append(s);
        QCOMPARE(xColumn(h, XAxis::Cost, false).size(), std::size_t(1));
        QVERIFY(std::abs(xColumn(h, XAxis::Cost, false)[0] - 0.01) < 1e-12);
    }

    void timeToTargetIsProjectedFromTheLastEvaluations() {
        LaneHistory h;
        auto eval = [&](double t, double acc) {
            MetricSample e;
            e.kind = SampleKind::Eval;
            e.time = t;
            e.accuracy = acc;
            h.append(e);
        };
        QVERIFY(!projectedTimeToTarget(h, 0.9).has_value());
        eval(10, 0.70);
        eval(20, 0.80);
        QCOMPARE(*projectedTimeToTarget(h, 0.9), 30.0); // +0.1 per 10 s
        eval(30, 0.79);
        QVERIFY(!projectedTimeToTarget(h, 0.9).has_value()); // not rising: no guess
        eval(40, 0.91);
        QCOMPARE(*projectedTimeToTarget(h, 0.9), 40.0); // reached
    }

    // A finished lane's "% of peak" and step breakdown in the strip and the breakdown bars are the
    // summary table's: the median of the measured intervals, not the last interval (a replay at
    // 1280x720 showed "64% of peak" above a table row saying 69%).
    void aFinishedLaneShowsTheSummarysFiguresNotItsLastIntervals() {
        LaneHistory h;
        std::vector<MetricSample> samples;
        auto add = [&](const MetricSample& s) {
            samples.push_back(s);
            h.append(s);
        };
        MetricSample running;
        running.kind = SampleKind::State;
        running.state = LaneState::Running;
        running.flopsPerSample = 1e6;
        running.peakFlopsPerSec = 1e9;
        add(running);
        // Rates 100..500 (median 300), the last interval the slowest; the warm-up interval fastest.
        const std::vector<double> rates{900, 300, 500, 400, 200, 100};
        for (std::size_t i = 0; i < rates.size(); ++i) {
            MetricSample t;
            t.kind = SampleKind::Train;
            t.step = static_cast<std::int64_t>(10 * (i + 1));
            t.time = static_cast<double>(i + 1);
            t.samplesPerSec = rates[i];
            t.stepsPerSec = rates[i] / 10;
            t.intervalSeconds = 1.0;
            t.loss = 1.0;
            t.warmup = i == 0;
            t.stepBreakdown = {{"forward", 1.0 / rates[i]}, {"backward", 2.0 / rates[i]}, {"other", 0.001 * i}};
            add(t);
        }
        // Running: the latest interval's.
        QCOMPARE(*h.utilization(), 1e6 * 100 / 1e9);
        QCOMPARE(h.shownBreakdown().at("forward"), 1.0 / 100);
        MetricSample finished = running;
        finished.state = LaneState::Finished;
        finished.time = 7;
        add(finished);
        QCOMPARE(*h.laneSamplesPerSec(), 300.0);
        QCOMPARE(*h.utilization(), 1e6 * 300 / 1e9);
        const auto shown = h.shownBreakdown();
        QCOMPARE(shown.at("forward"), 1.0 / 300);
        QCOMPARE(shown.at("other"), 0.003);
        // The same figures as the engine's summary of the same samples.
        LaneSpec spec;
        const auto summary = summarize(spec, 10, samples, {});
        QCOMPARE(*h.laneSamplesPerSec(), summary.samplesPerSec);
        QVERIFY(summary.utilization.has_value());
        QVERIFY(std::abs(*h.utilization() - *summary.utilization) < 1e-12);
        for (const auto& [phase, secs] : summary.stepBreakdown) {
            QVERIFY2(std::abs(shown.at(phase) - secs) < 1e-12, phase.c_str());
        }
    }

    void historyDropsNonFiniteValues() {
        LaneHistory h;
        MetricSample s;
        s.kind = SampleKind::Train;
        s.step = 10;
        s.time = 1;
        s.samplesPerSec = 100;
        s.stepsPerSec = 1;
        s.loss = std::nan("");
        h.append(s);
        QCOMPARE(h.trainCount(), std::size_t(0));
        s.loss = 0.5;
        s.step = 20;
        h.append(s);
        QCOMPARE(h.trainCount(), std::size_t(1));
        QCOMPARE(h.lastStep, std::int64_t(20));
        MetricSample e;
        e.kind = SampleKind::Eval;
        e.accuracy = 0.9;
        e.step = 20;
        h.append(e);
        QCOMPARE(*h.lastAccuracy, 0.9);
        MetricSample st;
        st.kind = SampleKind::State;
        st.state = LaneState::Diverged;
        st.message = "diverged at step 21";
        h.append(st);
        QVERIFY(h.state == LaneState::Diverged);
        QCOMPARE(h.message, QStringLiteral("diverged at step 21"));
    }

    void learningRateStepsAreMarkedRampsAreNot() {
        LaneHistory h;
        // A step schedule (0.1 -> 0.01 at step 300) and a smooth ramp after it.
        const std::vector<std::pair<std::int64_t, double>> points{{100, 0.1},   {200, 0.1},   {300, 0.01},
                                                                  {400, 0.011}, {500, 0.012}, {600, 0.0012}};
        for (const auto& [step, lr] : points) {
            MetricSample s;
            s.kind = SampleKind::Train;
            s.step = step;
            s.samples = step * 128;
            s.time = static_cast<double>(step) / 10;
            s.samplesPerSec = 1000;
            s.stepsPerSec = 10;
            s.loss = 1;
            s.lr = lr;
            h.append(s);
        }
        QCOMPARE(h.lrStep, (std::vector<double>{300, 600}));
        QCOMPARE(lrColumn(h, XAxis::Time), (std::vector<double>{30, 60}));
        QCOMPARE(lrColumn(h, XAxis::Samples), (std::vector<double>{300 * 128, 600 * 128}));
    }
};

QTEST_GUILESS_MAIN(TestLaneHistory)
#include "tst_lane_history.moc"
