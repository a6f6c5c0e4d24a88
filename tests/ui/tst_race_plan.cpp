// The window and the CLI resolve a race the same way (one resolveRace in the engine): for a
// table of lane sets, what the window would run (its setup panel's plan: names, threads, steps,
// evaluation interval, sharing note, problems) equals `devicerace-cli race --plan` for the same
// lanes; the rows are greyed with the plan's problems; and a slow framework check (5 s) runs off
// the GUI thread while the window keeps serving events.
#include <QtTest>

#include <QCheckBox>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include "devicerace/device_info.h"
#include "devicerace/exports.h"
#include "devicerace/frameworks.h"
#include "devicerace/race_plan.h"
#include "lanes_table.h"
#include "main_window.h"
#include "race_controller.h"
#include "setup_panel.h"

using namespace devicerace;
using namespace devicerace::ui;

namespace {

QJsonObject cliPlan(const QStringList& args) {
    QProcess cli;
    cli.start(QStringLiteral(DEVICERACE_CLI_PATH),
              QStringList{QStringLiteral("race"), QStringLiteral("--plan")} + args);
    if (!cli.waitForFinished(60000)) {
        qWarning("devicerace-cli --plan did not finish");
        return {};
    }
    return QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
}

QStringList lanes(std::initializer_list<const char*> items) {
    QStringList out;
    for (const char* item : items) {
        out << QString::fromLatin1(item);
    }
    return out;
}

QString compact(const QJsonValue& v) {
    return QString::fromUtf8(QJsonDocument(QJsonObject{{QStringLiteral("v"), v}}).toJson(QJsonDocument::Compact));
}

QJsonObject windowPlan(SetupPanel* panel) {
    return QJsonDocument::fromJson(QByteArray::fromStdString(planToJson(panel->plan()))).object();
}

} // namespace

