#pragma once
// The race window: assembles the setup panel, the dashboard and the toolbar, and wires
// Start / Pause / Stop, presentation mode, export and settings. Holds no race logic of its
// own (RaceController does). GUI thread only.
#include <QMainWindow>
#include <QTimer>

#include "devicerace/lane_spec.h"
#include "devicerace/race.h"
#include "devicerace/repeats.h"

class QAction;
class QToolBar;
class QSplitter;

namespace devicerace::ui {

class Dashboard;
class RaceController;
class SetupPanel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    SetupPanel* setupPanel() const { return m_setup; }
    Dashboard* dashboard() const { return m_dashboard; }
    RaceController* race() const { return m_race; }

    /// Starts the race set up in the panel; false (and a message) on bad input.
    /// Checks the setup (the engine's plan) and starts setting the race up off the GUI thread;
    /// false (and lastError()) when the plan refuses it or the user declines a command.
    bool startRace();
    /// The status bar's ready line: the lanes Start would race, by name.
    void showReady();
    /// The lanes Start would race, named as the race will name them ("" while a lane is half-edited).
    QStringList plannedLaneNames() const;
    /// Asks before a race runs cmd= programs; sets spec.allowCommands. False: not consented.
    bool confirmCommands(RaceSpec& spec);
    void stopRace();
    void setPaused(bool paused);
    void setPresentation(bool on);
    void setDarkTheme(bool dark);
    bool darkTheme() const { return m_dark; }
    /// Presentation mode's own theme (dark by default; light for bright rooms).
    void setPresentationDark(bool dark);
    bool presentationDark() const { return m_presentationDark; }
    /// The per-lane actions offered on a right-click in the race strip.
    QList<QAction*> laneActions(int lane);
    bool presentation() const { return m_presentation; }
    /// Exports; each returns an empty string on success, else the error shown to the user.
    QString exportDashboardPng(const QString& path, QSize size = {});
    QString exportDashboardSvg(const QString& path);
    QString exportCsv(const QString& path);
    QString exportJson(const QString& path);
    /// TensorBoard event files (one run folder per lane) from the race's recording and the
    /// recordings shown.
    QString exportTensorBoard(const QString& dir);
    QString lastError() const { return m_lastError; }
    /// Opens a recording beside the live lanes, drawn complete; it replays on Start.
    bool openRecording(const QString& dir);
    /// Plays the open recordings again from their start (alone).
    void replayRecordings();
    void setReplaySpeed(double speed);
    /// Races are recorded into AppDataLocation/runs/ unless switched off; "" = default place.
    void setRecording(bool on, const QString& dir = {});
    bool recording() const { return m_record; }
    /// The repeats' verdict after the last one ("" for a single race): each lane's speedup as
    /// "1.93× ± 0.04 (N = 5)", noise called noise.
    QString repeatSummaryText() const { return m_repeatText; }
    /// Resizes the window, kept inside the screen's available area.
    void setInitialSize(QSize size);
    /// Restores the last race and layout from QSettings (false when there is no race saved).
    bool restoreSettings();
    /// Restores the window's own settings alone (its geometry and theme), not the race: a window
    /// opened with a race on its command line keeps the user's theme.
    void restoreWindowSettings();
    void saveSettings() const;
    /// Off: the window leaves QSettings as they were (a --screenshot run must not replace the
    /// user's last race, geometry or theme with its own).
    void setSavesSettings(bool on) { m_savesSettings = on; }

Q_SIGNALS:
    void raceFinished();
    /// The race Start set up could not run (bad data, a worker that did not answer): the
    /// message is lastError() too.
    void startFailed(const QString& message);

protected:
    void closeEvent(QCloseEvent* event) override;
    /// Space starts, pauses and resumes from anywhere in the window, unless a text field has focus.
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void buildToolbar();
    void updateActions();
    void updateTitle();
    void showError(const QString& message);
    void onFinished();
    void applyTheme(bool dark);
    /// Keeps the window inside the screen's available area (restored geometry included).
    void fitToScreen();

    RaceController* m_race = nullptr;
    SetupPanel* m_setup = nullptr;
    Dashboard* m_dashboard = nullptr;
    QSplitter* m_splitter = nullptr;
    QAction* m_start = nullptr;
    QAction* m_pause = nullptr;
    QAction* m_stop = nullptr;
    QAction* m_present = nullptr;
    QAction* m_replay = nullptr;
    QAction* m_setupAction = nullptr;
    QAction* m_removeRecorded = nullptr;
    QTimer m_slowTimer; // ~2 Hz: summary table and device figures
    QTimer m_closeTimer;
    int m_closeTicks = 0;
    bool m_closing = false;
    bool m_presentation = false;
    bool m_dark = false;
    bool m_presentationDark = true;
    bool m_savesSettings = true;
    bool m_darkApplied = false; // the application palette is dark (set back when the window goes)
    QAction* m_space = nullptr;
    QAction* m_themeKey = nullptr;
    bool m_record = true;
    QString m_recordDir;
    QAction* m_recordAction = nullptr;
    QAction* m_darkAction = nullptr;
    std::vector<double> m_lastLaneCpu;
    bool m_wasMaximized = false;
    QToolBar* m_toolbar = nullptr;
    QByteArray m_splitterBefore; // the layout to restore when presentation ends
    QRect m_geometryBefore;
    QString m_lastError;
    // Repeats: the race again with fresh lanes until m_repeatTotal have run.
    int m_repeatTotal = 1, m_repeatIndex = 1;
    bool m_stopRequested = false; // Stop ends the repeats too
    RaceSpec m_repeatSpec;
    QString m_repeatRecordBase;
    std::vector<RaceSummary> m_repeatSummaries;
    QString m_repeatText;
    bool startRepeat(); // the next repeat of m_repeatSpec
    /// "3 repeats: cpu·2 1.53× ± 0.08 (N = 3) · …" (live repeats and opened repeat sets).
    static QString verdictText(const RepeatSummary& repeats);
};

} // namespace devicerace::ui
