// The window on real screen sizes (two offscreen screens: 1280x720 and 1920x1080): it opens
// inside the screen, nothing the audience reads is elided in normal or presentation mode, and
// leaving presentation mode restores exactly the layout before.
#include <QtTest>

#include <map>

#include <QComboBox>
#include <QGraphicsScene>
#include <QGraphicsTextItem>
#include <QHeaderView>
#include <QLabel>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QToolBar>
#include <QTemporaryDir>
#include <QTextDocument>
#include <QtCharts/QAbstractAxis>
#include <QtCharts/QChart>

#include "charts/metric_chart.h"
#include "devicerace/device_info.h"
#include "devicerace/lane_spec.h"
#include "race_controller.h"
#include "charts/safe_chart_view.h"
#include "dashboard.h"
#include "fake_recording.h"
#include "main_window.h"
#include "race_strip.h"
#include "text_strip.h"
#include "breakdown_bars.h"
#include "setup_panel.h"
#include "lanes_table.h"
#include "summary_table.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

bool elided(const QString& text) { return text.contains(QStringLiteral("…")) || text.contains(QStringLiteral("...")); }

// The bars inside the window, every piece inside them, nothing elided, and each title, name
// and note as wide as its text.
void checkBarsReadInFull(const MainWindow& w, const BreakdownBars* bars) {
    const QRect inWindow(bars->mapTo(&w, QPoint(0, 0)), bars->size());
    QVERIFY(w.rect().contains(inWindow));
    const QFontMetrics fm(bars->pieceFont());
    QFont bold = bars->pieceFont();
    bold.setBold(true);
    for (const auto& p : bars->pieces()) {
        QVERIFY2(bars->rect().contains(p.rect), qPrintable(p.text));
        QVERIFY2(!elided(p.text), qPrintable(p.text));
        const QFontMetrics& m =
            p.kind == BreakdownBars::Piece::Title || p.kind == BreakdownBars::Piece::Name ? QFontMetrics(bold) : fm;
        if (p.kind != BreakdownBars::Piece::Segment && p.kind != BreakdownBars::Piece::Legend) {
            QVERIFY2(m.horizontalAdvance(p.text) <= p.rect.width(), qPrintable(p.text));
        }
    }
}

// Every problem a reader would see: elided or clipped texts, missing tick labels.
QStringList readabilityProblems(MainWindow& w) {
    QStringList problems;
    for (auto* chart : w.dashboard()->charts()) {
        if (!chart->isVisible()) {
            problems << QStringLiteral("a chart is hidden");
            continue;
        }
        const QRectF sceneRect = chart->chart()->rect();
        QSet<QString> shown;
        for (auto* item : chart->chart()->scene()->items()) {
            auto* text = dynamic_cast<QGraphicsTextItem*>(item);
            if (!text || !text->isVisible() || text->toPlainText().isEmpty()) {
                continue;
            }
            const QString t = text->toPlainText();
            shown.insert(t);
            if (elided(t)) {
                problems << chart->chart()->title() + QStringLiteral(": elided \"") + t + QLatin1Char('"');
            }
            const QRectF r = text->sceneBoundingRect();
            if (!sceneRect.adjusted(-1, -1, 1, 1).contains(r)) {
                problems << chart->chart()->title() + QStringLiteral(": \"") + t + QStringLiteral("\" cut at the edge");
            }
        }
        for (const auto& label : chart->xLabels() + chart->yLabels()) {
            if (!shown.contains(label)) {
                problems << chart->chart()->title() + QStringLiteral(": tick label \"") + label +
                                QStringLiteral("\" not drawn");
            }
        }
        for (auto* axis : chart->chart()->axes()) {
            if (!shown.contains(axis->titleText())) {
                problems << chart->chart()->title() + QStringLiteral(": axis title \"") + axis->titleText() +
                                QStringLiteral("\" not drawn in full");
            }
        }
        if (chart->chart()->plotArea().height() < 100) {
            problems << chart->chart()->title() +
                            QStringLiteral(": plot only %1 px tall").arg(chart->chart()->plotArea().height());
        }
    }
    auto* strip = w.dashboard()->strip();
    for (const auto& t : strip->texts()) {
        const QFontMetrics fm(t.font);
        const QRect need = (t.flags & Qt::TextWordWrap)
                               ? fm.boundingRect(QRect(0, 0, t.rect.width(), 10 * t.rect.height()), t.flags, t.text)
                               : QRect(0, 0, fm.horizontalAdvance(t.text), fm.height());
        if (elided(t.text) || need.width() > t.rect.width() || need.height() > t.rect.height() ||
            !strip->rect().contains(t.rect)) {
            problems << QStringLiteral("strip: \"") + t.text + QStringLiteral("\" does not fit");
        }
    }
    // The summary table shows every lane's row without scrolling (at 1280 px its horizontal
    // scroll bar used to take a row's height and leave 1.5 rows visible), unless the dashboard
    // had to limit it (many lanes): then at least two rows and a scroll bar to the others.
    if (auto* summary = w.dashboard()->summaryTable();
        summary->isVisible() && summary->rowCount() > 0 && summary->visibleRows() < summary->rowCount() &&
        (summary->heightLimit() == 0 || summary->visibleRows() < 2 || !summary->verticalScrollBar()->isVisible())) {
        problems << QStringLiteral("summary table: %1 of %2 rows visible (limit %3 px)")
                        .arg(summary->visibleRows())
                        .arg(summary->rowCount())
                        .arg(summary->heightLimit());
    }
    // ...and every column without a horizontal scroll bar (a replay's long device names pushed
    // "of peak" out of sight at 1280 px while three empty cost columns took the room).
    if (auto* summary = w.dashboard()->summaryTable();
        summary->isVisible() && summary->horizontalHeader()->length() > summary->viewport()->width()) {
        QStringList widths;
        for (int c = 0; c < summary->columnCount(); ++c) {
            if (!summary->isColumnHidden(c)) {
                widths << summary->horizontalHeaderItem(c)->text() + QLatin1Char(' ') +
                              QString::number(summary->columnWidth(c));
            }
        }
        problems << QStringLiteral("summary table: columns %1 px wide in %2 px (%3)")
                        .arg(summary->horizontalHeader()->length())
                        .arg(summary->viewport()->width())
                        .arg(widths.join(QStringLiteral(", ")));
    }
    // The title wraps (a long one takes a second line, never the window's width): each line
    // fits, and all its lines are shown.
    auto* title = w.dashboard()->titleLabel();
    const QRect titleRect = title->contentsRect();
    const QRect titleNeeds =
        QFontMetrics(title->font())
            .boundingRect(QRect(0, 0, titleRect.width(), 10 * titleRect.height()), Qt::TextWordWrap, title->text());
    if (titleNeeds.width() > titleRect.width() || titleNeeds.height() > titleRect.height() ||
        title->mapTo(&w, QPoint(0, 0)).x() + title->width() > w.width()) {
        problems << QStringLiteral("headline \"") + title->text() + QStringLiteral("\" cut");
    }
    return problems;
}

} // namespace

