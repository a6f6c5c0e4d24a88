#include "main_window.h"

#include "devicerace/repeats.h"

#include <QAction>
#include <QApplication>
#include <QAbstractSpinBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QKeyEvent>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QTextEdit>
#include <QDateTime>
#include <QStandardPaths>
#include <QMenu>
#include <QMessageBox>
#include <QScreen>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QToolBar>

#include "charts/metric_chart.h"
#include "dashboard.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/race_plan.h"
#include "devicerace/workload.h"
#include "device_panel.h"
#include "lanes_table.h"
#include "race_controller.h"
#include "race_strip.h"
#include "setup_panel.h"
#include "theme.h"

namespace devicerace::ui {

namespace {
// A widget where Space types a space.
bool typesText(const QWidget* w) {
    if (const auto* line = qobject_cast<const QLineEdit*>(w)) {
        return !line->isReadOnly();
    }
    if (const auto* combo = qobject_cast<const QComboBox*>(w)) {
        return combo->isEditable();
    }
    return qobject_cast<const QTextEdit*>(w) || qobject_cast<const QPlainTextEdit*>(w) ||
           qobject_cast<const QAbstractSpinBox*>(w);
}

// How long closing waits for lanes to stop before exiting anyway (ms): a lane blocked in
// data loading must not keep the window open forever.
constexpr int kCloseTimeoutMs = 1200; // then it leaves without the lanes that did not stop
constexpr int kCloseTickMs = 50;
// Presentation mode: fonts scale with the screen height, about 1.33x at 720 px and 2x at
// 1080 px: readable from the back of a room, with room left for the tick labels.
constexpr double kPresentationPixelsPerScale = 540.0;
// The window's preferred first size (px), shrunk to the screen's available area.
constexpr int kPreferredWidth = 1500;
constexpr int kPreferredHeight = 950;
} // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
    setObjectName(QStringLiteral("DeviceRaceMainWindow"));
    m_race = new RaceController(this);
    m_splitter = new QSplitter(this);
    m_setup = new SetupPanel(m_splitter);
    // The dashboard scrolls (vertically only) where even its fitted parts are taller than the
    // window (many lanes at 1280x720): its charts never shrink below readable, and the window
    // never grows past the screen.
    auto* scroll = new QScrollArea(m_splitter);
    scroll->setObjectName(QStringLiteral("dashboardScroll"));
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidgetResizable(true);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_dashboard = new Dashboard(m_race, scroll);
    scroll->setWidget(m_dashboard);
    m_dashboard->fitInside(scroll->viewport());
    m_splitter->addWidget(m_setup);
    m_splitter->addWidget(scroll);
    m_splitter->setStretchFactor(1, 4);
    setCentralWidget(m_splitter);
    buildToolbar();

