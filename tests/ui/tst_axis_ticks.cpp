// Axis ticks: 1-2-5 steps over 1e-3..1e7, time axes from seconds to hours, log decades,
// thousands separators, the target line on a gridline, and when a log axis is wanted.
#include <QtTest>

#include <cmath>
#include <set>

#include "charts/axis_ticks.h"

using namespace devicerace::ui;

namespace {

// The number a label shows ("12,500" -> 12500, "1:02:03" -> 3723).
double parseLabel(QString text) {
    text.remove(QLatin1Char(','));
    if (text.endsWith(QLatin1Char('M'))) { // whole millions: "2M", "1.5M"
        return text.chopped(1).toDouble() * 1e6;
    }
    if (text.endsWith(QLatin1Char('k'))) { // whole thousands from 100,000: "500k"
        return text.chopped(1).toDouble() * 1e3;
    }
    if (text.contains(QLatin1Char(':'))) {
        const bool negative = text.startsWith(QLatin1Char('-'));
        double total = 0;
        for (const auto& part : text.mid(negative ? 1 : 0).split(QLatin1Char(':'))) {
            total = total * 60 + part.toDouble();
        }
        return negative ? -total : total;
    }
    return text.toDouble();
}

bool isOneTwoFive(double step) {
    const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    const double m = step / mag;
    return std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6;
}

// Every property a reader relies on, for any axis.
void checkCommon(const AxisTicks& t, double lo, double hi, int maxTicks, bool extend) {
    const QString where = QStringLiteral("%1..%2 max %3%4: %5")
                              .arg(lo)
                              .arg(hi)
                              .arg(maxTicks)
                              .arg(extend ? QStringLiteral(" extended") : QString(), t.labels.join(QLatin1Char(' ')));
    QVERIFY2(t.values.size() >= 2, qPrintable(where));
    QVERIFY2(static_cast<int>(t.values.size()) <= maxTicks, qPrintable(where));
    QCOMPARE(t.labels.size(), static_cast<qsizetype>(t.values.size()));
    QCOMPARE(std::set<QString>(t.labels.begin(), t.labels.end()).size(), t.values.size()); // unique
    for (std::size_t i = 1; i < t.values.size(); ++i) {
        QVERIFY(t.values[i] > t.values[i - 1]);
    }
    if (extend) {
        QVERIFY(t.lo <= lo + 1e-12 * std::abs(lo) && t.hi >= hi - 1e-12 * std::abs(hi));
        QCOMPARE(t.lo, t.values.front());
        QCOMPARE(t.hi, t.values.back());
    } else {
        QCOMPARE(t.lo, lo);
        QCOMPARE(t.hi, hi);
        QVERIFY(t.values.front() >= lo - 1e-9 * (hi - lo) && t.values.back() <= hi + 1e-9 * (hi - lo));
    }
    for (const auto& label : t.labels) {
        QVERIFY(!label.contains(QStringLiteral("…")) && !label.contains(QStringLiteral("...")));
        QVERIFY2(label != QStringLiteral("-0"), qPrintable(label));
    }
}

} // namespace