class TestRacePlan : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void windowAndCliResolveTheSameRace_data() {
        QTest::addColumn<QStringList>("laneTexts");
        QTest::addColumn<bool>("fair");
        QTest::addColumn<int>("steps");
        // Lanes that name no thread count share the cores in a live race (the case the window
        // and the CLI used to count differently), and not in fair mode.
        QTest::newRow("three plain cpu, live") << lanes({"cpu", "cpu", "cpu"}) << false << 200;
        QTest::newRow("three plain cpu, fair") << lanes({"cpu", "cpu", "cpu"}) << true << 200;
        QTest::newRow("1 vs all threads, live") << lanes({"cpu,threads=1", "cpu"}) << false << 300;
        QTest::newRow("oversubscribed") << lanes({"cpu,threads=8", "cpu,threads=8"}) << false << 50;
        QTest::newRow("batch and names") << lanes({"cpu,threads=1,batch=64,name=a", "cpu,batch=32,name=b"}) << true
                                         << 120;
        QTest::newRow("process lane") << lanes({"cpu,threads=1", "cpu,threads=1,isolate=process"}) << false << 100;
        QTest::newRow("data-parallel cpu") << lanes({"cpu,workers=2", "cpu,threads=1"}) << false << 100;
        // Problems: the same words, the same rows.
        QTest::newRow("fp16 on a cpu") << lanes({"cpu,threads=1", "cpu,precision=fp16"}) << true << 100;
        QTest::newRow("a fault that needs a process") << lanes({"cpu,fault=abort:3"}) << true << 100;
        QTest::newRow("no such gpu") << lanes({"cpu,threads=1", "cuda:7"}) << true << 100;
        QTest::newRow("batch above the data") << lanes({"cpu,batch=100000"}) << true << 100;
    }

    void windowAndCliResolveTheSameRace() {
        QFETCH(QStringList, laneTexts);
        QFETCH(bool, fair);
        QFETCH(int, steps);
        QStringList args{QStringLiteral("--steps"), QString::number(steps), QStringLiteral("--eval-every"),
                         QStringLiteral("auto")};
        if (fair) {
            args << QStringLiteral("--fair");
        }
        RaceSpec spec;
        spec.steps = steps;
        spec.fair = fair;
        for (const auto& lane : laneTexts) {
            args << QStringLiteral("--lane") << lane;
            spec.lanes.push_back(parseLaneSpec(lane.toStdString()));
        }
        MainWindow w;
        auto* panel = w.setupPanel();
        panel->setRaceSpec(spec);
        const QJsonObject fromWindow = windowPlan(panel);
        const QJsonObject fromCli = cliPlan(args);
        QVERIFY2(!fromCli.isEmpty(), "no plan from the CLI");
        for (const char* key : {"eval_every_steps", "cpu_threads", "logical_cpus", "sharing_note", "problems", "fair",
                                "workload", "data_note"}) {
            QVERIFY2(fromWindow.value(QLatin1String(key)) == fromCli.value(QLatin1String(key)),
                     qPrintable(QStringLiteral("%1: window %2, cli %3")
                                    .arg(QLatin1String(key), compact(fromWindow.value(QLatin1String(key))),
                                         compact(fromCli.value(QLatin1String(key))))));
        }
        const auto windowLanes = fromWindow.value(QStringLiteral("lanes")).toArray();
        const auto cliLanes = fromCli.value(QStringLiteral("lanes")).toArray();
        QCOMPARE(windowLanes.size(), cliLanes.size());
        auto* table = panel->lanesTable();
        for (int i = 0; i < windowLanes.size(); ++i) {
            const auto a = windowLanes[i].toObject();
            const auto b = cliLanes[i].toObject();
            for (const char* key :
                 {"name", "spec", "kind", "threads", "cpu_processes", "batch", "total_steps", "problem"}) {
                QVERIFY2(a.value(QLatin1String(key)) == b.value(QLatin1String(key)),
                         qPrintable(QStringLiteral("lane %1 %2").arg(i).arg(QLatin1String(key))));
            }
            // The row shows the plan's problem (greyed with it), or nothing.
            QCOMPARE(table->rowProblem(i), a.value(QStringLiteral("problem")).toString());
        }
        // The threads the window would run add up to the note's count; the note shows when they
        // outnumber the CPUs, whatever this machine has.
        int threads = 0;
        for (const auto& lane : windowLanes) {
            threads += lane.toObject().value(QStringLiteral("threads")).toInt() *
                       lane.toObject().value(QStringLiteral("cpu_processes")).toInt();
        }
        QCOMPARE(fromWindow.value(QStringLiteral("cpu_threads")).toInt(), threads);
        QCOMPARE(fromWindow.value(QStringLiteral("sharing_note")).toString().isEmpty(),
                 fair || threads <= fromWindow.value(QStringLiteral("logical_cpus")).toInt());
    }

    // A framework check that takes 5 s (a stand-in Python that sleeps, then finds every module)
    // runs off the GUI thread: the row says "checking…", timers keep firing, and the answer
    // un-greys the row.
    void aSlowFrameworkCheckNeverBlocksTheWindow() {
        QTemporaryDir dir;
        const QString python = dir.filePath(QStringLiteral("slow-python"));
        QFile f(python);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("#!/bin/sh\nsleep 5\nexit 0\n");
        f.close();
        QVERIFY(f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner));
        qputenv("DEVICERACE_PYTHON", python.toUtf8());
        forgetFrameworkAnswers();
        {
            MainWindow w;
            w.show();
            auto* table = w.setupPanel()->lanesTable();
            QElapsedTimer clock;
            clock.start();
            table->setLanes({parseLaneSpec("cpu,threads=1"), parseLaneSpec("cpu,threads=1,framework=keras-jax")});
            QVERIFY(clock.elapsed() < 2000); // setting the rows did not wait for Python
            QVERIFY2(table->rowProblem(1).startsWith(QStringLiteral("checking")), qPrintable(table->rowProblem(1)));
            // Serve events while the check runs: the longest gap between two 10 ms timer ticks.
            qint64 last = clock.elapsed(), longest = 0;
            int ticks = 0;
            QTimer tick;
            tick.setInterval(10);
            connect(&tick, &QTimer::timeout, this, [&] {
                longest = std::max(longest, clock.elapsed() - last);
                last = clock.elapsed();
                ++ticks;
            });
            tick.start();
            QTRY_VERIFY_WITH_TIMEOUT(table->rowProblem(1).isEmpty(), 30000);
            tick.stop();
            qInfo("framework check answered after %lld ms; %d ticks, longest gap between events %lld ms",
                  static_cast<long long>(clock.elapsed()), ticks, static_cast<long long>(longest));
            QVERIFY(clock.elapsed() >= 4000); // it was the slow check that answered
            // A blocked GUI thread would show one gap of ~5 s; a loaded test machine may add
            // some, never seconds.
            QVERIFY2(longest < 1000, qPrintable(QString::number(longest)));
            QVERIFY(!table->cellWidget(1, LanesTable::ColOptions)->property("unusable").toBool());
        }
        qunsetenv("DEVICERACE_PYTHON");
        forgetFrameworkAnswers();
    }

    // Start sets the race up off the GUI thread (a worker process starts and says hello: seconds),
    // with no nested event loop: input and timers are served all along; Stop during the set-up
    // drops the race once built, and no lane runs.
    void aRaceIsSetUpOffTheGuiThread() {
        RaceSpec spec;
        spec.steps = 20;
        spec.trainLimit = 2000;
        spec.testLimit = 200;
        spec.lanes = {parseLaneSpec("cpu,threads=1,isolate=process,name=worker")};
        for (const bool stopEarly : {false, true}) {
            MainWindow w;
            w.show();
            w.setupPanel()->setRaceSpec(spec);
            QSignalSpy started(w.race(), &RaceController::started);
            QSignalSpy failed(&w, &MainWindow::startFailed);
            QElapsedTimer clock;
            clock.start();
            QVERIFY(w.startRace());
            QVERIFY(clock.elapsed() < 2000); // Start returned before the worker said hello
            QVERIFY(w.race()->isSettingUp());
            QVERIFY(!w.startRace()); // one set-up at a time
            qint64 last = clock.elapsed(), longest = 0;
            QTimer tick;
            tick.setInterval(10);
            connect(&tick, &QTimer::timeout, this, [&] {
                longest = std::max(longest, clock.elapsed() - last);
                last = clock.elapsed();
            });
            tick.start();
            if (stopEarly) {
                w.stopRace();
                QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 60000);
                QVERIFY(w.lastError().contains(QStringLiteral("no lane ran")));
                QVERIFY(!w.race()->hasRace());
                QCOMPARE(started.count(), 0);
            } else {
                QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 60000);
                qInfo("set up in %lld ms; longest gap between events %lld ms", static_cast<long long>(clock.elapsed()),
                      static_cast<long long>(longest));
                QVERIFY2(longest < 1000, qPrintable(QString::number(longest)));
                QVERIFY(w.race()->hasRace());
                QCOMPARE(w.race()->lanes().size(), std::size_t(1));
                QTRY_VERIFY_WITH_TIMEOUT(w.race()->finished(), 120000);
            }
            tick.stop();
        }
    }
};

QTEST_MAIN(TestRacePlan)
#include "tst_race_plan.moc"