class TestWindowLayout : public QObject {
    Q_OBJECT
private:
    QTemporaryDir m_dir;
    QString m_recording;
    QString m_ranksRecording;                     // a data-parallel lane with its ranks' breakdowns
    QString m_gptRecording;                       // char-gpt: a text strip under the charts
    QString m_eightRecording, m_sixteenRecording; // many lanes, each with a step-time bar

    QScreen* screenOf(int width) {
        for (auto* s : QGuiApplication::screens()) {
            if (s->geometry().width() == width) {
                return s;
            }
        }
        return nullptr;
    }

    // A window on the screen `width` wide, replaying the recording (instantly).
    std::unique_ptr<MainWindow> openOn(int width, QString recording = {}) {
        auto w = std::make_unique<MainWindow>();
        QScreen* s = screenOf(width);
        w->setScreen(s);
        w->move(s->availableGeometry().topLeft());
        // The window sized itself for the primary screen (the projector) when it was made;
        // on the monitor it keeps that size or grows to its preferred one.
        if (width == 1920) {
            w->setInitialSize(QSize(1500, 950));
        }
        w->setReplaySpeed(0);
        w->show();
        if (!QTest::qWaitForWindowExposed(w.get())) {
            return nullptr;
        }
        QSignalSpy finished(w.get(), &MainWindow::raceFinished);
        if (!w->openRecording(recording.isEmpty() ? m_recording : recording) ||
            !(finished.count() == 1 || finished.wait(20000))) {
            return nullptr;
        }
        return w;
    }

    // openOn, in presentation mode or not, charts refreshed; saved as PREFIX-<data tag>.png under
    // $DEVICERACE_LAYOUT_SHOTS when set.
    std::unique_ptr<MainWindow> openPresented(int width, bool presentation, const QString& recording,
                                              const char* prefix) {
        auto w = openOn(width, recording);
        if (!w) {
            return nullptr;
        }
        w->setPresentation(presentation);
        QTest::qWait(100);
        w->dashboard()->refreshCharts();
        QTest::qWait(50);
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w->grab().save(shots + QLatin1Char('/') + QLatin1String(prefix) + QLatin1Char('-') +
                           QString::fromLatin1(QTest::currentDataTag()).replace(QLatin1Char(' '), QLatin1Char('-')) +
                           QStringLiteral(".png"));
        }
        return w;
    }