class TestAxisTicks : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void examplesFromTheReview() {
        // "0 13 27 40 54" -> 0 20 40 60
        auto t = niceTicks(0, 54, 5);
        QCOMPARE(t.labels,
                 QStringList({QStringLiteral("0"), QStringLiteral("20"), QStringLiteral("40"), QStringLiteral("60")}));
        // "9792 19584 29376" -> 10,000 steps with separators
        t = niceTicks(0, 39168, 6);
        QCOMPARE(t.labels, QStringList({QStringLiteral("0"), QStringLiteral("10,000"), QStringLiteral("20,000"),
                                        QStringLiteral("30,000"), QStringLiteral("40,000")}));
        // Empty chart: no "0 0 1 1 1".
        t = niceTicks(0, 1, 5);
        QCOMPARE(t.labels, QStringList({QStringLiteral("0.0"), QStringLiteral("0.5"), QStringLiteral("1.0")}));
        // "0.80 0.82 0.83 0.85 0.87" with the 0.85 target off-grid -> 0.85 on a gridline.
        t = niceTicks(0.80, 0.87, 6, true, 0.85);
        QVERIFY(t.labels.contains(QStringLiteral("0.85")));
        QCOMPARE(t.labels.first(), QStringLiteral("0.80"));
        // Without an anchor the finer step stays.
        QCOMPARE(niceTicks(0.80, 0.87, 6).step, 0.02);
        // Raw seconds "736 1473 2209 2945" -> quarter hours as m:ss.
        t = timeTicks(0, 2945, 5);
        QCOMPARE(t.labels, QStringList({QStringLiteral("0:00"), QStringLiteral("15:00"), QStringLiteral("30:00"),
                                        QStringLiteral("45:00"), QStringLiteral("60:00")}));
    }

    void linearTicksAcrossMagnitudes_data() {
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        for (int e = -3; e <= 7; ++e) {
            for (double m : {1.0, 1.7, 3.3, 7.9}) {
                const double hi = m * std::pow(10.0, e);
                QTest::addRow("0..%g", hi) << 0.0 << hi;
                QTest::addRow("%g..%g", hi * 0.8, hi) << hi * 0.8 << hi;
                QTest::addRow("-%g..%g", hi * 0.3, hi) << -hi * 0.3 << hi;
            }
        }
    }
    void linearTicksAcrossMagnitudes() {
        QFETCH(double, lo);
        QFETCH(double, hi);
        for (int maxTicks = 3; maxTicks <= 11; ++maxTicks) {
            for (bool extend : {true, false}) {
                const auto t = niceTicks(lo, hi, maxTicks, extend);
                checkCommon(t, lo, hi, maxTicks, extend);
                if (QTest::currentTestFailed()) {
                    return;
                }
                QVERIFY(isOneTwoFive(t.step));
                for (std::size_t i = 0; i < t.values.size(); ++i) {
                    // Each tick is a whole multiple of the step, and its label reads back as its value.
                    QVERIFY(std::abs(t.values[i] / t.step - std::round(t.values[i] / t.step)) < 1e-6);
                    QVERIFY2(std::abs(parseLabel(t.labels[i]) - t.values[i]) <= t.step * 1e-6, qPrintable(t.labels[i]));
                    if (std::abs(t.values[i]) >= 1e5) {
                        QVERIFY2(t.labels[i].endsWith(QLatin1Char(std::abs(t.values[i]) >= 1e6 ? 'M' : 'k')),
                                 qPrintable(t.labels[i]));
                    } else if (std::abs(t.values[i]) >= 1000) {
                        QVERIFY(t.labels[i].contains(QLatin1Char(',')));
                    }
                }
                // Not wastefully coarse: at most one 1-2-5 level above the finest that fits.
                if (extend) {
                    QVERIFY(t.step <= 2.5 * niceStep(hi - lo, maxTicks) * (1 + 1e-9));
                }
            }
        }
    }

    void targetLandsOnAGridline_data() {
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::addColumn<double>("target");
        QTest::newRow("0.85 in 0.80..0.87") << 0.80 << 0.87 << 0.85;
        QTest::newRow("0.9 in 0.5..0.93") << 0.5 << 0.93 << 0.9;
        QTest::newRow("0.85 in 0.7..0.86") << 0.7 << 0.86 << 0.85;
        QTest::newRow("0.9 in 0.62..0.91") << 0.62 << 0.91 << 0.9;
        QTest::newRow("0.5 in 0..1") << 0.0 << 1.0 << 0.5;
    }
    void targetLandsOnAGridline() {
        QFETCH(double, lo);
        QFETCH(double, hi);
        QFETCH(double, target);
        const auto t = niceTicks(lo, hi, 6, true, target);
        checkCommon(t, lo, hi, 6, true);
        bool found = false;
        for (double v : t.values) {
            found = found || std::abs(v - target) < 1e-9;
        }
        QVERIFY2(found, qPrintable(t.labels.join(QLatin1Char(' '))));
    }

    // Where no 1-2-5 step fits a gridline on the target (0.6..0.9 by 0.1 in four ticks, target
    // 0.85: the review's chart), the target is a labelled tick of its own, never off every line.
    void aTargetOffEveryStepIsATickOfItsOwn_data() {
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::addColumn<int>("maxTicks");
        QTest::addColumn<double>("target");
        QTest::newRow("0.85 in 0.6..0.9, 4 ticks") << 0.6 << 0.9 << 4 << 0.85;
        QTest::newRow("0.85 in 0.62..0.88, 5 ticks") << 0.62 << 0.88 << 5 << 0.85;
        QTest::newRow("0.975 in 0.5..1, 3 ticks") << 0.5 << 1.0 << 3 << 0.975;
        QTest::newRow("0.87 in 0.3..0.95, 4 ticks") << 0.3 << 0.95 << 4 << 0.87;
    }
    void aTargetOffEveryStepIsATickOfItsOwn() {
        QFETCH(double, lo);
        QFETCH(double, hi);
        QFETCH(int, maxTicks);
        QFETCH(double, target);
        const auto t = niceTicks(lo, hi, maxTicks, true, target);
        const QString where = t.labels.join(QLatin1Char(' '));
        QVERIFY2(static_cast<int>(t.values.size()) <= maxTicks && t.values.size() >= 2, qPrintable(where));
        QCOMPARE(t.lo, t.values.front());
        QCOMPARE(t.hi, t.values.back());
        QVERIFY(t.lo <= lo && t.hi >= hi);
        const auto at =
            std::find_if(t.values.begin(), t.values.end(), [&](double v) { return std::abs(v - target) < 1e-9; });
        const bool nearEnd =
            std::abs(target - t.values.front()) < 0.4 * t.step || std::abs(target - t.values.back()) < 0.4 * t.step;
        QVERIFY2(at != t.values.end() || nearEnd, qPrintable(where));
        if (at != t.values.end()) {
            QCOMPARE(t.labels[at - t.values.begin()].toDouble(), target); // written exactly
        }
        for (std::size_t i = 1; i < t.values.size(); ++i) { // no label crowds another
            QVERIFY2(t.values[i] - t.values[i - 1] >= 0.4 * t.step - 1e-12, qPrintable(where));
        }
        QCOMPARE(std::set<QString>(t.labels.begin(), t.labels.end()).size(), t.values.size());
    }

    void timeTicksFromSecondsToHours_data() {
        QTest::addColumn<double>("hi");
        QTest::addColumn<QString>("unit");
        QTest::newRow("0.4 s") << 0.4 << QStringLiteral("s");
        QTest::newRow("7 s") << 7.0 << QStringLiteral("s");
        QTest::newRow("45 s") << 45.0 << QStringLiteral("s");
        QTest::newRow("110 s") << 110.0 << QStringLiteral("s");
        QTest::newRow("3 min") << 185.0 << QStringLiteral("m:ss");
        QTest::newRow("49 min") << 2945.0 << QStringLiteral("m:ss");
        QTest::newRow("1.5 h") << 5400.0 << QStringLiteral("h:mm:ss");
        QTest::newRow("11 h") << 40000.0 << QStringLiteral("h:mm:ss");
        QTest::newRow("3 days") << 260000.0 << QStringLiteral("h:mm:ss");
    }
    void timeTicksFromSecondsToHours() {
        QFETCH(double, hi);
        QFETCH(QString, unit);
        QCOMPARE(timeUnit(timeStyleFor(hi)), unit);
        for (int maxTicks = 3; maxTicks <= 10; ++maxTicks) {
            const auto t = timeTicks(0, hi, maxTicks);
            checkCommon(t, 0, hi, maxTicks, true);
            if (QTest::currentTestFailed()) {
                return;
            }
            for (std::size_t i = 0; i < t.values.size(); ++i) {
                QVERIFY2(std::abs(parseLabel(t.labels[i]) - t.values[i]) < 1e-6, qPrintable(t.labels[i]));
                QCOMPARE(t.labels[i].count(QLatin1Char(':')), unit == QStringLiteral("s")      ? 0
                                                              : unit == QStringLiteral("m:ss") ? 1
                                                                                               : 2);
            }
            if (unit != QStringLiteral("s")) {
                // Clock-friendly steps: whole 1/2/5/10/15/30 s, minutes or hours, or whole days.
                const std::set<double> ok = {1,   2,   5,    10,   15,   30,    60,    120,   300,
                                             600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400};
                QVERIFY2(ok.count(t.step) == 1 || std::fmod(t.step, 86400) == 0, qPrintable(QString::number(t.step)));
            }
        }
        // A zoomed window keeps its range and still gets round times inside it.
        const auto z = timeTicks(hi * 0.31, hi * 0.77, 6, false);
        checkCommon(z, hi * 0.31, hi * 0.77, 6, false);
    }

    void timeFormats() {
        QCOMPARE(formatTime(125, TimeStyle::MinSec), QStringLiteral("2:05"));
        QCOMPARE(formatTime(3723, TimeStyle::HourMinSec), QStringLiteral("1:02:03"));
        QCOMPARE(formatTime(90.5, TimeStyle::MinSec, 1), QStringLiteral("1:30.5"));
        QCOMPARE(formatTime(1500, TimeStyle::Seconds), QStringLiteral("1,500"));
        QCOMPARE(formatNumber(61204.4, 0), QStringLiteral("61,204"));
        QCOMPARE(formatNumber(-0.0001, 2), QStringLiteral("0.00"));
        QCOMPARE(formatNumber(1234567.891, 1), QStringLiteral("1,234,567.9"));
    }

    void logTicksOverDecades_data() {
        QTest::addColumn<double>("lo");
        QTest::addColumn<double>("hi");
        QTest::newRow("17..1,660 (100x)") << 17.0 << 1660.0;
        QTest::newRow("600..61,204") << 600.0 << 61204.0;
        QTest::newRow("1e-3..1e7") << 1e-3 << 1e7;
        QTest::newRow("0.02..0.5") << 0.02 << 0.5;
        QTest::newRow("900..1,100") << 900.0 << 1100.0;
        QTest::newRow("3..3e6 (1,000,000x)") << 3.0 << 3e6;
    }
    void logTicksOverDecades() {
        QFETCH(double, lo);
        QFETCH(double, hi);
        for (int maxTicks = 3; maxTicks <= 10; ++maxTicks) {
            const auto t = logTicks(lo, hi, maxTicks);
            checkCommon(t, std::log10(lo), std::log10(hi), maxTicks, true);
            if (QTest::currentTestFailed()) {
                return;
            }
            for (std::size_t i = 0; i < t.values.size(); ++i) {
                const double v = std::pow(10.0, t.values[i]);
                QVERIFY2(isOneTwoFive(v) || std::abs(v / std::pow(10.0, std::floor(t.values[i] + 1e-9)) - 3) < 1e-6,
                         qPrintable(t.labels[i]));
                QVERIFY2(std::abs(parseLabel(t.labels[i]) - v) <= v * 1e-9, qPrintable(t.labels[i]));
            }
        }
        // 17..1,660 with room for 6 ticks: 10 30 100 300 1,000 3,000.
        if (lo == 17.0) {
            QCOMPARE(logTicks(lo, hi, 6).labels.join(QLatin1Char(' ')), QStringLiteral("10 30 100 300 1,000 3,000"));
        }
    }

    void logAxisWantedForBigRatios() {
        QVERIFY(wantsLogAxis({17, 1660}));         // 100x: CPU vs GPU
        QVERIFY(wantsLogAxis({600, 61204, 1200})); // 1,000x
        QVERIFY(!wantsLogAxis({900, 1600}));       // thread scaling
        QVERIFY(!wantsLogAxis({1000}));
        QVERIFY(!wantsLogAxis({0, 1000, NAN}));
        QVERIFY(wantsLogAxis({100, 1001}) && !wantsLogAxis({100, 999}));
    }
};

QTEST_APPLESS_MAIN(TestAxisTicks)
#include "tst_axis_ticks.moc"