    connect(m_race, &RaceController::started, this, [this] {
        m_dashboard->onRaceStarted();
        updateActions();
        updateTitle();
        if (m_race->hasRace() && m_race->running()) {
            statusBar()->showMessage(
                m_race->recordDir().isEmpty() ? tr("Racing…") : tr("Racing… recording to %1").arg(m_race->recordDir()));
        }
    });
    connect(m_race, &RaceController::updated, m_dashboard, &Dashboard::refresh);
    connect(m_race, &RaceController::finishedRace, this, &MainWindow::onFinished);
    connect(m_race, &RaceController::failed, this, [this](const QString& message) {
        showError(message);
        updateActions();
    });
    connect(m_race, &RaceController::setupFailed, this, &MainWindow::startFailed);
    m_slowTimer.setInterval(500);
    connect(&m_slowTimer, &QTimer::timeout, this, [this] {
        m_dashboard->refreshSummary();
        m_dashboard->devicePanel()->refreshLive(m_race->running());
        // Per-lane CPU: the lane threads' CPU seconds over the last period.
        const auto cpu = m_race->laneCpuSeconds();
        QList<std::tuple<QString, QColor, double>> lanes;
        if (m_race->running() && cpu.size() == m_lastLaneCpu.size()) {
            for (std::size_t i = 0; i < cpu.size(); ++i) {
                const auto& lane = m_race->lanes()[i];
                lanes.append(
                    {lane.name, lane.color, (cpu[i] - m_lastLaneCpu[i]) / (m_slowTimer.interval() / 1000.0) * 100});
            }
        }
        m_lastLaneCpu = cpu;
        m_dashboard->devicePanel()->setLaneCpu(lanes);
        QStringList jobs;
        for (const auto& lane : m_race->lanes()) {
            if (lane.launched) {
                jobs << lane.name + QStringLiteral(": ") +
                            (lane.job.isEmpty() ? tr("%1, not running yet").arg(lane.device) : lane.job);
            }
        }
        m_dashboard->devicePanel()->setClusterJobs(jobs);
    });
    connect(m_dashboard->strip(), &RaceStrip::laneMenuRequested, this, [this](int lane, const QPoint& pos) {
        auto actions = laneActions(lane);
        if (!actions.isEmpty()) {
            QMenu::exec(actions, pos, nullptr, this);
        }
        qDeleteAll(actions);
    });
    m_slowTimer.start();
    // A preset's stand-in recording (its GPU lane, recorded elsewhere) joins the charts once.
    connect(m_setup, &SetupPanel::standInOffered, this, [this](const QString& dir) {
        if (!m_race->recordingDirs().contains(dir)) {
            openRecording(dir);
        }
    });
    connect(m_setup, &SetupPanel::validated, this, [this] {
        if (!m_race->hasRace()) {
            updateTitle();
            showReady();
        }
    });
    m_closeTimer.setInterval(kCloseTickMs);
    connect(&m_closeTimer, &QTimer::timeout, this, [this] {
        m_race->poll();
        if (m_race->finished() || ++m_closeTicks * kCloseTickMs >= kCloseTimeoutMs) {
            m_closeTimer.stop();
            close();
        }
    });
    resize(kPreferredWidth, kPreferredHeight);
    fitToScreen();
    updateActions();
    updateTitle();
    showReady();
}

QStringList MainWindow::plannedLaneNames() const {
    QStringList names;
    try {
        for (const auto& lane : m_setup->plan().lanes) {
            names << QString::fromStdString(lane.spec.name);
        }
    } catch (const std::exception&) {
        // a half-edited lane: the names come back with the next change
    }
    return names;
}

void MainWindow::showReady() {
    if (m_race->hasRace() || m_race->isSettingUp()) {
        return;
    }
    // The race Start would run, in the plan's names (not a default the setup may not hold).
    const QStringList names = plannedLaneNames();
    m_dashboard->setPlannedLanes(names); // the speedup box, before the first race
    statusBar()->showMessage(names.isEmpty()
                                 ? tr("Ready: add a lane, then press Start")
                                 : tr("Ready: press Start or Space to race %1").arg(names.join(tr(" vs "))));
}

MainWindow::~MainWindow() {
    if (m_darkApplied) {
        applyApplicationTheme(false); // the application outlives its window (tests, the video export)
    }
}

void MainWindow::setInitialSize(QSize size) {
    resize(size);
    fitToScreen();
}

void MainWindow::fitToScreen() {
    const QScreen* s = screen() ? screen() : QGuiApplication::primaryScreen();
    if (!s) {
        return;
    }
    const QRect avail = s->availableGeometry();
    // The frame (title bar, borders) is not known before the first show: leave it some room.
    const QMargins frame =
        isVisible()
            ? QMargins(frameGeometry().left() - geometry().left(), geometry().top() - frameGeometry().top(),
                       frameGeometry().right() - geometry().right(), frameGeometry().bottom() - geometry().bottom())
            : QMargins(0, 0, 0, 0);
    const QSize room = avail.size().shrunkBy(frame);
    const QSize size = this->size().boundedTo(room);
    resize(size);
    QPoint pos = geometry().topLeft();
    pos.setX(std::clamp(pos.x(), avail.left() + frame.left(), avail.right() - frame.right() - size.width() + 1));
    pos.setY(std::clamp(pos.y(), avail.top() + frame.top(), avail.bottom() - frame.bottom() - size.height() + 1));
    move(pos - QPoint(frame.left(), frame.top()));
}

void MainWindow::updateActions() {
    const bool running = m_race->running() || m_race->isSettingUp();
    m_start->setEnabled(!running && !m_closing);
    m_pause->setEnabled(running || m_race->replaying());
    m_stop->setEnabled(running || m_race->replaying());
    m_setup->setEditable(!running);
    m_replay->setEnabled(!running && m_race->recordingCount() > 0);
    m_removeRecorded->setEnabled(!running && m_race->recordingCount() > 0);
}

