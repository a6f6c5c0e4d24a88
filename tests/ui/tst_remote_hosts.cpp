// Settings → Hosts…: remote machines join the lane picker with their devices, or greyed with
// the reason they cannot be reached. The ssh client is replaced by a script on the PATH that
// runs the local worker (the real sshd path is tested by tests/cli/test_worker_lanes.py).
#include <QComboBox>
#include <QHeaderView>
#include <QLabel>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <cstdlib>
#include <fstream>
#include <sys/stat.h>

#include "charts/palette.h"
#include "drawn_text.h"
#include "hosts_dialog.h"
#include "theme.h"
#include "lanes_table.h"
#include "remote_hosts.h"

using namespace devicerace;
using namespace devicerace::ui;

class TestRemoteHosts : public QObject {
    Q_OBJECT

    QTemporaryDir m_bin;

    static int findDevice(QComboBox* combo, const QString& value) { return combo->findData(value); }

    static bool enabled(QComboBox* combo, int index) {
        auto* model = qobject_cast<QStandardItemModel*>(combo->model());
        return model->item(index)->flags().testFlag(Qt::ItemIsEnabled);
    }

    void waitForAnswers() {
        QTRY_VERIFY_WITH_TIMEOUT(std::all_of(RemoteHosts::instance().hosts().begin(),
                                             RemoteHosts::instance().hosts().end(),
                                             [](const auto& h) {
                                                 return h.status == RemoteHosts::Status::Reachable ||
                                                        h.status == RemoteHosts::Status::Unreachable;
                                             }),
                                 60000);
    }

private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        QCoreApplication::setOrganizationName(QStringLiteral("DeviceRaceTest"));
        QCoreApplication::setApplicationName(QStringLiteral("DeviceRaceTestHosts"));
        // A stand-in `ssh`: "fakehost" runs the local worker; any other host is unreachable the
        // way OpenSSH says it (exit 255, "Connection refused").
        const std::string ssh = m_bin.filePath(QStringLiteral("ssh")).toStdString();
        std::ofstream(ssh) << "#!/bin/sh\n"
                              "for a; do last=$a; case \"$a\" in fakehost) host=yes;; esac; done\n"
                              "if [ -n \"$host\" ]; then exec '" DEVICERACE_CLI_PATH "' worker --proto 1; fi\n"
                              "echo 'ssh: connect to host nowhere port 22: Connection refused' >&2; exit 255\n";
        ::chmod(ssh.c_str(), 0755);
        const std::string path = m_bin.path().toStdString() + ":" + std::getenv("PATH");
        ::setenv("PATH", path.c_str(), 1);
    }

    void reachableHostsOfferTheirDevicesAndUnreachableOnesSayWhy() {
        RemoteHosts::instance().setHosts(
            {{QStringLiteral("ssh://fakehost"), QString()}, {QStringLiteral("ssh://nowhere:2222"), QString()}});
        LanesTable table;
        LaneSpec local;
        table.addLane(local);
        auto* combo = qobject_cast<QComboBox*>(table.cellWidget(0, LanesTable::ColDevice));
        // While asking: greyed as "checking…".
        waitForAnswers();
        combo = qobject_cast<QComboBox*>(table.cellWidget(0, LanesTable::ColDevice));
        const int remoteCpu = findDevice(combo, QStringLiteral("ssh://fakehost/cpu"));
        QVERIFY2(remoteCpu >= 0, "the reachable host's CPU is in the picker");
        QVERIFY(enabled(combo, remoteCpu));
        const int dead = findDevice(combo, QStringLiteral("ssh://nowhere:2222"));
        QVERIFY(dead >= 0);
        QVERIFY(!enabled(combo, dead));
        QVERIFY2(combo->itemText(dead).contains(QStringLiteral("host unreachable")), qPrintable(combo->itemText(dead)));
        // The lane keeps its local device through the refresh, and a remote pick reads back as
        // the CLI's ssh:// lane.
        QCOMPARE(table.lanes().at(0).device, std::string("cpu"));
        QVERIFY(table.lanes().at(0).host.empty());
        combo->setCurrentIndex(remoteCpu);
        const auto lane = table.lanes().at(0);
        QCOMPARE(lane.host, std::string("ssh://fakehost"));
        QCOMPARE(lane.device, std::string("cpu"));
    }

    // The Hosts dialog's "devicerace-cli there" is the program the lanes on that host run
    // (Start used to refuse "has no 'devicerace-cli'" until cli= was typed into the lane).
    void theHostsCliPathReachesTheLanesOnThatHost() {
        RemoteHosts::instance().setHosts({{QStringLiteral("ssh://fakehost"), QStringLiteral(DEVICERACE_CLI_PATH)},
                                          {QStringLiteral("ssh://nowhere:2222"), QString()}});
        waitForAnswers();
        LanesTable table;
        table.addLane(parseLaneSpec("ssh://fakehost/cpu"));
        table.addLane(parseLaneSpec("ssh://nowhere:2222/cpu"));
        table.addLane(parseLaneSpec("ssh://fakehost/cpu,cli=/opt/other/devicerace-cli"));
        table.addLane(parseLaneSpec("cpu"));
        const auto lanes = table.lanes();
        QCOMPARE(lanes.at(0).cli.value_or(""), std::string(DEVICERACE_CLI_PATH));
        QVERIFY(!lanes.at(1).cli); // blank in the dialog: the one on that host's PATH
        QCOMPARE(lanes.at(2).cli.value_or(""), std::string("/opt/other/devicerace-cli")); // the lane's own wins
        QVERIFY(!lanes.at(3).cli);
        // (the engine runs a remote lane's cli=: tests/cli/test_worker_lanes.py)
        RemoteHosts::instance().setHosts({});
    }

    void aRemoteLaneRoundTripsThroughTheTable() {
        LanesTable table;
        table.addLane(parseLaneSpec("ssh://elsewhere:2200/cuda:1,batch=64,isolate=process"));
        const auto lane = table.lanes().at(0);
        QCOMPARE(lane.host, std::string("ssh://elsewhere:2200"));
        QCOMPARE(lane.device, std::string("cuda:1"));
        QCOMPARE(lane.batch.value_or(0), 64);
    }

    // Every column header reads in full (the cli column's was cut; its explanation is a tooltip).
    void theDialogsHeadersAreNotCut() {
        HostsDialog dialog;
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        auto* table = dialog.findChild<QTableWidget*>(QStringLiteral("hostsTable"));
        auto* header = table->horizontalHeader();
        for (int c = 0; c < table->columnCount(); ++c) {
            const QString text = table->horizontalHeaderItem(c)->text();
            QVERIFY2(header->sectionSize(c) >= header->fontMetrics().horizontalAdvance(text) + 8,
                     qPrintable(QStringLiteral("%1: %2 px").arg(text).arg(header->sectionSize(c))));
        }
        QVERIFY(!table->horizontalHeaderItem(1)->toolTip().isEmpty());
    }

    void theDialogRefusesAHostSshWouldReadAsAnOption() {
        HostsDialog dialog;
        auto* table = dialog.findChild<QTableWidget*>(QStringLiteral("hostsTable"));
        QVERIFY(table);
        table->setRowCount(1);
        table->setItem(0, 0, new QTableWidgetItem(QStringLiteral("ssh://-oProxyCommand=touch")));
        table->setItem(0, 1, new QTableWidgetItem);
        table->setItem(0, 2, new QTableWidgetItem);
        QVERIFY(!dialog.apply());
        bool said = false;
        for (auto* label : dialog.findChildren<QLabel*>()) {
            said = said || label->text().contains(QStringLiteral("may not start with '-'"));
        }
        QVERIFY(said);
        // The message reads on either theme (its fixed red was 3.1:1 on the dark one).
        auto* error = dialog.findChild<QLabel*>(QStringLiteral("hostsError"));
        QVERIFY(error);
        error->resize(error->sizeHint());
        for (const QPalette& theme : {darkPalette(), lightPalette()}) {
            dialog.setPalette(theme);
            const QColor bg = dialog.palette().color(QPalette::Window);
            const DrawnText drawn = drawnText(*error);
            QCOMPARE(drawn.background, bg); // shown on the dialog's background
            const QColor fg = drawn.text;
            QVERIFY2(contrastRatio(fg, bg) >= 4.5, qPrintable(fg.name() + QStringLiteral(" on ") + bg.name()));
            QVERIFY2(fg.hslHue() <= 15 || fg.hslHue() >= 345, qPrintable(fg.name())); // still red
        }
    }

    void cleanupTestCase() { RemoteHosts::instance().setHosts({}); }
};

QTEST_MAIN(TestRemoteHosts)
#include "tst_remote_hosts.moc"
