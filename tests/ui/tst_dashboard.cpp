// The dashboard's charts over recorded races: one shared x range, a log throughput axis for
// CPU-vs-GPU ratios (automatic and chosen), and drag-zoom redrawing the lines.
#include <QtTest>

#include <QComboBox>
#include <QMenu>
#include <QMouseEvent>
#include <QTemporaryDir>
#include <QTextLayout>
#include <QtCharts/QChart>

#include "breakdown_bars.h"
#include "charts/metric_chart.h"
#include "charts/plot_layer.h"
#include "charts/safe_chart_view.h"
#include "dashboard.h"
#include "device_panel.h"
#include "fake_recording.h"
#include "main_window.h"
#include "process_cpu.h"
#include "charts/palette.h"
#include "race_controller.h"
#include "recording_menu.h"
#include "summary_table.h"
#include "race_strip.h"
#include "theme.h"

#include <signal.h>

using namespace devicerace;
using namespace devicerace::ui;
using devicerace::test::FakeLane;
using devicerace::test::writeFakeRecording;

namespace {

// Opens a recording in `w`, played instantly, and waits until it has been drawn.
bool replay(MainWindow& w, const QString& dir) {
    w.setReplaySpeed(0);
    QSignalSpy finished(&w, &MainWindow::raceFinished);
    if (!w.openRecording(dir)) {
        return false;
    }
    return finished.wait(20000) || finished.count() == 1;
}

// A fake recording of `lanes` in `dir`, replayed to its end in `w` shown at `size`.
bool replayFake(MainWindow& w, const QTemporaryDir& dir, const std::vector<devicerace::test::FakeLane>& lanes,
                QSize size = QSize(1280, 720)) {
    if (!writeFakeRecording(dir.path(), lanes)) {
        return false;
    }
    w.resize(size);
    w.show();
    return replay(w, dir.path());
}

void sendMouse(QWidget* target, QEvent::Type type, QPoint pos, Qt::MouseButtons buttons) {
    QMouseEvent e(type, pos, target->mapToGlobal(pos), Qt::LeftButton, buttons, Qt::NoModifier);
    QApplication::sendEvent(target, &e);
}

// The x values of every thick (smoothed) line the chart draws.
std::pair<double, double> drawnXExtent(const MetricChart* chart) {
    double lo = 1e300, hi = -1e300;
    for (const auto& line : chart->plotLayer()->lines()) {
        for (const auto& p : line.points) {
            lo = std::min(lo, p.x());
            hi = std::max(hi, p.x());
        }
    }
    return {lo, hi};
}

} // namespace

