// The race window, offscreen: lanes, a short real race, exports, presentation, closing mid-race.
#include <QtTest>

#include <QAbstractItemView>
#include <QComboBox>
#include <QDirIterator>
#include <QFileDialog>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStatusBar>
#include <QSvgRenderer>
#include <QTemporaryDir>
#include <QToolBar>
#include <QToolTip>
#include <QStandardPaths>
#include <QtCharts/QChart>

#include <unistd.h>

#include "charts/metric_chart.h"
#include "charts/safe_chart_view.h"
#include "dashboard.h"
#include "drawn_text.h"
#include "exporter.h"
#include "hosts_dialog.h"
#include "device_panel.h"
#include "devicerace/device_info.h"
#include "devicerace/tensorboard.h"
#include "charts/palette.h"
#include "theme.h"
#include "devicerace/frameworks.h"
#include "lanes_table.h"
#include "main_window.h"
#include "race_controller.h"
#include "race_strip.h"
#include "setup_panel.h"
#include "summary_table.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

bool haveFashionMnist() {
    return QFile::exists(QStringLiteral("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"));
}

RaceSpec shortRace(std::int64_t steps) {
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.steps = steps;
    LaneSpec one;
    one.threads = 1;
    LaneSpec two;
    two.threads = 1;
    two.name = "twin";
    spec.lanes = {one, two};
    spec.targetAccuracy = 0.5;
    if (!haveFashionMnist()) {
        spec.data = DataMode::Synthetic;
    }
    return spec;
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true); // QSettings go to a test location
        QCoreApplication::setOrganizationName(QStringLiteral("DeviceRaceTest"));
        QCoreApplication::setApplicationName(QStringLiteral("DeviceRaceTest"));
    }

    // Lanes whose ranks a cluster's launcher starts keep their launcher, keys and device through
    // the lanes table (the window races what the CLI would).
    void clusterLanesRoundTripThroughTheTable() {
        MainWindow w;
        auto* table = w.setupPanel()->lanesTable();
        const std::vector<LaneSpec> cluster{
            parseLaneSpec("slurm:///cpu,threads=1,workers=2,nodes=2,partition=gpu,time=30,queue=120,name=slurm"),
            parseLaneSpec("slurm://login1/cuda:0-7,nodes=8,name=big"),
            parseLaneSpec("attach://10.0.0.5:29400/cuda,token_file=/tmp/t,name=job")};
        table->setLanes(cluster);
        const auto lanes = table->lanes();
        QCOMPARE(lanes.size(), cluster.size());
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            QCOMPARE(formatLaneSpec(lanes[i]), formatLaneSpec(cluster[i]));
            QVERIFY(laneKind(lanes[i]) == laneKind(cluster[i]));
        }
        // The device combo shows the launcher's device, selectable (checked where the job runs).
        auto* device = qobject_cast<QComboBox*>(table->cellWidget(1, LanesTable::ColDevice));
        QCOMPARE(device->currentData().toString(), QStringLiteral("slurm://login1/cuda:0-7"));
        QVERIFY(device->model()->flags(device->model()->index(device->currentIndex(), 0)) & Qt::ItemIsEnabled);
        // Where Slurm's client is installed, a new lane can be a Slurm job.
        QCOMPARE(device->findData(QStringLiteral("slurm:///cpu")) >= 0, !localSrun().empty());
    }

    void defaultRaceNeedsNoConfiguration() {
        MainWindow w;
        auto* table = w.setupPanel()->lanesTable();
        // The engine's first race (defaultRace): cpu·1 vs cuda:0, or two CPU lanes in fair mode.
        const auto first = defaultRace();
        QCOMPARE(table->rowCount(), static_cast<int>(first.lanes.size()));
        const auto lanes = table->lanes();
        for (std::size_t i = 0; i < lanes.size(); ++i) {
            QCOMPARE(formatLaneSpec(lanes[i]), formatLaneSpec(first.lanes[i]));
        }
        QCOMPARE(w.setupPanel()->raceSpec().fair, first.fair);
        QCOMPARE(first.fair, !deviceReport().cudaAvailable);
        // The ready line names the lanes Start would race, and follows the setup.
        QVERIFY2(
            w.statusBar()->currentMessage().contains(QString::fromStdString(w.setupPanel()->plan().lanes[0].spec.name)),
            qPrintable(w.statusBar()->currentMessage()));
        // The speedup box lists the same lanes before the first race, and follows the setup.
        auto* baseline = w.dashboard()->findChild<QComboBox*>(QStringLiteral("baseline"));
        QVERIFY(baseline);
        QCOMPARE(baseline->count(), static_cast<int>(first.lanes.size()));
        QCOMPARE(baseline->itemText(0), QString::fromStdString(w.setupPanel()->plan().lanes[0].spec.name));
        table->setLanes({parseLaneSpec("cpu,threads=1,name=laptop"), parseLaneSpec("cpu,threads=1,name=desktop")});
        QTRY_VERIFY(w.statusBar()->currentMessage().contains(QStringLiteral("laptop vs desktop")));
        QCOMPARE(baseline->count(), 2);
        QCOMPARE(baseline->itemText(1), QStringLiteral("desktop"));
        baseline->setCurrentIndex(1);
        table->setLanes({parseLaneSpec("cpu,threads=2,name=server"), parseLaneSpec("cpu,threads=1,name=desktop"),
                         parseLaneSpec("cpu,threads=1,name=laptop")});
        QTRY_COMPARE(baseline->count(), 3);
        QCOMPARE(baseline->currentText(), QStringLiteral("desktop")); // kept by name, not by row
        table->setLanes(lanes);
        // Unusable devices are listed, greyed, with the reason.
        auto* device = qobject_cast<QComboBox*>(table->cellWidget(0, LanesTable::ColDevice));
        if (!deviceReport().cudaAvailable) {
            const int cuda = device->findData(QStringLiteral("cuda"));
            QVERIFY(cuda >= 0);
            QVERIFY(device->itemText(cuda).contains(QStringLiteral("unavailable")));
        }
    }

    void addRemoveDuplicateLanes() {
        MainWindow w;
        auto* table = w.setupPanel()->lanesTable();
        auto* add = w.setupPanel()->findChild<QPushButton*>(QStringLiteral("addLane"));
        auto* dup = w.setupPanel()->findChild<QPushButton*>(QStringLiteral("duplicateLane"));
        auto* remove = w.setupPanel()->findChild<QPushButton*>(QStringLiteral("removeLane"));
        QSignalSpy changed(table, &LanesTable::lanesChanged);
        add->click();
        QCOMPARE(table->rowCount(), 3);
        table->selectRow(2);
        qobject_cast<QSpinBox*>(table->cellWidget(2, LanesTable::ColBatch))->setValue(64);
        dup->click();
        QCOMPARE(table->rowCount(), 4);
        QCOMPARE(table->lanes()[3].batch.value_or(0), 64);
        // Each lane gets its own colour.
        auto colors = table->colors();
        QVERIFY(colors[2] != colors[3]);
        table->selectRow(0);
        remove->click();
        QCOMPARE(table->rowCount(), 3);
        QVERIFY(changed.count() >= 3);
        // A bad learning rate is a clear error, not a crash or a silent default.
        qobject_cast<QLineEdit*>(table->cellWidget(0, LanesTable::ColLr))->setText(QStringLiteral("-1"));
        QVERIFY(!w.startRace());
        QVERIFY(w.lastError().contains(QStringLiteral("lr=-1")));
    }

    // A framework= lane whose framework the lane programs' Python lacks is greyed with the
    // command that installs it, and Start refuses it as the CLI does (here: Debian's python3,
    // which has neither keras nor torch).
    void missingFrameworkLaneIsGreyedAndRefused() {
        if (::access("/usr/bin/python3", X_OK) != 0) {
            QSKIP("no /usr/bin/python3 to play a Python without the frameworks");
        }
        qputenv("DEVICERACE_PYTHON", "/usr/bin/python3");
        forgetFrameworkAnswers();
        {
            MainWindow w;
            auto* table = w.setupPanel()->lanesTable();
            table->setLanes({parseLaneSpec("cpu,threads=1"), parseLaneSpec("cpu,threads=1,framework=keras-jax")});
            QCOMPARE(table->rowProblem(0), QString());
            // Asked off the GUI thread: "checking…" until this machine's Python answers.
            QTRY_VERIFY_WITH_TIMEOUT(!table->rowProblem(1).startsWith(QStringLiteral("checking")), 20000);
            const QString why = table->rowProblem(1);
            QVERIFY2(why.contains(QStringLiteral("keras")) &&
                         why.contains(QStringLiteral("scripts/setup --frameworks")),
                     qPrintable(why));
            auto* options = table->cellWidget(1, LanesTable::ColOptions);
            QVERIFY(options->property("unusable").toBool());
            QCOMPARE(options->toolTip(), why);
            for (int c = 0; c < LanesTable::ColCount; ++c) { // hovering anywhere on the row says why
                if (auto* cell = table->cellWidget(1, c)) {
                    QCOMPARE(cell->toolTip(), why);
                }
            }
            QVERIFY(options->palette().color(QPalette::Active, QPalette::Text) ==
                    table->palette().color(QPalette::Disabled, QPalette::Text));
            QVERIFY(!table->cellWidget(0, LanesTable::ColOptions)->property("unusable").toBool());
            QVERIFY(!w.startRace());
            QVERIFY2(w.lastError().contains(QStringLiteral("scripts/setup --frameworks")), qPrintable(w.lastError()));
            // Mending the options un-greys the row.
            auto* edit = qobject_cast<QLineEdit*>(options);
            edit->setText(QString());
            Q_EMIT edit->editingFinished();
            QVERIFY(!options->property("unusable").toBool());
        }
        qunsetenv("DEVICERACE_PYTHON");
        forgetFrameworkAnswers();
    }

    void shortRealRaceUpdatesChartsStripAndSummary() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(150));
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        // What a screenshot or an export at the finish sees: the device panel already says the
        // finished race's average CPU use, and no lane's live CPU line is left.
        QString liveAtFinish, lanesAtFinish = QStringLiteral("unset");
        connect(&w, &MainWindow::raceFinished, this, [&] {
            liveAtFinish = w.dashboard()->devicePanel()->liveText();
            lanesAtFinish = w.dashboard()->devicePanel()->laneCpuText();
        });
        QVERIFY(w.startRace());
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
        QVERIFY2(liveAtFinish.startsWith(QStringLiteral("CPU use of the last race: ")), qPrintable(liveAtFinish));
        QVERIFY2(lanesAtFinish.isEmpty(), qPrintable(lanesAtFinish));
        auto* dash = w.dashboard();
        QVERIFY(dash->throughputChart()->pointCount() > 0);
        QVERIFY(dash->lossChart()->pointCount() > 0);
        QVERIFY(dash->accuracyChart()->pointCount() >= 2); // one final evaluation per lane
        const auto& rows = dash->strip()->rows();
        QCOMPARE(rows.size(), std::size_t(2));
        QVERIFY(rows[0].status.startsWith(QStringLiteral("done")));
        QCOMPARE(rows[0].speedup, QStringLiteral("baseline"));
        QVERIFY(rows[1].speedup.contains(QStringLiteral("× ")) && rows[1].speedup.endsWith(QStringLiteral("cpu·1")));
        auto* table = dash->summaryTable();
        QCOMPARE(table->rowCount(), 2);
        QCOMPARE(table->item(1, 0)->text(), QStringLiteral("twin"));
        QCOMPARE(table->item(0, 8)->text(), QStringLiteral("finished"));
        QVERIFY(table->item(0, 2)->text() != QStringLiteral("–")); // samples/s measured
        // Same lane colour in the strip as in the setup.
        QCOMPARE(rows[1].color, w.setupPanel()->laneColors()[1]);
    }

    // The baseline chosen before Start is the race's baseline (the box once stayed empty before the
    // first race).
    void baselineChosenBeforeTheRaceStays() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(30));
        auto* baseline = w.dashboard()->findChild<QComboBox*>(QStringLiteral("baseline"));
        QTRY_COMPARE(baseline->count(), 2);
        QCOMPARE(baseline->itemText(1), QStringLiteral("twin"));
        baseline->setCurrentIndex(1);
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
        QCOMPARE(baseline->currentText(), QStringLiteral("twin"));
        const auto& rows = w.dashboard()->strip()->rows();
        QCOMPARE(rows.size(), std::size_t(2));
        QCOMPARE(rows[1].speedup, QStringLiteral("baseline"));
        QVERIFY2(rows[0].speedup.endsWith(QStringLiteral("twin")), qPrintable(rows[0].speedup));
    }

    // Is the gap real? Repeats run the race again with fresh lanes and end with each speedup's
    // median and spread; Stop ends the repeats too.
    void repeatsEndWithTheSpeedupsSpread() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(60));
        w.setupPanel()->setRepeats(3);
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        QTRY_VERIFY_WITH_TIMEOUT(w.dashboard()->repeatNote() == QStringLiteral("repeat 2 of 3"), 120000);
        QCOMPARE(finished.count(), 0); // one finish, after the last repeat
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 240000);
        const QString verdict = w.repeatSummaryText();
        QVERIFY2(verdict.startsWith(QStringLiteral("3 repeats: twin ")) && verdict.contains(QStringLiteral("(N = 3)")),
                 qPrintable(verdict));
        QCOMPARE(w.dashboard()->repeatNote(), verdict);
        // Each lane's curves across the three repeats: a band on every chart.
        QCOMPARE(w.race()->keptRepeats(), 3);
        w.dashboard()->refreshCharts();
        for (std::size_t lane = 0; lane < 2; ++lane) {
            QVERIFY(!w.dashboard()->throughputChart()->bands(lane).empty());
            QVERIFY(!w.dashboard()->lossChart()->bands(lane).empty());
        }
        // Stop during the first repeat: no second one starts.
        QSignalSpy again(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        // (Stopped once its lanes run: a stop during the set-up drops the race as a failed start.)
        QTRY_VERIFY_WITH_TIMEOUT(w.dashboard()->repeatNote() == QStringLiteral("repeat 1 of 3") &&
                                     !w.dashboard()->strip()->rows().empty() &&
                                     !w.dashboard()->strip()->rows()[0].status.startsWith(QStringLiteral("done")),
                                 60000);
        w.stopRace();
        QTRY_VERIFY_WITH_TIMEOUT(again.count() == 1, 60000);
        QTest::qWait(300);
        QCOMPARE(w.race()->keptRepeats(), 0); // a new race forgot the last one's repeats
        QVERIFY2(w.dashboard()->repeatNote().startsWith(QStringLiteral("stopped in repeat 1 of 3")),
                 qPrintable(w.dashboard()->repeatNote()));
    }

    void shortRaceDrawsAccuracyAlongTheWay() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(100));
        // The default: about ten evaluations per race, worked out from the lanes' steps.
        QVERIFY(w.setupPanel()->autoEvaluations());
        QCOMPARE(w.setupPanel()->plan().evalEverySteps, std::int64_t(10));
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        // Set up off the GUI thread: the lanes appear when it is built.
        QTRY_COMPARE_WITH_TIMEOUT(w.race()->histories().size(), std::size_t(2), 60000);
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
        for (const auto& h : w.race()->histories()) {
            QVERIFY2(h.evalAccuracy.size() >= 9, qPrintable(QString::number(h.evalAccuracy.size())));
        }
        QVERIFY(w.dashboard()->accuracyChart()->pointCount() >= 18);
        // Explicit choices reach the race spec.
        auto* mode = w.setupPanel()->findChild<QComboBox*>(QStringLiteral("evalMode"));
        auto* steps = w.setupPanel()->findChild<QSpinBox*>(QStringLiteral("evalSteps"));
        mode->setCurrentIndex(1);
        steps->setValue(25);
        QCOMPARE(w.setupPanel()->raceSpec().evalEverySteps, std::int64_t(25));
        QVERIFY(!w.setupPanel()->autoEvaluations());
        mode->setCurrentIndex(2); // at epoch ends only
        QCOMPARE(w.setupPanel()->raceSpec().evalEverySteps, std::int64_t(0));
        QVERIFY(!w.setupPanel()->autoEvaluations());
    }

    void exportsAreWrittenAndReadable() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(40));
        QSignalSpy finished(&w, &MainWindow::raceFinished);
        QVERIFY(w.startRace());
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
        QTemporaryDir dir(QDir::tempPath() + QStringLiteral("/dr export ünïcode XXXXXX"));
        QVERIFY(dir.isValid());
        const QString png = dir.filePath(QStringLiteral("dash.png"));
        QCOMPARE(w.exportDashboardPng(png, QSize(1600, 1000)), QString());
        QImage image(png);
        QCOMPARE(image.size(), QSize(1600, 1000));
        const QString svg = dir.filePath(QStringLiteral("dash.svg"));
        QCOMPARE(w.exportDashboardSvg(svg), QString());
        QVERIFY(QSvgRenderer(svg).isValid());
        const QString csv = dir.filePath(QStringLiteral("data.csv"));
        QCOMPARE(w.exportCsv(csv), QString());
        QFile csvFile(csv);
        QVERIFY(csvFile.open(QIODevice::ReadOnly));
        const auto lines = csvFile.readAll().split('\n');
        QVERIFY(lines[0].startsWith("lane,kind,step"));
        QVERIFY(lines.size() > 4);
        const QString json = dir.filePath(QStringLiteral("summary.json"));
        QCOMPARE(w.exportJson(json), QString());
        QFile jsonFile(json);
        QVERIFY(jsonFile.open(QIODevice::ReadOnly));
        const auto doc = QJsonDocument::fromJson(jsonFile.readAll());
        QCOMPARE(doc.object().value(QStringLiteral("workload")).toString(), QStringLiteral("fashion-mlp"));
        // Writing into a missing folder is a clear error naming the path.
        const QString bad = dir.filePath(QStringLiteral("missing/x.png"));
        QVERIFY(w.exportDashboardPng(bad).contains(QStringLiteral("missing/x.png")));
        // An existing file is replaced, not appended to.
        QCOMPARE(w.exportCsv(csv), QString());
        QFile again(csv);
        QVERIFY(again.open(QIODevice::ReadOnly));
        QCOMPARE(again.readAll().split('\n').size(), lines.size());
    }

    void presentationModeToggles() {
        MainWindow w;
        w.show();
        QVERIFY(w.setupPanel()->isVisible());
        w.setPresentation(true);
        QVERIFY(w.presentation());
        QVERIFY(!w.setupPanel()->isVisible());
        QVERIFY(!w.dashboard()->summaryTable()->isVisible());
        QVERIFY(w.dashboard()->strip()->isVisible());
        QVERIFY(w.dashboard()->throughputChart()->isVisible());
        QCOMPARE(w.dashboard()->throughputChart()->chart()->theme(), QChart::ChartThemeDark);
        w.setPresentation(false);
        QVERIFY(w.setupPanel()->isVisible());
        QVERIFY(w.dashboard()->summaryTable()->isVisible());
        QCOMPARE(w.dashboard()->throughputChart()->chart()->theme(), QChart::ChartThemeLight);
    }

    void presentationKeysThemesAndContrast() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(1000000));
        w.setPresentation(true);
        QVERIFY(QTest::qWaitForWindowActive(&w));
        QVERIFY(!w.findChild<QToolBar*>()->isVisible()); // no toolbar (its glyphs need emoji fonts)
        QVERIFY(w.dashboard()->titleLabel()->text().contains(QStringLiteral("press Space")));
        // Space starts, then pauses and resumes.
        QTest::keyClick(&w, Qt::Key_Space);
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->running(), 60000); // set up off the GUI thread
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories()[0].lastStep > 3, 60000);
        QTest::keyClick(&w, Qt::Key_Space);
        QVERIFY(w.race()->paused());
        QTest::keyClick(&w, Qt::Key_Space);
        QVERIFY(!w.race()->paused());
        // T: a light theme for bright rooms, and back.
        QCOMPARE(w.dashboard()->throughputChart()->chart()->theme(), QChart::ChartThemeDark);
        QTest::keyClick(&w, Qt::Key_T);
        QCOMPARE(w.dashboard()->throughputChart()->chart()->theme(), QChart::ChartThemeLight);
        // Lane names reach 4.5:1 on either background.
        for (bool dark : {false, true}) {
            w.setPresentationDark(dark);
            w.dashboard()->refresh();
            const QColor bg = w.dashboard()->strip()->palette().color(QPalette::Window);
            const auto texts = w.dashboard()->strip()->texts();
            QVERIFY(!texts.empty());
            for (const auto& t : texts) {
                QVERIFY2(
                    contrastRatio(t.color, bg) >= 4.5,
                    qPrintable(
                        QStringLiteral("%1 on %2: %3").arg(t.color.name(), bg.name()).arg(contrastRatio(t.color, bg))));
            }
        }
        for (int i = 0; i < 8; ++i) {
            for (const QColor bg : {QColor(30, 30, 34), QColor(239, 239, 239), QColor(255, 255, 255)}) {
                QVERIFY(contrastRatio(readableOn(laneColor(i), bg), bg) >= 4.5);
            }
        }
        QVERIFY(contrastRatio(laneColor(1), QColor(30, 30, 34)) < 4.5);          // the review's 3.2:1 blue...
        QCOMPARE(readableOn(laneColor(1), QColor(255, 255, 255)), laneColor(1)); // ...kept where it reads
        w.stopRace();
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->finished(), 20000);
        w.setPresentation(false);
    }

    void darkThemeShowsStateAndHints() {
        const QPalette p = darkPalette();
        // Disabled controls look disabled; alternate rows stay dark under light text; hints visible.
        QVERIFY(contrastRatio(p.color(QPalette::Disabled, QPalette::Text), p.color(QPalette::Base)) <
                contrastRatio(p.color(QPalette::Active, QPalette::Text), p.color(QPalette::Base)) / 2);
        QVERIFY(p.color(QPalette::AlternateBase).lightness() < 80);
        QVERIFY(contrastRatio(p.color(QPalette::Text), p.color(QPalette::AlternateBase)) >= 7);
        QVERIFY(contrastRatio(p.color(QPalette::PlaceholderText), p.color(QPalette::Base)) >= 4.5);
        MainWindow w;
        w.show();
        w.setDarkTheme(true);
        auto* name = qobject_cast<QLineEdit*>(w.setupPanel()->lanesTable()->cellWidget(0, LanesTable::ColName));
        QCOMPARE(name->palette().color(QPalette::PlaceholderText), p.color(QPalette::PlaceholderText));
        w.setupPanel()->setEditable(false);
        QVERIFY(!name->isEnabled());
        QCOMPARE(name->palette().color(QPalette::Disabled, QPalette::Text),
                 p.color(QPalette::Disabled, QPalette::Text));
        // The setup's notes (the workload's description, a preset's notes) read at 4.5:1 in
        // both themes, whichever came first (grey read 3.4:1 on the light panel, amber 3.2:1 on
        // the dark one).
        w.setupPanel()->setEditable(true);
        for (const bool dark : {false, true, false}) {
            w.setDarkTheme(dark);
            const QColor bg = w.setupPanel()->palette().color(QPalette::Window);
            for (const char* note : {"workloadInfo", "presetNotes"}) {
                auto* label = w.setupPanel()->findChild<QLabel*>(QString::fromLatin1(note));
                QVERIFY2(label, note);
                if (label->text().isEmpty()) {
                    label->setText(QStringLiteral("GPU lane left out: no CUDA device here"));
                }
                label->resize(label->sizeHint());
                const QColor fg = drawnText(*label, bg).text;
                QVERIFY2(
                    contrastRatio(fg, bg) >= 4.5,
                    qPrintable(QStringLiteral("%1, %2 theme: %3 on %4, %5:1")
                                   .arg(QString::fromLatin1(note),
                                        dark ? QStringLiteral("dark") : QStringLiteral("light"), fg.name(), bg.name())
                                   .arg(contrastRatio(fg, bg), 0, 'f', 1)));
            }
        }
    }

    void closesWithinASecondWhenIdle() {
        for (bool raced : {false, true}) {
            auto* w = new MainWindow();
            w->show();
            if (raced) {
                w->setupPanel()->setRaceSpec(shortRace(30));
                QSignalSpy finished(w, &MainWindow::raceFinished);
                QVERIFY(w->startRace());
                QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 60000);
            }
            QTest::qWait(600); // idle: the device panel's timer has ticked
            QElapsedTimer clock;
            clock.start();
            QVERIFY(w->close());
            delete w;
            QVERIFY2(clock.elapsed() < 1000, qPrintable(QString::number(clock.elapsed())));
            qInfo("closed in %lld ms (%s)", static_cast<long long>(clock.elapsed()), raced ? "after a race" : "fresh");
        }
    }

    void closeWhileRunningStopsLanesAndCloses() {
        auto* w = new MainWindow();
        w->show();
        auto spec = shortRace(1000000);
        spec.lanes.push_back(spec.lanes[0]);
        spec.lanes.push_back(spec.lanes[0]);
        spec.lanes[2].name = "three";
        spec.lanes[3].name = "four";
        w->setupPanel()->setRaceSpec(spec);
        QVERIFY(w->startRace());
        QTRY_VERIFY_WITH_TIMEOUT(!w->race()->histories().empty() && w->race()->histories()[0].lastStep > 5, 60000);
        QElapsedTimer clock;
        clock.start();
        w->close();
        QVERIFY(w->isVisible()); // waits for the lanes, showing "Stopping…"
        QTRY_VERIFY_WITH_TIMEOUT(!w->isVisible(), 10000);
        QVERIFY(w->race()->finished());
        for (const auto& h : w->race()->histories()) {
            QVERIFY(h.state == LaneState::Stopped);
        }
        delete w;
    }

    void perLaneControlsPauseAndStopOneLane() {
        MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(shortRace(1000000));
        QVERIFY(w.startRace());
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories().size() == 2 && w.race()->histories()[1].lastStep > 3, 60000);
        auto actions = w.laneActions(1);
        QCOMPARE(actions.size(), 2);
        QVERIFY(actions[0]->text().startsWith(QStringLiteral("Pause twin")));
        actions[0]->trigger();
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories()[1].state == LaneState::Paused, 20000);
        qDeleteAll(actions);
        actions = w.laneActions(1);
        QVERIFY(actions[0]->text().startsWith(QStringLiteral("Resume twin")));
        actions[1]->trigger(); // stop the paused lane
        qDeleteAll(actions);
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories()[1].state == LaneState::Stopped, 20000);
        const auto before = w.race()->histories()[0].lastStep;
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories()[0].lastStep > before, 20000); // the other races on
        QVERIFY(w.race()->histories()[0].state == LaneState::Running ||
                w.race()->histories()[0].state == LaneState::Evaluating);
        w.stopRace();
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->finished(), 20000);
    }

    // The dialogs the window opens (Hosts, a message box, a file picker) and its tooltips take
    // the window's theme: a top-level window does not inherit its parent's palette, so on the
    // dark theme they opened light. Closing the window gives the application its light palette back.
    void dialogsAndTooltipsFollowTheWindowsTheme() {
        const QColor darkWindow = darkPalette().color(QPalette::Window);
        const QColor lightWindow = QApplication::palette().color(QPalette::Window);
        QVERIFY(lightWindow != darkWindow);
        const auto drawnBackground = [](QWidget& dialog) {
            dialog.resize(dialog.sizeHint());
            return dialog.grab().toImage().pixelColor(2, 2);
        };
        {
            MainWindow w;
            w.show();
            for (const bool dark : {true, false, true}) {
                w.setDarkTheme(dark);
                const QColor want = dark ? darkWindow : lightWindow;
                HostsDialog hosts(&w);
                QMessageBox box(QMessageBox::Warning, QStringLiteral("DeviceRace"), QStringLiteral("a message"),
                                QMessageBox::Ok, &w);
                QFileDialog files(&w);
                files.setOption(QFileDialog::DontUseNativeDialog);
                for (QWidget* dialog : std::initializer_list<QWidget*>{&hosts, &box, &files}) {
                    const QString what = QString::fromLatin1(dialog->metaObject()->className()) +
                                         (dark ? QStringLiteral(", dark") : QStringLiteral(", light"));
                    QVERIFY2(dialog->palette().color(QPalette::Window) == want, qPrintable(what));
                    QVERIFY2(drawnBackground(*dialog) == want,
                             qPrintable(what + QStringLiteral(": drew ") + drawnBackground(*dialog).name()));
                    const QColor text = dialog->palette().color(QPalette::WindowText);
                    QVERIFY2(contrastRatio(text, want) >= 4.5, qPrintable(what));
                    // DEVICERACE_LAYOUT_SHOTS=DIR keeps a picture of each dialog to look at.
                    if (const QString shots = qEnvironmentVariable("DEVICERACE_LAYOUT_SHOTS"); !shots.isEmpty()) {
                        const QString name = QString::fromLatin1(dialog->metaObject()->className());
                        dialog->grab().save(shots + QLatin1Char('/') + name.section(QStringLiteral("::"), -1) +
                                            (dark ? QStringLiteral("-dark.png") : QStringLiteral("-light.png")));
                    }
                }
                QCOMPARE(QToolTip::palette().color(QPalette::ToolTipBase),
                         dark ? darkPalette().color(QPalette::ToolTipBase)
                              : lightPalette().color(QPalette::ToolTipBase));
            }
            // Presentation mode has its own theme (dark by default): the dialogs follow it too.
            w.setDarkTheme(false);
            w.setPresentation(true);
            QCOMPARE(HostsDialog(&w).palette().color(QPalette::Window), darkWindow);
            w.setPresentation(false);
            QCOMPARE(HostsDialog(&w).palette().color(QPalette::Window), lightWindow);
            w.setDarkTheme(true);
        }
        QCOMPARE(QApplication::palette().color(QPalette::Window), lightWindow);
    }

    void themeAndLastRacePersist() {
        {
            MainWindow w;
            w.setDarkTheme(true);
            auto spec = shortRace(77);
            spec.seed = 5;
            w.setupPanel()->setRaceSpec(spec);
            w.setupPanel()->setEvalSetting(2, 250); // at epoch ends (N kept for the next switch)
            w.saveSettings();
        }
        MainWindow again;
        QVERIFY(again.restoreSettings());
        QVERIFY(again.darkTheme());
        QCOMPARE(again.setupPanel()->evalSetting(), std::make_pair(2, 250));
        const auto spec = again.setupPanel()->raceSpec();
        QCOMPARE(spec.steps.value_or(0), std::int64_t(77));
        QCOMPARE(spec.seed, std::uint64_t(5));
        QCOMPARE(spec.lanes.size(), std::size_t(2));
        QCOMPARE(QString::fromStdString(spec.lanes[1].name), QStringLiteral("twin"));
        again.setDarkTheme(false);
        again.setupPanel()->setEvalSetting(0, 100);
        again.saveSettings();
    }

    // A window opened with a race on its command line restores the user's theme but not the
    // saved race; a window that does not save settings (a --screenshot run) leaves them as they were.
    void windowSettingsRestoreAloneAndAScreenshotSavesNothing() {
        {
            MainWindow w;
            w.setDarkTheme(true);
            w.setupPanel()->setRaceSpec(shortRace(77));
            w.saveSettings();
        }
        {
            MainWindow w;
            w.setupPanel()->setRaceSpec(shortRace(33));
            w.restoreWindowSettings();
            QVERIFY(w.darkTheme());
            QCOMPARE(w.setupPanel()->raceSpec().steps.value_or(0), std::int64_t(33));
            w.setSavesSettings(false);
            w.setDarkTheme(false);
            w.saveSettings();
        }
        QSettings s;
        QVERIFY(s.value(QStringLiteral("window/dark")).toBool());
        QCOMPARE(s.value(QStringLiteral("race/steps")).toLongLong(), 77);
        MainWindow again;
        again.setDarkTheme(false);
        again.saveSettings();
    }

    // Space starts and pauses in normal mode from anywhere but a text field: from the focused
    // preset list (which used to open instead) and after a click on a chart (which did nothing).
    void spaceStartsAndPausesFromAnywhereButATextField() {
        MainWindow w;
        w.show();
        QVERIFY(QTest::qWaitForWindowActive(&w));
        w.setupPanel()->setRaceSpec(shortRace(1000000));
        // Typing a lane's name: Space is a space.
        auto* name = qobject_cast<QLineEdit*>(w.setupPanel()->lanesTable()->cellWidget(0, LanesTable::ColName));
        QVERIFY(name);
        name->setFocus();
        QTest::keyClick(name, Qt::Key_Space);
        QVERIFY(!w.race()->isSettingUp() && !w.race()->running());
        name->clear();
        // The preset list has focus: Space starts the race, the list stays closed.
        auto* preset = w.setupPanel()->findChild<QComboBox*>(QStringLiteral("preset"));
        preset->setFocus();
        QTest::keyClick(preset, Qt::Key_Space);
        QVERIFY(!preset->view()->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->running(), 60000);
        QTRY_VERIFY_WITH_TIMEOUT(w.race()->histories()[0].lastStep > 3, 60000);
        // A click on a chart, then Space: paused; again: running.
        auto* chart = w.dashboard()->charts().first()->view();
        QTest::mouseClick(chart->viewport(), Qt::LeftButton, {}, chart->viewport()->rect().center());
        QTest::keyClick(QApplication::focusWidget() ? QApplication::focusWidget() : static_cast<QWidget*>(&w),
                        Qt::Key_Space);
        QVERIFY(w.race()->paused());
        QTest::keyClick(&w, Qt::Key_Space);
        QVERIFY(!w.race()->paused());
        w.stopRace();
        QTRY_VERIFY_WITH_TIMEOUT(!w.race()->running(), 30000);
    }

    // Export dialogs open in the last export's folder, else Documents or home: never in the
    // working directory (a source checkout when started from a terminal there).
    void exportDialogsOpenWhereTheUserKeepsFiles() {
        QSettings().remove(QStringLiteral("export/lastFolder"));
        const QString first = exportStartPath(QStringLiteral("devicerace.csv"));
        QVERIFY2(!first.startsWith(QDir::currentPath() + QLatin1Char('/')) || QDir::currentPath() == QDir::homePath(),
                 qPrintable(first));
        QVERIFY(first.endsWith(QStringLiteral("/devicerace.csv")));
        QTemporaryDir dir;
        rememberExportPath(dir.filePath(QStringLiteral("mine.json")));
        QCOMPARE(exportStartPath(QStringLiteral("devicerace.csv")), dir.filePath(QStringLiteral("devicerace.csv")));
        rememberExportPath(dir.path()); // a folder (TensorBoard export) is remembered as itself
        QCOMPARE(exportStartPath(), dir.path());
        QSettings().remove(QStringLiteral("export/lastFolder"));
    }

    void presetsLoadIntoTheSetup() {
        MainWindow w;
        QString error;
        QVERIFY2(w.setupPanel()->loadPreset(QStringLiteral("fused-vs-cells-lstm"), 0, &error), qPrintable(error));
        auto spec = w.setupPanel()->raceSpec();
        QCOMPARE(QString::fromStdString(spec.workload), QStringLiteral("imdb-bilstm"));
        QVERIFY(spec.fair);
        QCOMPARE(spec.lanes.size(), std::size_t(2));
        QCOMPARE(QString::fromStdString(spec.lanes[1].lstm.value_or("")), QStringLiteral("cells"));
        QCOMPARE(QString::fromStdString(spec.lanes[1].name), QStringLiteral("cells"));
        // A multi-race preset offers its races.
        QVERIFY(w.setupPanel()->loadPreset(QStringLiteral("keras-suite"), 5, &error));
        QCOMPARE(QString::fromStdString(w.setupPanel()->raceSpec().workload), QStringLiteral("charlstm"));
        QVERIFY(!w.setupPanel()->loadPreset(QStringLiteral("no-such-preset"), 0, &error));
        QVERIFY(error.contains(QStringLiteral("unknown preset")));
        // Data-parallel lanes keep their workers through the lanes table (1, 2, ... up to the cores).
        QVERIFY2(w.setupPanel()->loadPreset(QStringLiteral("scaling-efficiency"), 0, &error), qPrintable(error));
        const auto scaling = w.setupPanel()->raceSpec();
        QVERIFY(scaling.fair);
        QVERIFY(scaling.lanes.size() >= 2);
        QCOMPARE(scaling.lanes[0].workers.value_or(0), 1);
        QCOMPARE(scaling.lanes[1].workers.value_or(0), 2);
        QCOMPARE(toString(laneKind(scaling.lanes[1])), std::string("parallel"));
        // Without a GPU, gpt-cpu-vs-gpu races the CPU against its shipped H100 recording: the
        // recorded lane joins the charts once, however often the preset is chosen.
        QVERIFY2(w.setupPanel()->loadPreset(QStringLiteral("gpt-cpu-vs-gpu"), 0, &error), qPrintable(error));
        if (!deviceReport().cudaAvailable) {
            QCOMPARE(w.race()->recordingCount(), 1);
            QVERIFY(w.race()->recordingDirs().first().endsWith(QStringLiteral("recordings/char-gpt-h100")));
            QVERIFY(w.setupPanel()->loadPreset(QStringLiteral("gpt-cpu-vs-gpu"), 0, &error));
            QCOMPARE(w.race()->recordingCount(), 1);
            QCOMPARE(w.setupPanel()->raceSpec().lanes.size(), std::size_t(1)); // the live CPU lane
        } else {
            QCOMPARE(w.race()->recordingCount(), 0);
        }
    }

    void aRecordedRaceReplaysToTheSameSummary() {
        QTemporaryDir runs;
        QString recordDir;
        std::optional<RaceSummary> live;
        {
            MainWindow w;
            w.setRecording(true, runs.path());
            w.show();
            w.setupPanel()->setRaceSpec(shortRace(60));
            QSignalSpy finished(&w, &MainWindow::raceFinished);
            QVERIFY(w.startRace());
            QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 120000);
            recordDir = w.race()->recordDir();
            live = w.race()->summary();
        }
        QVERIFY(QFile::exists(recordDir + QStringLiteral("/manifest.json")));
        MainWindow replay;
        replay.setReplaySpeed(0); // instantly
        replay.show();
        QSignalSpy finished(&replay, &MainWindow::raceFinished);
        QVERIFY(replay.openRecording(recordDir));
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 20000);
        const auto replayed = replay.race()->summary();
        QVERIFY(replayed.has_value());
        QCOMPARE(replayed->lanes.size(), live->lanes.size());
        for (std::size_t i = 0; i < live->lanes.size(); ++i) {
            QCOMPARE(replayed->lanes[i].steps, live->lanes[i].steps);
            QCOMPARE(*replayed->lanes[i].finalTestAccuracy, *live->lanes[i].finalTestAccuracy);
            QCOMPARE(*replayed->lanes[i].samplesPerSec, *live->lanes[i].samplesPerSec);
            QVERIFY(replay.race()->lanes()[i].recorded);
            QVERIFY(replay.race()->lanes()[i].device.contains(QStringLiteral("recorded")));
        }
        QVERIFY(replay.dashboard()->throughputChart()->pointCount() > 0);
        // TensorBoard files from the recording, readable with every CRC checked.
        QTemporaryDir tb;
        QCOMPARE(replay.exportTensorBoard(tb.path()), QString());
        int files = 0;
        QDirIterator it(tb.path(), {QStringLiteral("events.out.tfevents.*")}, QDir::Files,
                        QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const auto events = readTfEventFile(it.next().toStdString());
            QCOMPARE(QString::fromStdString(events.fileVersion), QStringLiteral("brain.Event:2"));
            QVERIFY(!events.scalars.empty());
            ++files;
        }
        QCOMPARE(files, 2); // one run per lane
        // Not a recording: a clear message, nothing added.
        QVERIFY(!replay.openRecording(runs.path()));
        QVERIFY(replay.lastError().contains(QStringLiteral("manifest.json")));
    }

    void chartClicksOnEmptyAreasDoNotCrash() {
        MainWindow w;
        w.show();
        auto* view = reinterpret_cast<QWidget*>(w.dashboard()->throughputChart()->view());
        QTest::mouseClick(view, Qt::LeftButton, {}, QPoint(2, 2));
        QTest::mouseClick(view, Qt::RightButton, {}, QPoint(view->width() / 2, view->height() / 2));
        QVERIFY(!w.dashboard()->throughputChart()->zoomed());
    }
};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