void MainWindow::replayRecordings() {
    {
        const QSignalBlocker block(m_pause);
        m_pause->setChecked(false);
    }
    m_race->replayRecordings();
    updateActions();
}

void MainWindow::updateTitle() {
    QString title = QStringLiteral("DeviceRace");
    if (m_race->hasRace() || m_race->recordingCount() > 0) {
        // A script race names the user's command: its data is its own.
        const bool script = m_race->workload() == QLatin1String(kScriptWorkload);
        title += QStringLiteral(" — ") +
                 (script ? tr("your command: %1").arg(m_race->command())
                         : m_race->workload() + QStringLiteral(" · ") + m_race->datasetLabel()) +
                 // A replay says how it was recorded (not what the setup's fair box says now).
                 (m_race->hasRace() ? (m_race->fair() ? tr(" · fair mode") : tr(" · live mode"))
                                    : (m_race->fair() ? tr(" · replay, recorded in fair mode")
                                                      : tr(" · replay, recorded in live mode")));
    }
    setWindowTitle(title);
    if (m_race->hasRace() || m_race->recordingCount() > 0) {
        m_dashboard->setHeadline(
            title.section(QStringLiteral(" — "), 1).isEmpty() ? title : title.section(QStringLiteral(" — "), 1));
        return;
    }
    // Before the first race: what is about to race (named as the race will name them), and how
    // to start it.
    const QStringList names = plannedLaneNames();
    m_dashboard->setHeadline(names.join(tr(" vs ")) +
                             (m_presentation ? tr(" — press Space to start") : tr(" — press Start")));
}

