// The window's command line: race options as the CLI takes them, and the same refusals.
#include <QtTest>

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QStandardPaths>

#include "devicerace/device_info.h"
#include "devicerace/workload.h"
#include "gui_options.h"
#include "lanes_table.h"
#include "main_window.h"
#include "race_controller.h"
#include "dashboard.h"
#include "charts/metric_chart.h"
#include "setup_panel.h"

using namespace devicerace;

namespace {
gui::GuiOptions parse(QStringList args) {
    args.prepend(QStringLiteral("devicerace"));
    return gui::parseGuiOptions(args);
}
} // namespace

class TestGuiOptions : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void raceOptionsParse() {
        const auto o = parse({QStringLiteral("--workload"), QStringLiteral("fashion-mlp"), QStringLiteral("--lane"),
                              QStringLiteral("cpu,threads=1"), QStringLiteral("--steps"), QStringLiteral("30")});
        QVERIFY2(o.error.isEmpty(), qPrintable(o.error));
        QVERIFY(o.race);
        QCOMPARE(o.race->lanes.size(), std::size_t(1));
        QCOMPARE(o.race->steps.value_or(0), std::int64_t(30));
    }

    // --steps alone keeps the first race as the window opens it (it used to turn fair mode off);
    // --live races the lanes at once; lanes given on the command line race live unless --fair.
    // --theme: the window's theme for both modes; anything but light or dark is refused by name.
    void themeIsLightOrDark() {
        QVERIFY(!parse({}).dark);
        QCOMPARE(parse({QStringLiteral("--theme"), QStringLiteral("dark")}).dark, std::optional<bool>(true));
        QCOMPARE(parse({QStringLiteral("--theme"), QStringLiteral("Light")}).dark, std::optional<bool>(false));
        const auto bad = parse({QStringLiteral("--theme"), QStringLiteral("blue")});
        QCOMPARE(bad.error, QStringLiteral("--theme blue: expected light or dark"));
    }

    void theFirstRaceKeepsItsModeWithLengthOptions() {
        const bool fair = defaultRace().fair;
        auto o = parse({QStringLiteral("--steps"), QStringLiteral("300")});
        QVERIFY2(o.error.isEmpty() && o.race, qPrintable(o.error));
        QCOMPARE(o.race->fair, fair);
        QVERIFY(o.race->lanes.empty()); // the setup shows the first race's lanes
        QCOMPARE(o.race->workload, defaultRace().workload);
        QCOMPARE(o.race->steps.value_or(0), std::int64_t(300));
        o = parse({QStringLiteral("--steps"), QStringLiteral("300"), QStringLiteral("--live")});
        QVERIFY(o.race && !o.race->fair);
        o = parse({QStringLiteral("--lane"), QStringLiteral("cpu,threads=1"), QStringLiteral("--steps"),
                   QStringLiteral("30")});
        QVERIFY(o.race && !o.race->fair);
        o = parse({QStringLiteral("--fair"), QStringLiteral("--live")});
        QVERIFY(o.error.contains(QStringLiteral("exclude")));
        // The window opens with the first race: its lanes and its mode.
        ui::MainWindow w;
        QCOMPARE(w.setupPanel()->raceSpec().fair, fair);
        QCOMPARE(w.setupPanel()->lanesTable()->lanes().size(), defaultRace().lanes.size());
        QCOMPARE(w.setupPanel()->raceSpec().workload, defaultRace().workload);
    }

    // A language model's target is a validation loss: the setup says so, keeps it through a
    // round trip and hands the race a loss target, not an accuracy.
    void aLanguageModelsTargetIsAValidationLoss() {
        ui::MainWindow w;
        RaceSpec spec;
        spec.workload = "char-gpt";
        LaneSpec cpu;
        cpu.threads = 1;
        spec.lanes = {cpu};
        spec.targetLoss = 1.75;
        w.setupPanel()->setRaceSpec(spec);
        auto got = w.setupPanel()->raceSpec();
        QCOMPARE(got.targetLoss, std::optional<double>(1.75));
        QVERIFY(!got.targetAccuracy);
        bool named = false;
        for (auto* l : w.setupPanel()->findChildren<QLabel*>()) {
            named = named || l->text() == QStringLiteral("Target val loss");
        }
        QVERIFY(named);
        // Back to an image workload: an accuracy target again, at the workload's default.
        spec.workload = "fashion-mlp";
        spec.targetLoss.reset();
        w.setupPanel()->setRaceSpec(spec);
        got = w.setupPanel()->raceSpec();
        QVERIFY(!got.targetLoss);
        QCOMPARE(got.targetAccuracy, std::optional<double>(findWorkload("fashion-mlp").defaultTarget));
    }

    void cudaLaneWithoutCudaIsRefusedWithTheReason() {
        if (deviceReport().cudaAvailable) {
            QSKIP("this machine has CUDA: cuda lanes are usable here");
        }
        for (const QString& lane : {QStringLiteral("cuda"), QStringLiteral("cuda:0,batch=512")}) {
            const auto o = parse({QStringLiteral("--lane"), lane});
            QVERIFY2(o.error.contains(QStringLiteral("CUDA is not available")), qPrintable(o.error));
            QVERIFY(o.error.contains(QString::fromStdString(deviceReport().cudaUnavailableReason)));
        }
        // The setup keeps a cuda lane as cuda (greyed, with the reason) and Start refuses it.
        ui::MainWindow w;
        RaceSpec spec;
        LaneSpec cpu, cuda;
        cpu.threads = 1;
        cuda.device = "cuda";
        spec.lanes = {cpu, cuda};
        spec.steps = 5;
        w.setupPanel()->setRaceSpec(spec);
        QCOMPARE(w.setupPanel()->raceSpec().lanes[1].device, std::string("cuda"));
        QVERIFY(!w.startRace());
        QVERIFY2(w.lastError().contains(QStringLiteral("CUDA is not available")), qPrintable(w.lastError()));
        QVERIFY(!w.race()->hasRace());
    }

    void aCommandAfterTheDoubleDashIsAScriptRace() {
        const auto o = parse({QStringLiteral("--lane"), QStringLiteral("cpu,threads=1"), QStringLiteral("--lane"),
                              QStringLiteral("cpu,threads=2"), QStringLiteral("--"), QStringLiteral("python3"),
                              QStringLiteral("train.py"), QStringLiteral("--epochs"), QStringLiteral("1")});
        QVERIFY2(o.error.isEmpty(), qPrintable(o.error));
        QVERIFY(o.race);
        QCOMPARE(o.race->workload, std::string(kScriptWorkload));
        QCOMPARE(o.race->command, (std::vector<std::string>{"python3", "train.py", "--epochs", "1"}));
        QVERIFY(!o.race->epochs); // --epochs after -- is the script's own
        // The setup shows it as "Your script…" with the command split into its fields, and gives
        // back the same command for the race.
        ui::MainWindow w;
        w.setupPanel()->setRaceSpec(*o.race);
        const auto spec = w.setupPanel()->raceSpec();
        QCOMPARE(spec.workload, std::string(kScriptWorkload));
        QCOMPARE(spec.command, o.race->command);
        auto* picker = w.setupPanel()->findChild<QWidget*>(QStringLiteral("scriptPicker"));
        QVERIFY(picker && !picker->isHidden());
        const auto plan = w.setupPanel()->plan();
        QCOMPARE(plan.lanes.size(), std::size_t(2));
        QCOMPARE(plan.lanes[0].spec.framework, std::optional<std::string>("script"));
    }

    void aScriptSetupShowsItsFieldsAndTheLengthButNoTarget() {
        ui::MainWindow w;
        const auto o = parse({QStringLiteral("--"), QStringLiteral("python3"), QStringLiteral("train.py")});
        w.setupPanel()->setRaceSpec(*o.race);
        w.setInitialSize(QSize(1280, 720));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        auto shown = [&](const QString& text) {
            for (auto* label : w.setupPanel()->findChildren<QLabel*>()) {
                if (label->text() == text) {
                    return label->isVisible();
                }
            }
            return false;
        };
        QVERIFY(shown(QStringLiteral("Script")));
        QVERIFY(shown(QStringLiteral("Interpreter")));
        QVERIFY(shown(QStringLiteral("Length")));
        // Each shown row has its height at 1280x720 (a squeezed form gave the Length row none).
        for (auto* box : w.setupPanel()->findChildren<QSpinBox*>()) {
            QVERIFY(!box->isVisible() || box->height() >= box->minimumSizeHint().height());
        }
        QVERIFY(!shown(QStringLiteral("Target accuracy")));
        QVERIFY(!shown(QStringLiteral("Data"))); // the script's own
        auto* interpreter = w.setupPanel()->findChild<QLineEdit*>(QStringLiteral("scriptInterpreter"));
        QVERIFY(interpreter && !interpreter->text().isEmpty()); // python3 on PATH, kept with no command
    }

    void argumentsWithSpacesAndQuotesSurviveTheSetup() {
        RaceSpec spec;
        spec.workload = kScriptWorkload;
        spec.command = {"/usr/bin/python3", "my train.py", "--name", "a \"quoted\" run", "--lr", "3e-4"};
        ui::MainWindow w;
        w.setupPanel()->setRaceSpec(spec);
        QCOMPARE(w.setupPanel()->raceSpec().command, spec.command);
    }

    // A launcher in front of the script (accelerate launch, torchrun, python3 -m
    // torch.distributed.run) goes in the Interpreter field, options and all, and round-trips.
    void aLauncherIsTheInterpreterWithItsOptions() {
        ui::MainWindow w;
        const std::vector<std::vector<std::string>> commands = {
            {"accelerate", "launch", "--cpu", "train.py", "--epochs", "1"},
            {"torchrun", "--nproc-per-node", "2", "train.py"},
            {"/usr/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node", "2", "my train.py", "--lr", "3e-4"},
            {"python3", "-u", "train.py"},
            {"accelerate", "launch", "train.ipynb", "--epochs", "1"},
            {"./train.sh", "--fast"},
            {"python3", "-c", "import devicerace"},
        };
        auto* interpreter = w.setupPanel()->findChild<QLineEdit*>(QStringLiteral("scriptInterpreter"));
        auto* args = w.setupPanel()->findChild<QLineEdit*>(QStringLiteral("scriptArgs"));
        QVERIFY(interpreter && args);
        for (const auto& command : commands) {
            RaceSpec spec;
            spec.workload = kScriptWorkload;
            spec.command = command;
            w.setupPanel()->setRaceSpec(spec);
            QCOMPARE(w.setupPanel()->raceSpec().command, command);
        }
        RaceSpec spec;
        spec.workload = kScriptWorkload;
        spec.command = {"torchrun", "--nproc-per-node", "2", "train.py"};
        w.setupPanel()->setRaceSpec(spec);
        QCOMPARE(interpreter->text(), QStringLiteral("torchrun --nproc-per-node 2"));
        // Typed as a user would: the launcher's words, the script, its arguments.
        interpreter->setText(QStringLiteral("accelerate launch --num_processes 1"));
        args->setText(QStringLiteral("--epochs 2"));
        QCOMPARE(
            w.setupPanel()->raceSpec().command,
            (std::vector<std::string>{"accelerate", "launch", "--num_processes", "1", "train.py", "--epochs", "2"}));
    }

    void aScriptThatCountsOnlyStepsIsChartedInStepsPerSecond() {
        // A script whose batch cannot be seen reports steps alone: the throughput chart shows
        // steps/s by itself, and the summary's steps/s is the script's.
        const QString python = QStandardPaths::findExecutable(QStringLiteral("python3"));
        if (python.isEmpty()) {
            QSKIP("no python3 on PATH");
        }
        RaceSpec spec;
        spec.workload = kScriptWorkload;
        LaneSpec cpu;
        cpu.threads = 1;
        spec.lanes = {cpu};
        spec.command = {python.toStdString(), "-c",
                        "import time, devicerace\nlane = devicerace.lane()\nfor _ in range(150):\n"
                        "    time.sleep(0.004)\n    lane.step(loss=1.0)\n"};
        ui::MainWindow w;
        w.show();
        w.setupPanel()->setRaceSpec(spec);
        QSignalSpy finished(&w, &ui::MainWindow::raceFinished);
        QVERIFY2(w.startRace(), qPrintable(w.lastError()));
        QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, 60000);
        auto* rate = w.dashboard()->findChild<QComboBox*>(QStringLiteral("rateMetric"));
        QVERIFY(rate);
        QCOMPARE(rate->currentText(), QStringLiteral("steps/s"));
        QVERIFY(w.dashboard()->throughputChart()->pointCount() > 0);
        // The title names the program by its file name, not the path it was found at.
        QVERIFY2(w.windowTitle().startsWith(QStringLiteral("DeviceRace — your command: python3 -c import time")),
                 qPrintable(w.windowTitle()));
    }

    void aCommandNeedsTheDoubleDash() {
        const auto o = parse({QStringLiteral("--lane"), QStringLiteral("cpu"), QStringLiteral("train.py")});
        QVERIFY2(o.error.contains(QStringLiteral("after --")), qPrintable(o.error));
    }

    void aScriptRaceWithoutAScriptIsRefusedByStart() {
        ui::MainWindow w;
        RaceSpec spec;
        spec.workload = kScriptWorkload;
        LaneSpec cpu;
        cpu.threads = 1;
        spec.lanes = {cpu};
        w.setupPanel()->setRaceSpec(spec);
        QVERIFY(!w.startRace());
        QVERIFY2(w.lastError().contains(QStringLiteral("needs its command")), qPrintable(w.lastError()));
    }

    void cudaIndexBeyondTheMachineIsRefused() {
        const auto o = parse({QStringLiteral("--lane"), QStringLiteral("cuda:7")});
        QVERIFY(!o.error.isEmpty());
        QVERIFY(o.error.contains(QStringLiteral("cuda:7")));
    }
};

QTEST_MAIN(TestGuiOptions)
#include "tst_gui_options.moc"