class TestDashboard : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName(QStringLiteral("DeviceRaceTest"));
        QCoreApplication::setApplicationName(QStringLiteral("DeviceRaceTest"));
    }

    void aFinishedRaceKeepsItsAverageCpuUseNotTheIdleWindows() {
        DevicePanel panel;
        QVERIFY(panel.liveText().isEmpty());
        panel.refreshLive(true);
        const double start = processCpuSeconds();
        volatile double sink = 0;
        while (processCpuSeconds() - start < 0.2) {
            for (int i = 0; i < 100000; ++i) {
                sink = sink + i * 0.5;
            }
        }
        panel.refreshLive(true);
        QVERIFY2(panel.liveText().startsWith(QStringLiteral("CPU use of the race: ")), qPrintable(panel.liveText()));
        panel.refreshLive(false);
        const QString after = panel.liveText();
        const QRegularExpression average(QStringLiteral("^CPU use of the last race: (\\d+)% on average"));
        const auto match = average.match(after);
        QVERIFY2(match.hasMatch(), qPrintable(after));
        QVERIFY2(match.captured(1).toInt() > 0, qPrintable(after));
        panel.refreshLive(false);
        QCOMPARE(panel.liveText(), after);
    }

    // A race's multi-thread CPU lanes may run in worker processes of their own: the race's CPU
    // use counts them, alive and after they end, not only the window's process.
    void theRacesCpuUseCountsItsWorkerProcesses_data() {
        QTest::addColumn<int>("lookup");
        QTest::newRow("children files") << static_cast<int>(ChildLookup::ChildrenFiles);
        QTest::newRow("a scan of the parents") << static_cast<int>(ChildLookup::ParentScan);
    }
    // The busy loop runs in a grandchild (a shell that waits for the shell that loops), so the
    // walk must go below the window's own children; both ways of finding them, the kernel's
    // children files where it has them and the scan of every process's parent.
    void theRacesCpuUseCountsItsWorkerProcesses() {
        QFETCH(int, lookup);
        const auto how = static_cast<ChildLookup>(lookup);
        if (how == ChildLookup::ChildrenFiles &&
            !QFile::exists(QStringLiteral("/proc/self/task/%1/children").arg(QCoreApplication::applicationPid()))) {
            QSKIP("this kernel has no /proc/PID/task/TID/children files");
        }
        const double treeBefore = processTreeCpuSeconds(how), selfBefore = processCpuSeconds();
        QProcess busy;
        busy.start(QStringLiteral("/bin/sh"),
                   {QStringLiteral("-c"), QStringLiteral("/bin/sh -c 'while :; do :; done' & echo $!; wait")});
        QVERIFY(busy.waitForStarted());
        QVERIFY(busy.waitForReadyRead(10000));
        bool isPid = false;
        const auto looping = static_cast<pid_t>(busy.readLine().trimmed().toInt(&isPid));
        QVERIFY(isPid && looping > 0);
        // The live grandchild's CPU time counts while it runs.
        QTRY_VERIFY_WITH_TIMEOUT((processTreeCpuSeconds(how) - treeBefore) - (processCpuSeconds() - selfBefore) > 0.2,
                                 20000);
        const double whileAlive = processTreeCpuSeconds(how);
        // The shell that loops is killed first (its parent, waiting, then exits): reaped by its
        // parent, then the parent reaped here, its time moves to the waited-for children's.
        QCOMPARE(::kill(looping, SIGKILL), 0);
        QVERIFY(busy.waitForFinished());
        QVERIFY2(processTreeCpuSeconds(how) >= whileAlive - 0.02,
                 qPrintable(QStringLiteral("%1 after, %2 before").arg(processTreeCpuSeconds(how)).arg(whileAlive)));
    }

    void hundredfoldRaceGetsALogAxis() {
        QTemporaryDir dir;
        MainWindow w;
        QVERIFY(replayFake(w, dir,
                           {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 17, 600},
                            {QStringLiteral("cuda:0"), QStringLiteral("cuda:0"), 1700, 60}},
                           QSize(1600, 1000)));
        auto* chart = w.dashboard()->throughputChart();
        QVERIFY(chart->logScale());
        // Decades on the axis, with separators: the slow lane is no longer on the floor.
        const QStringList labels = chart->yLabels();
        QVERIFY2(labels.contains(QStringLiteral("10")) && labels.contains(QStringLiteral("1,000")),
                 qPrintable(labels.join(QLatin1Char(' '))));
        QVERIFY(chart->chart()->axes(Qt::Vertical).first()->titleText().contains(QStringLiteral("log")));
        // The slow lane's line sits well above the bottom of the plot: log10(17) vs the axis.
        double slowY = 0;
        for (const auto& line : chart->plotLayer()->lines()) {
            if (line.width > 1 && !line.marks && !line.points.isEmpty() && line.points.last().y() < 2) {
                slowY = line.points.last().y();
            }
        }
        QVERIFY(slowY > 1.0); // log10(17) = 1.23, drawn on a log scale
        // Evaluations are marked along the bottom: ten per lane (writeFakeRecording's default).
        int marks = 0;
        for (const auto& line : chart->plotLayer()->lines()) {
            marks += line.marks ? static_cast<int>(line.points.size()) : 0;
        }
        QCOMPARE(marks, 20);
        // The presenter's choice wins over the automatic one.
        w.dashboard()->setThroughputScale(Dashboard::Scale::Linear);
        QVERIFY(!chart->logScale());
        QVERIFY(chart->yLabels().contains(QStringLiteral("0")));
        w.dashboard()->setThroughputScale(Dashboard::Scale::Auto);
        QVERIFY(chart->logScale());
    }

    // A replay explains its slower lanes as the race did: the figures read the lanes' engine
    // devices, not the "(recorded …)" names the window shows (which hid every why-line before).
    void aReplayExplainsItsSlowerLanes() {
        QTemporaryDir dir;
        MainWindow w;
        QVERIFY(replayFake(w, dir,
                           {{QStringLiteral("cpu"), QStringLiteral("cpu"), 2000, 30},
                            {QStringLiteral("gpu"), QStringLiteral("cuda:0"), 1000, 60}}));
        const auto summary = w.race()->summary();
        QVERIFY(summary.has_value());
        QCOMPARE(summary->explanations.size(), std::size_t{1});
        const QString why = QString::fromStdString(summary->explanations.front());
        QVERIFY2(why.startsWith(QStringLiteral("gpu (rec) runs at 0.")) && why.contains(QStringLiteral("GPU busy")),
                 qPrintable(why));
        QTRY_COMPARE(w.dashboard()->strip()->badge(), QStringLiteral("Why? ") + why);
        for (const auto& lane : summary->lanes) { // the table still says where they come from
            QVERIFY2(QString::fromStdString(lane.device).contains(QStringLiteral("(recorded ")), lane.device.c_str());
        }
        // A lane of another recording (another machine, another day) is not explained against
        // these: a slower GPU there says nothing about this CPU.
        QTemporaryDir other;
        QVERIFY(writeFakeRecording(other.path(), {{QStringLiteral("far"), QStringLiteral("cuda:0"), 500, 60}}));
        QVERIFY(replay(w, other.path()));
        const auto both = w.race()->summary();
        QCOMPARE(both->lanes.size(), std::size_t{3});
        QCOMPARE(both->explanations.size(), std::size_t{1});
        QCOMPARE(QString::fromStdString(both->explanations.front()), why);
    }

    // A why-line that names an option ("--warmup-steps") wraps between words, never at one of the
    // option's hyphens, at any width: the reader must be able to type what it says.
    void anOptionInTheNoteIsNeverBrokenAtItsHyphens() {
        const QString why = QStringLiteral(
            "Why? cpu·1 and cpu·2 have no speed: their 15 steps were all warm-up, which is left out of the "
            "speed (the first 20 steps of a lane: --warmup-steps); race more steps, or lower --warmup-steps.");
        QCOMPARE(keepOptionsWhole(why).remove(QChar(0x2060)), why);
        QCOMPARE(keepOptionsWhole(QStringLiteral("warm-up, cpu·1-x, a - b")),
                 QStringLiteral("warm-up, cpu·1-x, a - b")); // only options are held together
        const auto breaksAtAHyphen = [](const QString& text, const QFont& font, int width) {
            QTextLayout layout(text, font);
            QTextOption option;
            option.setWrapMode(QTextOption::WordWrap);
            layout.setTextOption(option);
            layout.beginLayout();
            bool broken = false;
            for (QTextLine line = layout.createLine(); line.isValid(); line = layout.createLine()) {
                line.setLineWidth(width);
                const QString piece = text.mid(line.textStart(), line.textLength()).remove(QChar(0x2060));
                const qsizetype end = line.textStart() + line.textLength();
                const qsizetype word = piece.lastIndexOf(u' ') + 1; // an option's hyphen, not warm-up's
                broken |= piece.endsWith(u'-') && piece.mid(word).startsWith(QStringLiteral("--")) &&
                          end < text.size() && text[end].isLetter();
            }
            layout.endLayout();
            return broken;
        };
        RaceStrip strip;
        strip.setBadge(why);
        bool rawBreaks = false;
        for (int width = 160; width <= 900; width += 3) {
            strip.resize(width, 400);
            const StripText note = strip.texts().back();
            QVERIFY(note.text.contains(QChar(0x2060)));
            QVERIFY2(!breaksAtAHyphen(note.text, note.font, note.rect.width()),
                     qPrintable(QStringLiteral("broken at a hyphen at %1 px").arg(width)));
            rawBreaks |= breaksAtAHyphen(why, note.font, note.rect.width());
        }
        QVERIFY2(rawBreaks, "no width breaks the plain text at a hyphen: the check above proves nothing");
    }

    // A PNG taken in the same turn of the event loop that set a long why-line (a --screenshot as
    // a race ends) shows the strip at its new height, not its note under the table.
    void aPngLaysOutTheNoteSetJustBefore() {
        QTemporaryDir dir;
        MainWindow w;
        QVERIFY(replayFake(w, dir,
                           {{QStringLiteral("a"), QStringLiteral("cpu"), 2000, 30},
                            {QStringLiteral("b"), QStringLiteral("cpu"), 1900, 30}}));
        QTest::qWait(50);
        auto* strip = w.dashboard()->strip();
        auto* table = w.dashboard()->summaryTable();
        strip->setBadge(QStringLiteral("Why? ") +
                        QString(QStringLiteral("a long explanation that wraps ")).repeated(12));
        // The strip grows at once; the table below it moves on the next layout pass.
        const auto overlap = [&] { return strip->geometry().bottom() - table->geometry().top(); };
        QVERIFY(overlap() > 0);
        QCOMPARE(w.exportDashboardPng(dir.filePath(QStringLiteral("now.png"))), QString());
        QVERIFY2(overlap() < 0, qPrintable(QStringLiteral("the strip ends %1 px into the table").arg(overlap())));
    }

    // Is the gap real? A repeat set (repeat-1 … repeat-3, as --repeat writes) opens as its last
    // repeat, each lane drawn with the band between its repeats' lowest and highest curves.
    void aRepeatSetIsDrawnWithEachLanesBand() {
        QTemporaryDir dir;
        const double slow[] = {900, 1000, 1100}, fast[] = {1900, 2000, 2100};
        for (int r = 0; r < 3; ++r) {
            QVERIFY(writeFakeRecording(dir.path() + QStringLiteral("/repeat-%1").arg(r + 1),
                                       {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), slow[r], 60},
                                        {QStringLiteral("cpu·2"), QStringLiteral("cpu"), fast[r], 30}}));
        }
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QVERIFY(replay(w, dir.path()));
        QCOMPARE(w.race()->lanes().size(), std::size_t(2)); // the last repeat's lanes only
        auto* chart = w.dashboard()->throughputChart();
        for (std::size_t lane = 0; lane < 2; ++lane) {
            const auto bands = chart->bands(lane);
            QVERIFY2(!bands.empty(), qPrintable(QStringLiteral("lane %1 has no band").arg(lane)));
            double lo = 1e18, hi = 0;
            for (const auto& band : bands) {
                for (const auto& p : band) {
                    lo = std::min(lo, p.y());
                    hi = std::max(hi, p.y());
                }
            }
            // The repeats' rates, give or take the fake lanes' 5% wobble (smoothed).
            const double wantLo = lane == 0 ? 900 : 1900, wantHi = lane == 0 ? 1100 : 2100;
            QVERIFY2(lo >= 0.94 * wantLo && lo <= 1.01 * wantLo && hi >= 0.99 * wantHi && hi <= 1.06 * wantHi,
                     qPrintable(QStringLiteral("lane %1: band %2..%3").arg(lane).arg(lo).arg(hi)));
        }
        // The set's verdict under the strip, as after live repeats.
        QVERIFY2(w.dashboard()->repeatNote().startsWith(QStringLiteral("3 repeats: cpu·2 ")) &&
                     w.dashboard()->repeatNote().contains(QStringLiteral("(N = 3)")),
                 qPrintable(w.dashboard()->repeatNote()));
        // Drawn as filled polygons under the lines, in the lanes' colours, translucent.
        const auto& lines = chart->plotLayer()->lines();
        QVERIFY(!lines.empty() && lines.front().fill);
        QVERIFY(lines.front().color.alphaF() < 0.5);
        const auto fills = std::count_if(lines.begin(), lines.end(), [](const PlotLine& l) { return l.fill; });
        QVERIFY(fills >= 2);
        // A single recording has no band.
        QTemporaryDir one;
        QVERIFY(writeFakeRecording(one.path(), {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 1000, 60}}));
        MainWindow single;
        single.show();
        QVERIFY(replay(single, one.path()));
        QVERIFY(single.dashboard()->throughputChart()->bands(0).empty());
        // A folder that is neither a recording nor a repeat set says what it expected.
        QTemporaryDir empty;
        QString error;
        RaceController race;
        QVERIFY(!race.addRecording(empty.path(), &error));
        QVERIFY2(error.contains(QStringLiteral("manifest.json")), qPrintable(error));
    }

    // Past four ranks, the bars show rank 0, the fastest and the one the others wait for.
    void eightRanksShowTheFirstTheFastestAndTheSlowest() {
        QTemporaryDir dir;
        test::FakeLane eight{QStringLiteral("cpu·8 ranks"), QStringLiteral("cpu"), 8000, 10};
        eight.breakdown = {{"forward", 0.04}, {"backward", 0.07}, {"communication", 0.02}};
        for (int r = 0; r < 8; ++r) {
            const double k = r == 5 ? 1.3 : r == 3 ? 0.9 : 1.0;
            eight.rankBreakdowns.push_back({{"forward", 0.04 * k}, {"backward", 0.07 * k}, {"communication", 0.02}});
        }
        QVERIFY(writeFakeRecording(dir.path(), {eight}, 1.0));
        MainWindow w;
        w.show();
        QVERIFY(replay(w, dir.path()));
        const auto& rows = w.dashboard()->breakdownBars()->rows();
        QStringList names;
        for (const auto& row : rows) {
            names << row.name;
        }
        QCOMPARE(names, QStringList({QStringLiteral("cpu·8 ranks (rec)"), QStringLiteral("rank 0 of 8"),
                                     QStringLiteral("rank 3 of 8"), QStringLiteral("rank 5 of 8")}));
        QVERIFY(rows[3].waitedForSlowerBy && std::abs(*rows[3].waitedForSlowerBy - 0.3) < 1e-6);
        QVERIFY(!rows[2].waitedForSlowerBy);
    }

    void similarLanesKeepALinearAxis() {
        QTemporaryDir dir;
        QVERIFY(writeFakeRecording(dir.path(), {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 900, 60},
                                                {QStringLiteral("cpu·2"), QStringLiteral("cpu"), 1700, 35}}));
        MainWindow w;
        w.show();
        QVERIFY(replay(w, dir.path()));
        auto* chart = w.dashboard()->throughputChart();
        QVERIFY(!chart->logScale());
        w.dashboard()->setThroughputScale(Dashboard::Scale::Log);
        QVERIFY(chart->logScale());
    }

    void chartsShareOneRoundXRange() {
        QTemporaryDir dir;
        // 49 minutes of training: m:ss ticks, one range for all three charts.
        QVERIFY(writeFakeRecording(dir.path(),
                                   {{QStringLiteral("slow"), QStringLiteral("cpu"), 17, 2945},
                                    {QStringLiteral("fast"), QStringLiteral("cpu"), 1660, 31}},
                                   5.0));
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QVERIFY(replay(w, dir.path()));
        const auto charts = w.dashboard()->charts();
        const auto range = charts.first()->xRange();
        QVERIFY(range.second >= 2945);
        for (auto* c : charts) {
            QCOMPARE(c->xRange(), range);
            for (const auto& label : c->xLabels()) {
                QVERIFY2(label.contains(QLatin1Char(':')), qPrintable(label)); // m:ss, not raw seconds
            }
            QVERIFY(c->chart()->axes(Qt::Horizontal).first()->titleText().contains(QStringLiteral("m:ss")));
        }
    }

    // Switching the x axis after a race (here two recordings, drawn complete) redraws every chart
    // from all the stored samples, in the new units: each lane's line reaches its last sample,
    // the range covers the longest lane, and evaluation marks sit where the lane evaluated.
    void everyXAxisModeDrawsEveryLaneOverItsFullRange() {
        QTemporaryDir dir;
        // 300 and 400 steps (batch 128), with a price per hour each, in two recordings.
        const QString first = dir.filePath(QStringLiteral("one")), second = dir.filePath(QStringLiteral("two"));
        QVERIFY(writeFakeRecording(first, {{QStringLiteral("a"), QStringLiteral("cpu"), 1280, 30, 3.0}}));
        QVERIFY(writeFakeRecording(second, {{QStringLiteral("b"), QStringLiteral("cpu"), 1280, 40, 1.5}}));
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QVERIFY(replay(w, first));
        QVERIFY(replay(w, second));
        const auto& histories = w.race()->histories();
        QCOMPARE(histories.size(), std::size_t(2));
        auto* box = w.dashboard()->findChild<QComboBox*>(QStringLiteral("xAxis"));
        QVERIFY(box);
        for (const auto axis : {XAxis::Step, XAxis::Samples, XAxis::Cost, XAxis::Time, XAxis::Step}) {
            box->setCurrentIndex(static_cast<int>(axis));
            QCoreApplication::processEvents();
            double longest = 0;
            for (const auto& h : histories) {
                longest = std::max(longest, xColumn(h, axis, false).back());
            }
            for (auto* c : w.dashboard()->charts()) {
                const bool eval = c->metric() == Metric::Accuracy;
                QVERIFY2(c->xRange().first <= 0 && c->xRange().second >= longest,
                         qPrintable(QStringLiteral("%1: range %2..%3, data to %4")
                                        .arg(c->chart()->title())
                                        .arg(c->xRange().first)
                                        .arg(c->xRange().second)
                                        .arg(longest)));
                for (std::size_t i = 0; i < histories.size(); ++i) {
                    const auto& xs = xColumn(histories[i], axis, eval);
                    const QColor color = w.race()->lanes()[i].color;
                    double drawnHi = -1;
                    int drawn = 0, marks = 0;
                    for (const auto& line : c->plotLayer()->lines()) {
                        if (line.color.rgb() != color.rgb() || line.boundaries) {
                            continue;
                        }
                        if (line.marks) { // evaluation marks: each at a stored evaluation's x
                            for (const auto& p : line.points) {
                                const auto& ex = xColumn(histories[i], axis, true);
                                QVERIFY(std::any_of(ex.begin(), ex.end(),
                                                    [&](double v) { return std::abs(v - p.x()) < 1e-9; }));
                                ++marks;
                            }
                            continue;
                        }
                        for (const auto& p : line.points) {
                            drawnHi = std::max(drawnHi, p.x());
                            ++drawn;
                        }
                    }
                    const QString what = QStringLiteral("%1, lane %2, x mode %3")
                                             .arg(c->chart()->title())
                                             .arg(i)
                                             .arg(static_cast<int>(axis));
                    QVERIFY2(drawnHi >= xs.back() * 0.999,
                             qPrintable(what + QStringLiteral(": line ends at %1 of %2").arg(drawnHi).arg(xs.back())));
                    // Decimated to ~1 point per pixel or less, never to a handful.
                    QVERIFY2(drawn >= static_cast<int>(std::min<std::size_t>(xs.size(), 40)),
                             qPrintable(what + QStringLiteral(": %1 points of %2").arg(drawn).arg(xs.size())));
                    if (!eval) {
                        QCOMPARE(marks, static_cast<int>(histories[i].evalStep.size()));
                    }
                }
            }
        }
    }

    // The Open-recording menu lists each run with its result, and two runs alike to the second
    // are told apart by their folders (it listed two identical lines, and no results).
    void theRecordingsMenuShowsResultsAndNoTwoLinesAlike() {
        QTemporaryDir runs;
        for (const auto* name : {"run-a", "run-b"}) {
            QVERIFY(writeFakeRecording(runs.filePath(QString::fromLatin1(name)),
                                       {{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 1000, 65},
                                        {QStringLiteral("cpu·2"), QStringLiteral("cpu"), 1500, 40}}));
        }
        QVERIFY(describeRecording(runs.filePath(QStringLiteral("run-a"))).contains(QStringLiteral("cpu·1 0.")));
        QMenu menu;
        fillRecordingMenu(&menu, runs.path(), nullptr, [](const QString&) {});
        QStringList lines;
        for (auto* a : menu.actions()) {
            if (!a->isSeparator() && a->isEnabled() && !a->text().startsWith(QStringLiteral("Other"))) {
                lines << a->text();
            }
        }
        QCOMPARE(lines.size(), 2);
        QVERIFY2(lines[0] != lines[1], qPrintable(lines.join(QStringLiteral("\n"))));
        for (const auto& line : lines) {
            QVERIFY2(line.contains(QStringLiteral("cpu·1 0.")) && line.contains(QStringLiteral("in 1:05")) &&
                         line.contains(QStringLiteral("cpu·2 0.")) && line.contains(QStringLiteral("in 0:40")),
                     qPrintable(line));
        }
    }

    // A failure's reason is read in full on the strip at 1280 px: two lines when one is too
    // short, never cut off with an ellipsis.
    // A lane far slower than the baseline says how many times slower, never "0.0× cuda:0".
    void aSlowLaneSaysHowManyTimesSlower() {
        QCOMPARE(speedupText(0.0408, QStringLiteral("cuda:0 (rec)")), QStringLiteral("25× slower than cuda:0 (rec)"));
        QCOMPARE(speedupText(0.02, QStringLiteral("cuda:0")), QStringLiteral("50× slower than cuda:0"));
        QCOMPARE(speedupText(0.97, QStringLiteral("cpu·1")), QStringLiteral("1.0× cpu·1"));
        QCOMPARE(speedupText(1.93, QStringLiteral("cpu·1")), QStringLiteral("1.9× cpu·1"));
        QCOMPARE(speedupText(41.2, QStringLiteral("cpu·1")), QStringLiteral("41× cpu·1"));
        // Read in full on the strip at 1280 px.
        RaceStrip strip;
        strip.resize(880, 200);
        StripRow base{QStringLiteral("cuda:0 (rec)"), laneColor(0), 1.0,  QStringLiteral("done 0:02 · acc 0.909"),
                      QStringLiteral("baseline"),     1.0,          false};
        StripRow slow{
            QStringLiteral("cpu·16 (rec)"), laneColor(1), 0.05, QStringLiteral("done 0:37 · acc 0.909 · 43% of peak"),
            speedupText(0.0408, base.name), 0.0408,       false};
        strip.setRows({base, slow});
        bool seen = false;
        for (const auto& t : strip.texts()) {
            QVERIFY2(!t.text.contains(QStringLiteral("…")), qPrintable(t.text));
            seen = seen || t.text == slow.speedup;
        }
        QVERIFY(seen);
    }

    // Lanes that raced at once on one GPU read one energy counter: neither bar claims samples
    // per joule of its own (the summary says "not attributable"). Raced one at a time, each does.
    void sharedEnergyCountersGiveNoLaneSamplesPerJoule() {
        for (const QString& mode : {QStringLiteral("live"), QStringLiteral("fair")}) {
            QTemporaryDir dir;
            std::vector<FakeLane> lanes;
            for (const QString& name : {QStringLiteral("a"), QStringLiteral("b")}) {
                FakeLane lane{name, QStringLiteral("cuda:0"), 2000, 20};
                lane.breakdown = {{"data", 0.01}, {"compute", 0.05}, {"other", 0.001}};
                lane.watts = 300;
                lanes.push_back(lane);
            }
            FakeLane cpu{QStringLiteral("cpu"), QStringLiteral("cpu"), 200, 20};
            cpu.breakdown = {{"data", 0.1}, {"forward", 0.2}, {"backward", 0.3}, {"optimizer", 0.05}};
            cpu.watts = 90; // its own counter (the host's packages): its figure stands either way
            lanes.push_back(cpu);
            QVERIFY(writeFakeRecording(dir.path(), lanes, 0.5, 10, QStringLiteral("fashion-mlp"), mode));
            MainWindow w;
            w.show();
            QVERIFY(replay(w, dir.path()));
            QTRY_VERIFY(breakdownRows(*w.race()).size() == 3);
            const auto rows = breakdownRows(*w.race());
            QCOMPARE(rows[0].samplesPerJoule.has_value(), mode == QStringLiteral("fair"));
            QCOMPARE(rows[1].samplesPerJoule.has_value(), mode == QStringLiteral("fair"));
            QVERIFY2(rows[2].samplesPerJoule.has_value(), qPrintable(mode));
        }
    }

    void aLongFailureReasonIsReadInFull() {
        RaceStrip strip;
        strip.resize(880, 200); // the dashboard's width at 1280x720 with the setup panel open
        StripRow ok{QStringLiteral("cpu·1"),    laneColor(0), 0.6,  QStringLiteral("epoch 1 · acc 0.81 · ETA 0:12"),
                    QStringLiteral("baseline"), 1.0,          false};
        StripRow failed{QStringLiteral("cuda:0"),
                        laneColor(1),
                        0.1,
                        QStringLiteral("failed: CUDA out of memory at step 1 (batch 4096 needs 21.4 GiB, "
                                       "the device has 15.7 GiB free); try a smaller batch="),
                        QString(),
                        std::nullopt,
                        true};
        strip.setRows({ok, failed});
        bool seen = false;
        for (const auto& t : strip.texts()) {
            QVERIFY2(!t.text.contains(QStringLiteral("…")), qPrintable(t.text));
            if (t.text == failed.status) {
                seen = true;
                const QRect need =
                    QFontMetrics(t.font).boundingRect(QRect(0, 0, t.rect.width(), 1000), t.flags, t.text);
                QVERIFY(need.width() <= t.rect.width() && need.height() <= t.rect.height());
            }
        }
        QVERIFY(seen);
    }

    // Every text of the strip, a failed lane's reason and the note under the lanes included,
    // reads at 4.5:1 or better on either theme (the failure's red read 3.6:1 on the light one and
    // 3.9:1 on the dark one).
    void aFailedLaneAndTheNoteReadOnEitherTheme() {
        for (const bool dark : {false, true}) {
            RaceStrip strip;
            if (dark) {
                strip.setPalette(darkPalette());
            }
            strip.resize(1280, 300);
            StripRow ok{QStringLiteral("cpu·1"),    laneColor(0), 0.6,  QStringLiteral("done 0:41"),
                        QStringLiteral("baseline"), 1.0,          false};
            StripRow failed{QStringLiteral("cpu·2"),
                            laneColor(1),
                            0.1,
                            QStringLiteral("failed: killed by signal 9"),
                            QString(),
                            std::nullopt,
                            true};
            strip.setRows({ok, failed});
            strip.setBadge(QStringLiteral("⚠ live lanes share 2 CPU cores"));
            const QColor bg = strip.palette().color(QPalette::Window);
            int checked = 0;
            for (const auto& t : strip.texts()) {
                QVERIFY2(contrastRatio(t.color, bg) >= 4.5,
                         qPrintable(QStringLiteral("%1 theme, \"%2\": %3 on %4, %5:1")
                                        .arg(dark ? QStringLiteral("dark") : QStringLiteral("light"), t.text,
                                             t.color.name(), bg.name())
                                        .arg(contrastRatio(t.color, bg), 0, 'f', 1)));
                if (t.text == failed.status) {
                    QVERIFY2(t.color.hslHue() <= 15 || t.color.hslHue() >= 345, qPrintable(t.color.name()));
                }
                ++checked;
            }
            QVERIFY(checked >= 5); // two names, two statuses, a speedup, the note
        }
    }

    void openShowsCompleteStartReplaysStopStops() {
        QTemporaryDir dir;
        QVERIFY(writeFakeRecording(dir.path(), {{QStringLiteral("a"), QStringLiteral("cpu"), 1000, 600},
                                                {QStringLiteral("b"), QStringLiteral("cpu"), 1500, 400}}));
        MainWindow w;
        w.show();
        w.setReplaySpeed(1); // real time: 10 minutes, far longer than this test
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.openRecording(dir.path()));
        // Opening draws the recording complete (to look at), it does not start playing.
        QTRY_COMPARE(finished.count(), 1);
        // Titled as it was recorded, whatever the setup's fair box says now.
        QVERIFY2(w.windowTitle().contains(QStringLiteral("replay, recorded in live mode")),
                 qPrintable(w.windowTitle()));
        const auto complete = w.race()->histories()[0].trainCount();
        QVERIFY(complete > 1000);
        QVERIFY(!w.race()->replaying());
        // Replay plays it from the start; Stop stops it where it is.
        w.replayRecordings();
        QVERIFY(w.race()->replaying());
        QTest::qWait(300);
        QVERIFY(w.race()->histories()[0].trainCount() < complete);
        // Pause holds the recorded lanes too.
        w.setPaused(true);
        QTest::qWait(150);
        const auto paused = w.race()->histories()[0].trainCount();
        QTest::qWait(400);
        QCOMPARE(w.race()->histories()[0].trainCount(), paused);
        w.setPaused(false);
        QTRY_VERIFY(w.race()->histories()[0].trainCount() > paused);
        w.stopRace();
        QTRY_COMPARE(finished.count(), 2);
        QVERIFY(!w.race()->replaying());
        // A lane cut off by Stop reads stopped, not "running · ETA" (the review's stopped replay).
        QVERIFY(w.race()->histories()[0].state == LaneState::Stopped);
        w.dashboard()->refresh();
        QStringList strip;
        for (const auto& text : w.dashboard()->strip()->texts()) {
            strip << text.text;
        }
        QVERIFY2(!strip.join(QLatin1Char(' ')).contains(QStringLiteral("ETA")),
                 qPrintable(strip.join(QStringLiteral(" | "))));
        QVERIFY2(strip.join(QLatin1Char(' ')).contains(QStringLiteral("stopped")),
                 qPrintable(strip.join(QStringLiteral(" | "))));
        const auto stoppedAt = w.race()->histories()[0].trainCount();
        QTest::qWait(300);
        QCOMPARE(w.race()->histories()[0].trainCount(), stoppedAt);
        // A recorded lane never takes a colour a lane already has.
        const auto& lanes = w.race()->lanes();
        QVERIFY(lanes[0].color != lanes[1].color);
        QVERIFY(lanes[0].name.endsWith(QStringLiteral("(rec)")));
    }

    void hoverShowsEveryLanesValueOnEveryChart() {
        QTemporaryDir dir;
        QVERIFY(writeFakeRecording(dir.path(), {{QStringLiteral("a"), QStringLiteral("cpu"), 1000, 100},
                                                {QStringLiteral("b"), QStringLiteral("cpu"), 3000, 80}}));
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(replay(w, dir.path()));
        auto* chart = w.dashboard()->throughputChart();
        const QRectF area = chart->chart()->plotArea();
        auto* viewport = chart->view()->viewport();
        const QPoint at = chart->view()->mapFromScene(
            chart->chart()->mapToScene(QPointF(area.left() + area.width() * 0.3, area.center().y())));
        sendMouse(viewport, QEvent::MouseMove, at, Qt::NoButton);
        for (auto* c : w.dashboard()->charts()) {
            const auto& text = c->plotLayer()->crosshairText();
            QCOMPARE(text.size(), std::size_t(3)); // the x value, then each lane
            QVERIFY(text[1].first.startsWith(QStringLiteral("a (rec)")));
            QVERIFY(text[2].first.startsWith(QStringLiteral("b (rec)")));
            QCOMPARE(*c->plotLayer()->crosshairX(), *chart->plotLayer()->crosshairX());
        }
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w.dashboard()->grab().save(shots + QStringLiteral("/crosshair.png"));
        }
        // Throughput values read as the lanes' rates (~1,000 and ~3,000 samples/s).
        const QString a = chart->plotLayer()->crosshairText()[1].first.section(QStringLiteral("  "), 1);
        const double rate = QString(a).remove(QLatin1Char(',')).toDouble();
        QVERIFY2(rate > 900 && rate < 1100, qPrintable(a));
        QEvent leave(QEvent::Leave);
        QApplication::sendEvent(chart->view(), &leave);
        for (auto* c : w.dashboard()->charts()) {
            QVERIFY(!c->plotLayer()->crosshairX());
        }
    }

    void dragZoomRedrawsTheLines() {
        QTemporaryDir dir;
        QVERIFY(writeFakeRecording(dir.path(), {{QStringLiteral("a"), QStringLiteral("cpu"), 1000, 100},
                                                {QStringLiteral("b"), QStringLiteral("cpu"), 1500, 80}}));
        MainWindow w;
        w.resize(1600, 1000);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(replay(w, dir.path()));
        auto* chart = w.dashboard()->lossChart();
        auto* other = w.dashboard()->throughputChart();
        const auto before = drawnXExtent(chart);
        QVERIFY(before.first < 5 && before.second > 90);
        const int pointsBefore = chart->pointCount();
        // Drag across the middle fifth of the plot area.
        const QRectF area = chart->chart()->plotArea();
        auto* viewport = chart->view()->viewport();
        const auto toView = [&](double fx) {
            return chart->view()->mapFromScene(
                chart->chart()->mapToScene(QPointF(area.left() + area.width() * fx, area.center().y())));
        };
        sendMouse(viewport, QEvent::MouseButtonPress, toView(0.4), Qt::LeftButton);
        sendMouse(viewport, QEvent::MouseMove, toView(0.5), Qt::LeftButton);
        sendMouse(viewport, QEvent::MouseMove, toView(0.6), Qt::LeftButton);
        sendMouse(viewport, QEvent::MouseButtonRelease, toView(0.6), Qt::NoButton);
        QVERIFY(chart->zoomed());
        const auto range = chart->xRange();
        QVERIFY(range.first > 20 && range.second < 80);
        // The drawn lines now cover the zoomed window only, in finer detail.
        QTRY_VERIFY(drawnXExtent(chart).first >= range.first - (range.second - range.first) * 0.02);
        const auto after = drawnXExtent(chart);
        QVERIFY2(after.second <= range.second + (range.second - range.first) * 0.02,
                 qPrintable(QStringLiteral("%1 > %2").arg(after.second).arg(range.second)));
        QVERIFY(after != before);
        QVERIFY(chart->pointCount() != pointsBefore);
        // The linked chart followed, lines included.
        QCOMPARE(other->xRange(), range);
        QVERIFY(drawnXExtent(other).first >= range.first - (range.second - range.first) * 0.02);
        // Right-click resets every chart.
        QTest::mouseClick(viewport, Qt::RightButton, {}, toView(0.5));
        QVERIFY(!chart->zoomed());
        QVERIFY(drawnXExtent(chart).first < 5);
    }

    // A script that alone knows its length (no --steps): before any such lane finishes the bars
    // stay empty and the status counts steps (it read "epoch 1 · ETA --:--"); a finished lane's
    // bar is full (it stayed empty), and a lane of the same command still running is measured
    // against the steps the finished one took.
    void aScriptLaneOfUnknownLengthShowsItsProgress() {
        QTemporaryDir dir;
        FakeLane first{QStringLiteral("first")};
        first.seconds = 30;
        first.lengthKnown = false;
        FakeLane second{QStringLiteral("second")};
        second.samplesPerSec = 500; // the same 30,000 samples in twice the time
        second.seconds = 60;
        second.lengthKnown = false;
        QVERIFY(writeFakeRecording(dir.path(), {first, second}));
        RaceController race;
        QString error;
        QVERIFY2(race.addRecording(dir.path(), &error), qPrintable(error));
        race.setReplayTime(20);
        race.poll();
        auto rows = stripRows(race, 0, 0);
        QCOMPARE(rows.size(), std::size_t(2));
        for (const auto& row : rows) {
            QCOMPARE(row.progress, 0.0);
            QVERIFY2(row.status.startsWith(QStringLiteral("step ")) && !row.status.contains(QStringLiteral("ETA")),
                     qPrintable(row.status));
        }
        race.setReplayTime(45);
        race.poll();
        rows = stripRows(race, 0, 0);
        QCOMPARE(rows[0].progress, 1.0);
        QVERIFY2(rows[0].status.startsWith(QStringLiteral("done")), qPrintable(rows[0].status));
        const double expected = (500.0 * 45 / 128) / (1000.0 * 30 / 128); // its steps over first's: 0.75
        QVERIFY2(std::abs(rows[1].progress - expected) < 0.02, qPrintable(QString::number(rows[1].progress)));
        QVERIFY2(rows[1].status.startsWith(QStringLiteral("step ")), qPrintable(rows[1].status));
    }

    // Scripts whose evaluations say only a loss (a language model's): the quality chart draws
    // their test loss, where "Test accuracy" stayed empty, and the strip says the latest.
    void evaluationsWithOnlyALossAreChartedAsTheTestLoss() {
        QTemporaryDir dir;
        FakeLane lstm{QStringLiteral("lstm")}, transformer{QStringLiteral("transformer")};
        lstm.evalLossOnly = transformer.evalLossOnly = true;
        transformer.seconds = 40;
        MainWindow w;
        QVERIFY(replayFake(w, dir, {lstm, transformer}));
        auto* chart = w.dashboard()->accuracyChart();
        QTRY_COMPARE(chart->metric(), Metric::EvalLoss);
        const auto [lo, hi] = drawnXExtent(chart);
        QVERIFY2(lo <= 6 && hi >= 59, qPrintable(QStringLiteral("%1 .. %2").arg(lo).arg(hi))); // every evaluation
        const auto rows = stripRows(*w.race(), 0, 0);
        QVERIFY2(rows[0].status.contains(QStringLiteral("test loss 0.7358")), qPrintable(rows[0].status)); // 2/e
        // A lane with an accuracy keeps the accuracy chart.
        QTemporaryDir mixed;
        FakeLane acc{QStringLiteral("acc")};
        QVERIFY(replayFake(w, mixed, {acc, lstm}));
        QTRY_COMPARE(chart->metric(), Metric::Accuracy);
    }

    // Durations on the strip and in the table: tenths of a second under ten seconds (a short
    // demo lane read "done 0:00"), then minutes and hours.
    void durationsReadAtTheirScale() {
        QCOMPARE(formatDuration(0.47), QStringLiteral("0.5 s"));
        QCOMPARE(formatDuration(9.9), QStringLiteral("9.9 s"));
        QCOMPARE(formatDuration(9.97), QStringLiteral("0:10"));
        QCOMPARE(formatDuration(65), QStringLiteral("1:05"));
        QCOMPARE(formatDuration(3723), QStringLiteral("1:02:03"));
        QCOMPARE(formatDuration(-1), QStringLiteral("--:--"));
    }
};

QTEST_MAIN(TestDashboard)
#include "tst_dashboard.moc"