bool MainWindow::confirmCommands(RaceSpec& spec) {
    // A cmd= lane runs a program: never without the user seeing the exact command line.
    QStringList commands;
    for (const auto& lane : spec.lanes) {
        if (lane.cmd) {
            commands << QString::fromStdString(*lane.cmd) + QStringLiteral(" --proto 1");
        }
    }
    if (commands.isEmpty()) {
        return true;
    }
    const auto answer = QMessageBox::question(
        this, tr("Run these programs?"),
        tr("This race runs programs as lanes (they must speak DeviceRace's worker protocol):\n\n%1\n\nRun them?")
            .arg(commands.join(QLatin1Char('\n'))),
        QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
    spec.allowCommands = answer == QMessageBox::Yes;
    return spec.allowCommands;
}

bool MainWindow::startRace() {
    if (m_race->running() || m_race->isSettingUp()) {
        return false;
    }
    RaceSpec spec;
    try {
        spec = m_setup->raceSpec();
    } catch (const std::exception& e) {
        showError(QString::fromStdString(e.what()));
        return false;
    }
    // The engine's plan is the window's validation: the first problem is the one Start names.
    const RacePlan plan = [&] {
        PlanOptions options;
        options.askFrameworks = false;
        return resolveRace(spec, options);
    }();
    if (!plan.ok()) {
        showError(QString::fromStdString(plan.problems.front()));
        return false;
    }
    if (!confirmCommands(spec)) {
        return false;
    }
    m_setup->rememberScript(); // a script that raced joins the recent ones
    m_pause->setChecked(false);
    m_repeatRecordBase.clear();
    if (m_record) {
        const QString base = m_recordDir.isEmpty() ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
                                                         QStringLiteral("/runs")
                                                   : m_recordDir;
        m_repeatRecordBase = base + QLatin1Char('/') +
                             QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss")) +
                             QLatin1Char('-') + QString::fromStdString(spec.workload);
    }
    m_repeatSpec = spec;
    m_repeatTotal = m_setup->repeats();
    m_repeatIndex = 1;
    m_repeatSummaries.clear();
    m_race->clearRepeats();
    m_repeatText.clear();
    m_dashboard->setRepeatNote({});
    m_stopRequested = false;
    if (!startRepeat()) {
        return false;
    }
    statusBar()->showMessage(tr("Setting up the race (loading data, starting workers)…"));
    updateActions();
    const bool sharing = !plan.sharingNote.empty();
    m_dashboard->devicePanel()->setSharingNote(sharing ? QStringLiteral("⚠ ") + QString::fromStdString(plan.sharingNote)
                                                       : QString());
    // Where the audience looks too (presentation mode hides the device panel).
    m_dashboard->setSharingNote(sharing ? tr("⚠ live lanes share %1 CPU cores (%2 threads): CPU speedups read low; "
                                             "fair mode runs them one at a time")
                                              .arg(plan.logicalCpus)
                                              .arg(plan.cpuThreads)
                                        : QString());
    saveSettings();
    return true;
}

bool MainWindow::startRepeat() {
    // One repeat: a recording of its own (REC/repeat-K when there are several).
    QString recordDir = m_repeatRecordBase;
    if (!recordDir.isEmpty() && m_repeatTotal > 1) {
        recordDir += QStringLiteral("/repeat-%1").arg(m_repeatIndex);
    }
    if (m_repeatTotal > 1) {
        m_dashboard->setRepeatNote(tr("repeat %1 of %2").arg(m_repeatIndex).arg(m_repeatTotal));
    }
    return m_race->start(m_repeatSpec, m_setup->laneColors(), recordDir);
}

QString MainWindow::verdictText(const RepeatSummary& repeats) {
    // Each lane's speedup over the first as median ± spread.
    QStringList parts;
    for (const auto& lane : repeats.lanes) {
        if (!lane.baseline && lane.speedup) {
            parts << QString::fromStdString(lane.name + " " + speedupText(lane));
        }
    }
    return tr("%1 repeats: ").arg(repeats.repeats.size()) + parts.join(QStringLiteral(" · "));
}

bool MainWindow::openRecording(const QString& dir) {
    QString error;
    if (!m_race->addRecording(dir, &error)) {
        showError(error);
        return false;
    }
    if (const auto& opened = m_race->openedRepeats()) {
        m_dashboard->setRepeatNote(verdictText(*opened)); // recorded lanes: named "… (rec)" on screen
    }
    if (const auto repeats = repeatSetFolders(dir.toStdString()); repeats.size() > 1) {
        statusBar()->showMessage(tr("Opened %1: its last repeat replays, drawn with each lane's band across the %2 "
                                    "repeats")
                                     .arg(dir)
                                     .arg(repeats.size()),
                                 8000);
    } else {
        statusBar()->showMessage(
            tr("Opened %1: it replays beside the live lanes on Start, or alone with Replay").arg(dir), 8000);
    }
    updateActions();
    return true;
}

void MainWindow::setReplaySpeed(double speed) { m_race->setReplaySpeed(speed); }

void MainWindow::setRecording(bool on, const QString& dir) {
    m_record = on;
    m_recordDir = dir;
    const QSignalBlocker block(m_recordAction);
    m_recordAction->setChecked(on);
}

void MainWindow::stopRace() {
    m_stopRequested = true;
    m_race->stop();
    statusBar()->showMessage(tr("Stopping…"));
}

void MainWindow::setPaused(bool paused) {
    m_race->setPaused(paused);
    statusBar()->showMessage(paused ? tr("Paused (lane clocks are stopped too)") : tr("Racing…"));
}

void MainWindow::onFinished() {
    m_dashboard->refresh();
    m_dashboard->refreshSummary();
    // The device panel says the finished race's average now, not its last in-race reading (which
    // a screenshot or an export taken at the finish would show until the next slow tick).
    m_dashboard->devicePanel()->refreshLive(false);
    m_dashboard->devicePanel()->setLaneCpu({});
    if (m_repeatTotal > 1) {
        // A stopped repeat is partial: it does not enter the spread.
        if (auto summary = m_race->summary(); summary && m_race->hasRace() && !m_stopRequested) {
            m_repeatSummaries.push_back(std::move(*summary));
            // Its curves too: the charts draw each lane's band across the repeats.
            m_race->keepRepeat();
        }
        if (m_repeatIndex < m_repeatTotal && !m_stopRequested && !m_closing) {
            ++m_repeatIndex;
            if (startRepeat()) {
                statusBar()->showMessage(tr("Repeat %1 of %2…").arg(m_repeatIndex).arg(m_repeatTotal));
                updateActions();
                return;
            }
        }
        if (m_repeatSummaries.size() < 2) {
            m_repeatText =
                tr("stopped in repeat %1 of %2: no spread from fewer than two").arg(m_repeatIndex).arg(m_repeatTotal);
            m_dashboard->setRepeatNote(m_repeatText);
        } else {
            m_repeatText = verdictText(summarizeRepeats(m_repeatSummaries));
            m_dashboard->setRepeatNote(m_repeatText);
        }
    }
    updateActions();
    statusBar()->showMessage(tr("Race finished"));
    Q_EMIT raceFinished();
}

void MainWindow::applyTheme(bool dark) {
    applyApplicationTheme(dark);
    m_darkApplied = dark;
    m_dashboard->setDark(dark);
}

void MainWindow::setPresentationDark(bool dark) {
    m_presentationDark = dark;
    if (m_presentation) {
        applyTheme(dark);
    }
}

void MainWindow::setDarkTheme(bool dark) {
    m_dark = dark;
    {
        const QSignalBlocker block(m_darkAction);
        m_darkAction->setChecked(dark);
    }
    if (!m_presentation) {
        applyTheme(dark);
    }
}

QList<QAction*> MainWindow::laneActions(int lane) {
    QList<QAction*> out;
    if (!m_race->running() || lane < 0 || lane >= static_cast<int>(m_race->histories().size())) {
        return out;
    }
    const auto state = m_race->histories()[static_cast<std::size_t>(lane)].state;
    if (isTerminal(state)) {
        return out;
    }
    const QString name = m_race->lanes()[static_cast<std::size_t>(lane)].name;
    auto* pause = new QAction(state == LaneState::Paused ? tr("Resume %1").arg(name) : tr("Pause %1").arg(name));
    connect(pause, &QAction::triggered, this,
            [this, lane, paused = state == LaneState::Paused] { m_race->setLanePaused(lane, !paused); });
    auto* stop = new QAction(tr("Stop %1").arg(name));
    connect(stop, &QAction::triggered, this, [this, lane] { m_race->stopLane(lane); });
    out << pause << stop;
    return out;
}

void MainWindow::setPresentation(bool on) {
    if (on == m_presentation) {
        return;
    }
    m_presentation = on;
    {
        const QSignalBlocker block(m_present);
        m_present->setChecked(on);
    }
    if (on) {
        // Everything presentation mode changes is put back exactly when it ends.
        m_splitterBefore = m_splitter->saveState();
        m_geometryBefore = geometry();
        m_wasMaximized = isMaximized();
    }
    m_setup->setVisible(!on && m_setupAction->isChecked());
    m_toolbar->setVisible(!on);
    m_themeKey->setEnabled(on);
    statusBar()->setVisible(!on);
    const QScreen* s = screen() ? screen() : QGuiApplication::primaryScreen();
    const double scale = s ? std::clamp(s->geometry().height() / kPresentationPixelsPerScale, 1.2, 3.0) : 1.5;
    m_dashboard->setPresentation(on, on ? scale : 1.0);
    applyTheme(on ? m_presentationDark : m_dark);
    updateTitle();
    if (on) {
        showFullScreen();
    } else {
        if (m_wasMaximized) {
            showMaximized();
        } else {
            showNormal();
            setGeometry(m_geometryBefore);
        }
        m_splitter->restoreState(m_splitterBefore);
    }
}

void MainWindow::showError(const QString& message) {
    m_lastError = message;
    statusBar()->showMessage(message, 15000);
    if (QApplication::platformName() != QStringLiteral("offscreen") && isVisible()) {
        QMessageBox::warning(this, tr("DeviceRace"), message);
    }
}

void MainWindow::closeEvent(QCloseEvent* event) {
    // Never destroy running lanes: ask them to stop, show it, close once they have (bounded).
    if (m_race->running() && !m_closeTimer.isActive() && m_closeTicks == 0) {
        m_closing = true;
        m_race->stop();
        statusBar()->showMessage(tr("Stopping…"));
        updateActions();
        m_closeTimer.start();
        event->ignore();
        return;
    }
    if (m_closeTimer.isActive()) {
        event->ignore();
        return;
    }
    if (!m_race->finished()) {
        // A lane did not stop in time (e.g. blocked in a data load): leave without joining it.
        std::fflush(nullptr);
        std::_Exit(0);
    }
    saveSettings();
    event->accept();
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
    if (event->type() == QEvent::KeyPress) {
        const auto* key = static_cast<QKeyEvent*>(event);
        const auto* target = qobject_cast<QWidget*>(watched);
        if (key->key() == Qt::Key_Space && key->modifiers() == Qt::NoModifier && target && target->window() == this &&
            !typesText(QApplication::focusWidget())) {
            if (!key->isAutoRepeat()) {
                m_space->trigger();
            }
            return true;
        }
    }
    return QMainWindow::eventFilter(watched, event);
}

} // namespace devicerace::ui