private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCOMPARE(QGuiApplication::screens().size(), 2);
        // A long CPU lane beside a 100x faster one: m:ss ticks, a log axis, long texts.
        m_recording = m_dir.filePath(QStringLiteral("rec"));
        // Both with a step-time breakdown and a peak (the bars under the charts, "% of peak"): the
        // GPU lane input-bound, as a real pipeline feeding a fast GPU is.
        test::FakeLane slow{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 17, 2945};
        slow.breakdown = {{"data", 0.3}, {"forward", 2.6}, {"backward", 4.1}, {"optimizer", 0.4}, {"other", 0.1}};
        slow.flopsPerSample = 4.8e8;
        slow.peakFlopsPerSec = 1.7e11;
        test::FakeLane fast{QStringLiteral("cuda:0"), QStringLiteral("cuda:0"), 1700, 31};
        fast.breakdown = {{"data", 0.024}, {"compute", 0.048}, {"other", 0.003}};
        fast.flopsPerSample = 4.8e8;
        fast.peakFlopsPerSec = 9.89e14;
        fast.watts = 300; // its board's counter (NVML): 1,700 samples/s at 300 W is 5.7 samples/J
        QVERIFY(test::writeFakeRecording(m_recording, {slow, fast}, 5.0));
        // Two language-model lanes whose latest texts are 120 characters with line breaks
        // and tabs, as char-gpt writes them.
        const QString text =
            QStringLiteral("\nThe fool doth think he is wise, but the wise man knows himself\n\t\t-- Shakespeare, "
                           "As You Like It\nA penny saved is a penny earned.");
        QVERIFY(text.size() >= 120);
        m_gptRecording = m_dir.filePath(QStringLiteral("gpt"));
        test::FakeLane cpu{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 200, 600};
        cpu.text = QStringLiteral("fand iou \nWhir \nthSt asfevay. pocrsir tha hes le tr \n\t---- Wamoubronen, Shis "
                                  "a mas Cothay When oqucireis m.s [: Peree Thin");
        test::FakeLane gpu{QStringLiteral("cuda:0"), QStringLiteral("cuda:0"), 20000, 60};
        gpu.text = text;
        QVERIFY(test::writeFakeRecording(m_gptRecording, {cpu, gpu}, 5.0, 10, QStringLiteral("char-gpt")));
        // Eight and sixteen lanes (a bf16 and a plain LibTorch race at 1 and 2 threads, twice),
        // each with its step-time bar and a peak.
        for (const int count : {8, 16}) {
            std::vector<test::FakeLane> lanes;
            for (int i = 0; i < count; ++i) {
                const QString name = QStringLiteral("cpu·%1%2%3")
                                         .arg(1 + i % 2)
                                         .arg(i % 4 >= 2 ? QStringLiteral("·bf16") : QString())
                                         .arg(i >= 4 ? QStringLiteral("·plain%1").arg(i / 4) : QString());
                test::FakeLane lane{name, QStringLiteral("cpu"), 20000.0 + 1500 * i, 3 + 0.3 * i};
                lane.breakdown = {{"data", 0.0002}, {"forward", 0.0025}, {"backward", 0.0035}, {"optimizer", 0.0004}};
                lane.flopsPerSample = 4.8e5;
                lane.peakFlopsPerSec = 1.7e11;
                lanes.push_back(lane);
            }
            QString& dir = count == 8 ? m_eightRecording : m_sixteenRecording;
            dir = m_dir.filePath(QStringLiteral("lanes%1").arg(count));
            QVERIFY(
                test::writeFakeRecording(dir, lanes, 0.25, 10, QStringLiteral("fashion-mlp"), QStringLiteral("fair")));
        }
        // A 4-rank data-parallel lane whose rank 2 is 25% slower: the others wait for it.
        m_ranksRecording = m_dir.filePath(QStringLiteral("ranks"));
        test::FakeLane one{QStringLiteral("cpu·1"), QStringLiteral("cpu"), 1000, 60};
        one.breakdown = {{"data", 0.004}, {"forward", 0.040}, {"backward", 0.070}, {"optimizer", 0.010}};
        test::FakeLane four{QStringLiteral("cpu·4 ranks"), QStringLiteral("cpu"), 3500, 20};
        four.breakdown = {{"data", 0.004},          {"forward", 0.050},   {"backward", 0.087},
                          {"communication", 0.032}, {"optimizer", 0.010}, {"other", 0.002}};
        for (int r = 0; r < 4; ++r) {
            const double k = r == 2 ? 1.25 : 1.0;
            four.rankBreakdowns.push_back({{"data", 0.004 * k},
                                           {"forward", 0.040 * k},
                                           {"backward", 0.070 * k},
                                           {"communication", r == 2 ? 0.002 : 0.032},
                                           {"optimizer", 0.010 * k},
                                           {"other", 0.001}});
        }
        QVERIFY(test::writeFakeRecording(m_ranksRecording, {one, four}, 1.0));
    }

    // The text each lane wrote is read in full, wrapped inside the strip, at both sizes and in
    // both modes, and the charts above it stay readable.
    void theTextStripReadsInFull_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<bool>("presentation");
        QTest::newRow("1280x720 normal") << 1280 << false;
        QTest::newRow("1280x720 presentation") << 1280 << true;
        QTest::newRow("1920x1080 normal") << 1920 << false;
        QTest::newRow("1920x1080 presentation") << 1920 << true;
    }
    void theTextStripReadsInFull() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        auto w = openPresented(width, presentation, m_gptRecording, "text-strip");
        QVERIFY(w);
        auto* strip = w->dashboard()->textStrip();
        QVERIFY(strip->isVisible());
        QCOMPARE(strip->lines().size(), std::size_t(2));
        // Language models: tokens/s and validation loss on the charts.
        QCOMPARE(w->dashboard()->throughputChart()->metric(), Metric::TokensPerSec);
        QCOMPARE(w->dashboard()->accuracyChart()->metric(), Metric::EvalLoss);
        // Inside the window, not squeezed by the layout.
        const QRect inWindow(strip->mapTo(w.get(), QPoint(0, 0)), strip->size());
        QVERIFY(w->rect().contains(inWindow));
        QCOMPARE(strip->height(), strip->heightForWidth(strip->width()));
        std::map<QString, QString> written;
        for (const auto& p : strip->pieces()) {
            QVERIFY2(strip->rect().contains(p.rect), qPrintable(p.text));
            if (!p.label) {
                written[p.color.name()] += p.text;
            }
            QVERIFY2(!elided(p.text), qPrintable(p.text));
        }
        for (const auto& line : strip->lines()) {
            QCOMPARE(written[line.color.name()], line.text); // every character, in order
            QVERIFY(line.text.contains(QStringLiteral("\u21b5")));
            QVERIFY(!line.text.contains(QLatin1Char('\n')));
        }
        const QStringList problems = readabilityProblems(*w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
    }

    // Where each lane's step time goes: one bar per lane, the phases in the same colours on every
    // lane, the notes ("ms/step · % of peak · input-bound") read in full, at both sizes and in
    // both modes, with the charts above still readable.
    void theBreakdownBarsReadInFull_data() { theTextStripReadsInFull_data(); }
    void theBreakdownBarsReadInFull() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        auto w = openPresented(width, presentation, m_recording, "breakdown");
        QVERIFY(w);
        auto* bars = w->dashboard()->breakdownBars();
        QVERIFY(bars->isVisible());
        QCOMPARE(bars->rows().size(), std::size_t(2));
        checkBarsReadInFull(*w, bars);
        QVERIFY(!QTest::currentTestFailed());
        std::map<QString, QColor> phaseColours;
        std::map<int, int> segmentWidth; // row top -> summed segment widths
        QStringList notes;
        for (const auto& p : bars->pieces()) {
            if (p.kind == BreakdownBars::Piece::Segment) {
                if (phaseColours.count(p.text)) {
                    QCOMPARE(phaseColours[p.text], p.color); // one colour per phase on every lane
                }
                phaseColours[p.text] = p.color;
                segmentWidth[p.rect.top()] += p.rect.width();
            }
            if (p.kind == BreakdownBars::Piece::Note) {
                notes << p.text;
            }
        }
        QCOMPARE(notes.size(), 2);
        QVERIFY2(notes[0].startsWith(QStringLiteral("7.5 s/step · ")) && notes[0].contains(QStringLiteral("% of peak")),
                 qPrintable(notes[0]));
        QVERIFY2(notes[1].startsWith(QStringLiteral("75.0 ms/step · ")) &&
                     notes[1].contains(QStringLiteral("input-bound (32% data)")) &&
                     notes[1].contains(QStringLiteral(" samples/J")),
                 qPrintable(notes[1]));
        QVERIFY(!notes[0].contains(QStringLiteral("input-bound")));
        QVERIFY(!notes[0].contains(QStringLiteral("samples/J"))); // no counter read for that lane
        QCOMPARE(segmentWidth.size(), std::size_t(2));
        QVERIFY(std::abs(segmentWidth.begin()->second - segmentWidth.rbegin()->second) <= 2); // both bars are 100%
        const QStringList problems = readabilityProblems(*w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
    }

    // A data-parallel lane's ranks under its bar: the rank the others wait for says so, the others
    // their share in communication; read in full at both sizes and in both modes.
    void theRanksBarsNameTheRankTheOthersWaitFor_data() { theTextStripReadsInFull_data(); }
    void theRanksBarsNameTheRankTheOthersWaitFor() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        auto w = openPresented(width, presentation, m_ranksRecording, "ranks");
        QVERIFY(w);
        auto* bars = w->dashboard()->breakdownBars();
        const auto& rows = bars->rows();
        QCOMPARE(rows.size(), std::size_t(6)); // cpu·1, the lane, its 4 ranks
        QCOMPARE(rows[1].rank, -1);
        for (int r = 0; r < 4; ++r) {
            const auto& row = rows[static_cast<std::size_t>(2 + r)];
            QCOMPARE(row.rank, r);
            QCOMPARE(row.name, QStringLiteral("rank %1").arg(r));
            QCOMPARE(row.color, rows[1].color);
            const QString note = breakdownNote(row);
            if (r == 2) {
                QVERIFY2(note.contains(QStringLiteral("the others wait for it (25% slower)")), qPrintable(note));
            } else {
                QVERIFY2(note.contains(QStringLiteral("communication 20%")), qPrintable(note));
            }
        }
        checkBarsReadInFull(*w, bars);
        QVERIFY(!QTest::currentTestFailed());
        const QStringList problems = readabilityProblems(*w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
    }

    // Many lanes: every part grows by a row each, and at 1280x720 they left the charts ~50 px
    // tall, their ticks and titles elided. The bars and the strip tighten, the table scrolls past
    // two rows, presentation mode drops the bars, and the charts stay readable; normal mode
    // scrolls the dashboard past that, presentation never does (with eight lanes).
    void manyLanesStayReadable_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<bool>("presentation");
        QTest::addColumn<int>("lanes");
        QTest::newRow("1280x720 normal 8 lanes") << 1280 << false << 8;
        QTest::newRow("1280x720 presentation 8 lanes") << 1280 << true << 8;
        QTest::newRow("1920x1080 normal 8 lanes") << 1920 << false << 8;
        QTest::newRow("1920x1080 presentation 8 lanes") << 1920 << true << 8;
        QTest::newRow("1280x720 normal 16 lanes") << 1280 << false << 16;
    }
    void manyLanesStayReadable() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        QFETCH(int, lanes);
        auto w = openPresented(width, presentation, lanes == 8 ? m_eightRecording : m_sixteenRecording, "many");
        QVERIFY(w);
        if (width == 1920 && !presentation) {
            w->showMaximized(); // the whole monitor for the eight lanes
        }
        // A why-line of two or three lines under the lanes, as a bf16 race on an emulating CPU writes.
        w->dashboard()->setSharingNote(
            QStringLiteral("Why? cpu·1·bf16 runs at 0.87× the speed of cpu·1: this CPU has no bf16 units (neither "
                           "AMX nor AVX-512 BF16), so bf16 arithmetic is emulated on its fp32 units: its GEMMs took "
                           "MKL bf16 for 5 of 8 GEMM shapes, fp32 for 3, and the conversions to bf16 and back come "
                           "on top; it reached 69% of this CPU's fp32 peak (an emulated bf16 lane's)"));
        QTest::qWait(100);
        w->dashboard()->refreshCharts();
        QTest::qWait(50);
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w->dashboard()->grab().save(
                shots + QStringLiteral("/many-") +
                QString::fromLatin1(QTest::currentDataTag()).replace(QLatin1Char(' '), QLatin1Char('-')) +
                QStringLiteral(".png"));
        }
        QVERIFY(screenOf(width)->availableGeometry().contains(w->frameGeometry()));
        const QStringList problems = readabilityProblems(*w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
        QCOMPARE(w->dashboard()->strip()->rows().size(), std::size_t(lanes));
        auto* bars = w->dashboard()->breakdownBars();
        if (bars->isVisible()) {
            QCOMPARE(bars->rows().size(), std::size_t(lanes));
            checkBarsReadInFull(*w, bars);
        } else {
            QVERIFY2(presentation, "the bars give way only in presentation mode");
        }
        auto* scroll = w->findChild<QScrollArea*>(QStringLiteral("dashboardScroll"));
        QVERIFY(scroll);
        const bool scrolls = w->dashboard()->height() > scroll->viewport()->height();
        QVERIFY2(!presentation || !scrolls, "presentation shows everything on the screen");
        auto* summary = w->dashboard()->summaryTable();
        if (width == 1920 && !presentation) {
            QVERIFY(!scrolls); // eight lanes fit a maximized 1080 px window whole: every bar and row
            QCOMPARE(summary->visibleRows(), summary->rowCount());
        }
        if (width == 1280 && !presentation) {
            QVERIFY(summary->heightLimit() > 0); // the table gave way first, then the window scrolls
            QVERIFY(scrolls || lanes == 8);
        }
    }

    void opensInsideTheScreen_data() {
        QTest::addColumn<int>("width");
        QTest::newRow("1280x720") << 1280;
        QTest::newRow("1920x1080") << 1920;
    }
    void opensInsideTheScreen() {
        QFETCH(int, width);
        MainWindow w;
        QScreen* s = screenOf(width);
        w.setScreen(s);
        w.move(s->availableGeometry().topLeft());
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY2(s->availableGeometry().contains(w.frameGeometry()),
                 qPrintable(QStringLiteral("%1x%2").arg(w.frameGeometry().width()).arg(w.frameGeometry().height())));
        // Before any race the charts have axes with ticks, and their titles do not overlap (the
        // audience's first sight: the axis titles used to sit on top of each other).
        QTest::qWait(50);
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w.grab().save(shots + QStringLiteral("/empty-%1.png").arg(width));
        }
        for (auto* chart : w.dashboard()->charts()) {
            QVERIFY2(chart->xLabels().size() >= 2 && chart->yLabels().size() >= 2,
                     qPrintable(chart->chart()->title() + QStringLiteral(": no ticks before the race")));
            QList<QRectF> titles;
            for (auto* item : chart->chart()->scene()->items()) {
                auto* text = dynamic_cast<QGraphicsTextItem*>(item);
                if (text && text->isVisible()) {
                    const QString t = text->toPlainText();
                    if (t == chart->chart()->title() ||
                        t == chart->chart()->axes(Qt::Horizontal).first()->titleText() ||
                        t == chart->chart()->axes(Qt::Vertical).first()->titleText()) {
                        titles << text->sceneBoundingRect();
                    }
                }
            }
            QCOMPARE(titles.size(), 3);
            for (int i = 0; i < titles.size(); ++i) {
                for (int j = i + 1; j < titles.size(); ++j) {
                    QVERIFY2(!titles[i].intersects(titles[j]),
                             qPrintable(chart->chart()->title() + QStringLiteral(": titles overlap")));
                }
            }
        }
        const QStringList problems = readabilityProblems(w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
    }

    void nothingElided_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<bool>("presentation");
        QTest::addColumn<bool>("maximized");
        // The other theme of each mode: the dark window a user chose, presentation's light theme
        // for a bright room (key T).
        QTest::addColumn<bool>("otherTheme");
        QTest::newRow("1280x720 normal") << 1280 << false << false << false;
        QTest::newRow("1280x720 normal dark") << 1280 << false << false << true;
        QTest::newRow("1280x720 presentation") << 1280 << true << false << false;
        QTest::newRow("1280x720 presentation light") << 1280 << true << false << true;
        QTest::newRow("1920x1080 normal") << 1920 << false << false << false;
        QTest::newRow("1920x1080 normal maximized") << 1920 << false << true << false;
        QTest::newRow("1920x1080 normal dark") << 1920 << false << false << true;
        QTest::newRow("1920x1080 presentation") << 1920 << true << false << false;
        QTest::newRow("1920x1080 presentation light") << 1920 << true << false << true;
    }
    void nothingElided() {
        QFETCH(int, width);
        QFETCH(bool, presentation);
        QFETCH(bool, maximized);
        QFETCH(bool, otherTheme);
        auto w = openOn(width);
        QVERIFY(w);
        QVERIFY(screenOf(width)->availableGeometry().contains(w->frameGeometry()));
        if (maximized) {
            w->showMaximized();
        }
        if (otherTheme) {
            w->setDarkTheme(!presentation);
            w->setPresentationDark(!presentation);
        }
        w->setPresentation(presentation);
        QTest::qWait(100);
        w->dashboard()->refreshCharts(); // ticks fitted to the final sizes
        QTest::qWait(50);
        if (presentation) {
            QCOMPARE(w->dashboard()->width(), width);
            // The headline speedup is the largest text on screen.
            QVERIFY(w->dashboard()->titleLabel()->text().contains(QStringLiteral("faster than")));
            const double headline = QFontInfo(w->dashboard()->titleLabel()->font()).pixelSize();
            for (const auto& t : w->dashboard()->strip()->texts()) {
                QVERIFY(QFontInfo(t.font).pixelSize() < headline);
            }
        }
        // DEVICERACE_LAYOUT_SHOTS=DIR keeps a picture of each case to look at.
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w->grab().save(shots + QLatin1Char('/') +
                           QString::fromLatin1(QTest::currentDataTag()).replace(QLatin1Char(' '), QLatin1Char('-')) +
                           QStringLiteral(".png"));
        }
        const QStringList problems = readabilityProblems(*w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
    }

    // After Start, in fair and live mode, the window stays on the screen (a fair race's mode note
    // once widened a 1280 px window to 1,429 px) and nothing the audience reads is cut, while the
    // race runs and when it is done.
    void staysOnTheScreenAfterStart_data() {
        QTest::addColumn<int>("width");
        QTest::addColumn<bool>("fair");
        QTest::addColumn<bool>("maximized");
        QTest::newRow("1280x720 fair") << 1280 << true << false;
        QTest::newRow("1280x720 fair maximized") << 1280 << true << true;
        QTest::newRow("1280x720 live") << 1280 << false << false;
        QTest::newRow("1920x1080 fair") << 1920 << true << false;
        QTest::newRow("1920x1080 live") << 1920 << false << false;
    }
    void staysOnTheScreenAfterStart() {
        QFETCH(int, width);
        QFETCH(bool, fair);
        QFETCH(bool, maximized);
        MainWindow w;
        QScreen* s = screenOf(width);
        w.setScreen(s);
        w.move(s->availableGeometry().topLeft());
        w.show();
        if (maximized) {
            w.showMaximized();
        }
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        RaceSpec spec;
        spec.steps = 120;
        spec.fair = fair;
        spec.trainLimit = 4000;
        spec.testLimit = 500;
        spec.lanes = {parseLaneSpec("cpu,threads=1"), parseLaneSpec("cpu,threads=1,name=second lane")};
        w.setupPanel()->setRaceSpec(spec);
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        auto check = [&](const char* when) {
            QTest::qWait(50);
            w.dashboard()->refreshCharts();
            QTest::qWait(50);
            const QRect avail = s->availableGeometry();
            QVERIFY2(avail.contains(w.frameGeometry()), qPrintable(QStringLiteral("%1: frame %2x%3 at %4,%5 on %6x%7")
                                                                       .arg(QString::fromLatin1(when))
                                                                       .arg(w.frameGeometry().width())
                                                                       .arg(w.frameGeometry().height())
                                                                       .arg(w.frameGeometry().x())
                                                                       .arg(w.frameGeometry().y())
                                                                       .arg(avail.width())
                                                                       .arg(avail.height())));
            QVERIFY(w.minimumSizeHint().width() <= avail.width());
            const QStringList problems = readabilityProblems(w);
            QVERIFY2(problems.isEmpty(), qPrintable(QString::fromLatin1(when) + QStringLiteral(": ") +
                                                    problems.join(QStringLiteral("\n"))));
        };
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->hasRace() && w.race()->histories()[0].lastStep > 10, 60000);
        check("racing");
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
        w.dashboard()->refreshSummary();
        check("finished");
        // The "speedup vs" box shows a lane's whole name.
        auto* baseline = w.dashboard()->findChild<QComboBox*>(QStringLiteral("baseline"));
        QVERIFY(baseline && baseline->width() >= baseline->sizeHint().width());
        QVERIFY(baseline->fontMetrics().horizontalAdvance(QStringLiteral("second lane")) < baseline->width());
        auto* note = w.dashboard()->findChild<QLabel*>(QStringLiteral("modeNote"));
        QVERIFY(note && note->isVisible());
        QVERIFY(note->text().startsWith(fair ? QStringLiteral("fair mode") : QStringLiteral("live mode")));
    }

    void lanesTableShowsWhatDiffersWithoutScrolling_data() {
        QTest::addColumn<int>("width");
        QTest::newRow("1280x720") << 1280;
        QTest::newRow("1920x1080") << 1920;
    }
    void lanesTableShowsWhatDiffersWithoutScrolling() {
        QFETCH(int, width);
        auto w = openOn(width);
        QVERIFY(w);
        auto* table = w->setupPanel()->lanesTable();
        auto* header = table->horizontalHeader();
        for (int column : {int(LanesTable::ColDevice), int(LanesTable::ColThreads), int(LanesTable::ColBatch),
                           int(LanesTable::ColPrecision)}) {
            const int right = header->sectionViewportPosition(column) + header->sectionSize(column);
            QVERIFY2(header->sectionViewportPosition(column) >= 0 && right <= table->viewport()->width(),
                     qPrintable(QStringLiteral("column %1 ends at %2 of %3")
                                    .arg(column)
                                    .arg(right)
                                    .arg(table->viewport()->width())));
        }
    }

    // A preset whose GPU lane is a stand-in recording, loaded at 1280x720 with the setup shown:
    // the recording's long data description in the title once widened the dashboard past the
    // window (the loss chart and the table's right half off screen), and the preset's notes
    // were cut at their last line.
    void aPresetWithAStandInFitsTheWindow() {
        if (deviceReport().cudaAvailable) {
            QSKIP("a machine with a GPU races the preset's GPU lane itself (no stand-in)");
        }
        MainWindow w;
        QScreen* s = screenOf(1280);
        w.setScreen(s);
        w.move(s->availableGeometry().topLeft());
        w.setReplaySpeed(0);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QString error;
        QVERIFY2(w.setupPanel()->loadPreset(QStringLiteral("gpt-cpu-vs-gpu"), 0, &error), qPrintable(error));
        QVERIFY(finished.count() == 1 || finished.wait(20000));
        QTest::qWait(100);
        w.dashboard()->refreshCharts();
        QTest::qWait(50);
        if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
            w.grab().save(shots + QStringLiteral("/preset-stand-in-1280.png"));
        }
        QVERIFY(w.dashboard()->titleLabel()->text().contains(QStringLiteral("copied to the GPU machine")));
        QCOMPARE(w.setupPanel()->findChild<QComboBox*>(QStringLiteral("preset"))->currentText(),
                 QStringLiteral("gpt-cpu-vs-gpu"));
        QVERIFY2(s->availableGeometry().contains(w.frameGeometry()),
                 qPrintable(QStringLiteral("%1 px wide").arg(w.frameGeometry().width())));
        const QRect dash(w.dashboard()->mapTo(&w, QPoint(0, 0)), w.dashboard()->size());
        QVERIFY2(w.rect().contains(dash), qPrintable(QStringLiteral("dashboard %1 px wide from x=%2 in %3 px")
                                                         .arg(dash.width())
                                                         .arg(dash.x())
                                                         .arg(w.width())));
        const QStringList problems = readabilityProblems(w);
        QVERIFY2(problems.isEmpty(), qPrintable(problems.join(QStringLiteral("\n"))));
        // The preset's notes and the workload's description read to their last line (both were
        // cut: a wrapped label in the setup's form got less height than its text needs).
        int wrapped = 0;
        for (auto* l : w.setupPanel()->findChildren<QLabel*>()) {
            if (!l->isVisible() || !l->wordWrap() || l->text().isEmpty()) {
                continue;
            }
            ++wrapped;
            QTextDocument doc; // the label's rich text laid out as the label lays it out
            doc.setDefaultFont(l->font());
            doc.setDocumentMargin(0);
            if (Qt::mightBeRichText(l->text())) {
                doc.setHtml(l->text());
            } else {
                doc.setPlainText(l->text());
            }
            doc.setTextWidth(l->contentsRect().width());
            QVERIFY2(std::ceil(doc.size().height()) <= l->contentsRect().height() + 1,
                     qPrintable(QStringLiteral("\"%1\" needs %2 px, has %3")
                                    .arg(l->text().left(40))
                                    .arg(doc.size().height())
                                    .arg(l->contentsRect().height())));
        }
        QVERIFY(wrapped >= 2);
    }

    void leavingPresentationRestoresTheLayout() {
        auto w = openOn(1280);
        QVERIFY(w);
        QTest::qWait(50);
        auto geometries = [&] {
            QList<QRect> out{w->geometry(), w->dashboard()->geometry(), w->setupPanel()->geometry()};
            for (auto* c : w->dashboard()->charts()) {
                out << QRect(c->mapTo(w.get(), QPoint(0, 0)), c->size());
            }
            return out;
        };
        const auto before = geometries();
        const auto splitter = w->findChild<QSplitter*>()->sizes();
        for (int round = 0; round < 2; ++round) {
            w->setPresentation(true);
            QTest::qWait(50);
            QVERIFY(!w->setupPanel()->isVisible());
            w->setPresentation(false);
            QTRY_COMPARE(geometries(), before);
            QCOMPARE(w->findChild<QSplitter*>()->sizes(), splitter);
        }
        // The setup panel folds away and comes back (Ctrl+B); presentation keeps it folded.
        auto* setup = w->findChild<QToolBar*>()->actions().first();
        QCOMPARE(setup->text(), QStringLiteral("Setup"));
        const int dashboardWidth = w->dashboard()->width();
        setup->toggle();
        QVERIFY(!w->setupPanel()->isVisible());
        QTRY_VERIFY(w->dashboard()->width() > dashboardWidth);
        w->setPresentation(true);
        w->setPresentation(false);
        QVERIFY(!w->setupPanel()->isVisible());
        setup->toggle();
        QVERIFY(w->setupPanel()->isVisible());
        QTRY_COMPARE(geometries(), before);
        // Esc leaves presentation mode the same way.
        w->setPresentation(true);
        QTest::qWait(50);
        QTest::keyClick(w.get(), Qt::Key_Escape);
        QVERIFY(!w->presentation());
        QTRY_COMPARE(geometries(), before);
    }
};

int main(int argc, char** argv) {
    // Two offscreen screens of the sizes projectors and monitors have.
    QTemporaryDir dir;
    const QString config = dir.filePath(QStringLiteral("screens.json"));
    QFile file(config);
    if (!file.open(QIODevice::WriteOnly) ||
        file.write(R"({"synchronousWindowSystemEvents": true, "windowFrameMargins": false, "screens": [
            {"name": "projector", "x": 0, "y": 0, "width": 1280, "height": 720, "logicalDpi": 96},
            {"name": "monitor", "x": 1280, "y": 0, "width": 1920, "height": 1080, "logicalDpi": 96}]})") < 0) {
        return 2;
    }
    file.close();
    qputenv("QT_QPA_PLATFORM", QByteArray("offscreen:configfile=") + config.toLocal8Bit());
    QApplication app(argc, argv);
    TestWindowLayout test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_window_layout.moc"
