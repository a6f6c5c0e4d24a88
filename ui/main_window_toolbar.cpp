#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QComboBox>
#include <QFileDialog>
#include <QInputDialog>
#include <QMenu>

#include "hosts_dialog.h"
#include <QStandardPaths>
#include <QStatusBar>
#include <QToolBar>
#include <QToolButton>

#include "charts/metric_chart.h"
#include "dashboard.h"
#include "exporter.h"
#include "race_controller.h"
#include "recording_menu.h"
#include "setup_panel.h"
#include "video_dialog.h"

// The window's toolbar and its Export menu (split from main_window.cpp).
namespace devicerace::ui {

void MainWindow::buildToolbar() {
    auto* bar = addToolBar(tr("Race"));
    m_toolbar = bar;
    bar->setObjectName(QStringLiteral("raceToolbar"));
    bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    // The setup panel folds away (more room for the charts on small screens).
    m_setupAction = bar->addAction(tr("Setup"));
    m_setupAction->setCheckable(true);
    m_setupAction->setChecked(true);
    m_setupAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
    m_setupAction->setToolTip(tr("Show or fold away the race setup (Ctrl+B)"));
    connect(m_setupAction, &QAction::toggled, this, [this](bool on) {
        if (!m_presentation) {
            m_setup->setVisible(on);
        }
    });
    bar->addSeparator();
    m_start = bar->addAction(tr("▶ Start"), this, [this] { startRace(); });
    m_start->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    m_pause = bar->addAction(tr("Pause"));
    m_pause->setCheckable(true);
    connect(m_pause, &QAction::toggled, this, &MainWindow::setPaused);
    m_stop = bar->addAction(tr("■ Stop"), this, &MainWindow::stopRace);
    bar->addSeparator();
    m_present = bar->addAction(tr("Present"));
    m_present->setCheckable(true);
    m_present->setShortcut(QKeySequence(Qt::Key_F11));
    connect(m_present, &QAction::toggled, this, &MainWindow::setPresentation);
    addAction(m_present);
    // Space starts or pauses from anywhere in the window but a text field (eventFilter: a focused
    // combo box or button would take it as a shortcut would not); T switches light/dark in
    // presentation mode, which has no toolbar.
    m_space = new QAction(this);
    connect(m_space, &QAction::triggered, this, [this] {
        if (m_race->running()) {
            m_pause->setChecked(!m_pause->isChecked());
        } else {
            startRace();
        }
    });
    QApplication::instance()->installEventFilter(this);
    m_themeKey = new QAction(this);
    m_themeKey->setShortcut(QKeySequence(Qt::Key_T));
    m_themeKey->setEnabled(false);
    connect(m_themeKey, &QAction::triggered, this, [this] { setPresentationDark(!m_presentationDark); });
    addAction(m_themeKey);
    auto* esc = new QAction(this);
    esc->setShortcut(QKeySequence(Qt::Key_Escape));
    connect(esc, &QAction::triggered, this, [this] { m_present->setChecked(false); });
    addAction(esc);

    m_recordAction = bar->addAction(tr("Record"));
    m_recordAction->setCheckable(true);
    m_recordAction->setChecked(true);
    m_recordAction->setToolTip(tr("Record every race into the runs folder (replay it later, here or elsewhere)"));
    connect(m_recordAction, &QAction::toggled, this, [this](bool on) { m_record = on; });
    auto* openButton = new QToolButton(this);
    openButton->setText(tr("Open recording"));
    openButton->setToolTip(tr("Show a recorded race beside the live lanes: it is drawn complete, and replays from "
                              "the start with them when you press Start (or alone with Replay)"));
    auto* recordings = new QMenu(openButton);
    connect(recordings, &QMenu::aboutToShow, this, [this, recordings] {
        const QString runs = m_recordDir.isEmpty() ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                                                         QStringLiteral("/runs")
                                                   : m_recordDir;
        fillRecordingMenu(recordings, runs, this, [this](const QString& dir) { openRecording(dir); });
    });
    openButton->setMenu(recordings);
    openButton->setPopupMode(QToolButton::InstantPopup);
    bar->addWidget(openButton);
    m_replay = bar->addAction(tr("Replay"), this, [this] { replayRecordings(); });
    m_replay->setToolTip(tr("Play the recorded lanes again from their start, at the chosen speed"));
    auto* speed = new QComboBox(this);
    speed->setObjectName(QStringLiteral("replaySpeed"));
    speed->setToolTip(tr("Playback speed of recordings"));
    speed->addItem(tr("1×"), 1.0);
    speed->addItem(tr("2×"), 2.0);
    speed->addItem(tr("10×"), 10.0);
    speed->addItem(tr("instantly"), 0.0);
    connect(speed, &QComboBox::currentIndexChanged, this,
            [this, speed] { setReplaySpeed(speed->currentData().toDouble()); });
    bar->addWidget(speed);
    m_removeRecorded = bar->addAction(tr("Remove recorded lanes"), this, [this] {
        m_race->clearRecordings();
        m_dashboard->setRepeatNote(m_repeatText); // an opened repeat set's verdict goes with its lanes
        updateActions();
    });
    m_removeRecorded->setToolTip(tr("Take the recorded lanes off the charts (the recordings stay on disk)"));
    bar->addSeparator();

    auto* hosts = bar->addAction(tr("Hosts…"), this, [this] { HostsDialog(this).exec(); });
    hosts->setObjectName(QStringLiteral("hostsAction"));
    hosts->setToolTip(tr("Machines to race over ssh: their devices join the lane picker"));

    m_darkAction = bar->addAction(tr("◐ Dark"));
    m_darkAction->setCheckable(true);
    m_darkAction->setToolTip(tr("Dark theme (presentation mode: press T to switch)"));
    connect(m_darkAction, &QAction::toggled, this, &MainWindow::setDarkTheme);

    auto* menu = new QMenu(this);
    auto ask = [this](const QString& filter, const QString& suffix) {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Export"), exportStartPath(QStringLiteral("devicerace.") + suffix), filter);
        rememberExportPath(path);
        return path;
    };
    auto report = [this](const QString& error, const QString& path) {
        if (error.isEmpty()) {
            statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
        } else {
            showError(error);
        }
    };
    menu->addAction(tr("Dashboard as PNG…"), this, [this, ask, report] {
        const QString path = ask(tr("PNG image (*.png)"), QStringLiteral("png"));
        if (path.isEmpty()) {
            return;
        }
        bool ok = false;
        const int width = QInputDialog::getInt(this, tr("PNG size"), tr("Width in pixels (height keeps the shape):"),
                                               m_dashboard->width(), 200, 16384, 100, &ok);
        if (ok) {
            const int height = width * m_dashboard->height() / std::max(1, m_dashboard->width());
            report(exportDashboardPng(path, QSize(width, height)), path);
        }
    });
    menu->addAction(tr("Dashboard as SVG…"), this, [this, ask, report] {
        const QString path = ask(tr("SVG image (*.svg)"), QStringLiteral("svg"));
        if (!path.isEmpty()) {
            report(exportDashboardSvg(path), path);
        }
    });
    menu->addAction(tr("Throughput chart as PNG…"), this, [this, ask, report] {
        const QString path = ask(tr("PNG image (*.png)"), QStringLiteral("png"));
        if (!path.isEmpty()) {
            QString error;
            try {
                savePng(m_dashboard->charts().first(), path);
            } catch (const std::exception& e) {
                error = QString::fromStdString(e.what());
            }
            report(error, path);
        }
    });
    menu->addAction(tr("Video (MP4 / GIF)…"), this, [this, report] {
        if (m_race->running()) {
            showError(tr("Video export renders a finished race: wait for the finish or press Stop"));
            return;
        }
        QStringList recordings = m_race->recordingDirs();
        if (!m_race->recordDir().isEmpty()) {
            recordings.prepend(m_race->recordDir());
        }
        QString error;
        const QString path = runVideoDialog(this, recordings, &error);
        if (!path.isEmpty() || !error.isEmpty()) {
            report(error, path);
        }
    });
    menu->addSeparator();
    menu->addAction(tr("Data as CSV…"), this, [this, ask, report] {
        const QString path = ask(tr("CSV (*.csv)"), QStringLiteral("csv"));
        if (!path.isEmpty()) {
            report(exportCsv(path), path);
        }
    });
    menu->addAction(tr("TensorBoard event files…"), this, [this, report] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("TensorBoard log folder"), exportStartPath());
        rememberExportPath(dir);
        if (!dir.isEmpty()) {
            report(exportTensorBoard(dir), dir);
        }
    });
    menu->addAction(tr("Summary as JSON…"), this, [this, ask, report] {
        const QString path = ask(tr("JSON (*.json)"), QStringLiteral("json"));
        if (!path.isEmpty()) {
            report(exportJson(path), path);
        }
    });
    auto* exportButton = new QToolButton(this);
    exportButton->setText(tr("⤓ Export"));
    exportButton->setMenu(menu);
    exportButton->setPopupMode(QToolButton::InstantPopup);
    bar->addWidget(exportButton);
}

} // namespace devicerace::ui
