#pragma once
// Runs an engine race for the window: starts it through a RaceRunner (which polls the lanes
// and writes the recording on its own thread), takes the runner's batches on one ~15 Hz timer
// (lanes never wait for the GUI), keeps the full history, and says when it changed.
// GUI thread only.
#include <QColor>
#include <QObject>
#include <QStringList>
#include <QElapsedTimer>
#include <QTimer>

#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "devicerace/lane_spec.h"
#include "devicerace/race.h"
#include "devicerace/race_runner.h"
#include "devicerace/recording.h"
#include "devicerace/repeats.h"
#include "charts/repeat_band.h"
#include "model/lane_history.h"
#include "model/lane_info.h"

namespace devicerace::ui {

/// Each lane's whole history, from a recording's samples.
std::map<std::string, LaneHistory> historiesOf(const Recording& recording);

class RaceController : public QObject {
    Q_OBJECT
public:
    explicit RaceController(QObject* parent = nullptr);
    ~RaceController() override;

    /// Sets a race up off the GUI thread, then starts it: started() once its lanes run, or
    /// failed(message) when it cannot (bad input, missing data, a worker that does not answer).
    /// False only when a race is already being set up. With `recordDir`, the race is recorded
    /// there as it runs (a failure to record is reported through failed() and the race goes on).
    /// `factory` builds the lanes instead of the engine (benchmarks: synthetic sample sources).
    bool start(const RaceSpec& spec, const std::vector<QColor>& colors, const QString& recordDir = {},
               LaneFactory factory = {});
    /// Adds the lanes of a recording, shown complete at once (to look at); they replay from the
    /// start beside the live lanes on the next start(), or alone on replayRecordings(). False
    /// + `error` when the folder is not a readable recording. A repeat set (a folder of
    /// repeat-1 … repeat-N recordings, as --repeat and the window's repeats write) adds its last
    /// repeat, drawn with the band of all N.
    bool addRecording(const QString& dir, QString* error = nullptr);
    /// Plays the recorded lanes again from their start, at the replay speed.
    void replayRecordings();
    /// Removes the recorded lanes (the live ones stay).
    void clearRecordings();
    /// Recorded lanes still playing back.
    bool replaying() const;
    /// Playback speed of recordings: 1, 2, 10, ... or 0 for instantly.
    void setReplaySpeed(double speed);
    int recordingCount() const { return static_cast<int>(m_recordings.size()); }
    /// The folders of the recordings shown (for video export).
    QStringList recordingDirs() const;
    /// Plays recordings to lane time `seconds` on the next poll(), instead of by the wall clock
    /// (video export renders frame by frame); negative: back to the clock.
    void setReplayTime(double seconds) { m_replayTime = seconds; }
    /// The longest recorded lane's last sample time (seconds).
    double replayLength() const;
    QString recordDir() const { return m_recordDir; }
    /// The thread that writes the live race's recording (and polls its lanes): never the GUI's.
    std::thread::id recordingThread() const { return m_runner ? m_runner->pollingThread() : std::thread::id(); }
    /// Stops the race (or, while it is being set up, drops it once built: no lane runs).
    void stop();
    /// A race is being set up (start() was called; started() or failed() will follow).
    bool isSettingUp() const { return m_settingUp; }
    void setPaused(bool paused);
    void setLanePaused(int lane, bool paused);
    void stopLane(int lane);

    bool running() const;
    /// CPU seconds of each lane's own thread so far.
    std::vector<double> laneCpuSeconds() const; // started and not every lane finished
    bool paused() const { return m_paused; }
    bool hasRace() const { return m_race != nullptr; }
    /// Lanes still running after stop() (for a bounded shutdown).
    bool finished() const;
    /// Every recorded lane has been played to its end.
    bool replayDone() const;

    const std::vector<LaneInfo>& lanes() const { return m_lanes; }
    const std::vector<LaneHistory>& histories() const { return m_histories; }
    /// Writes every sample received so far as CSV to `path`: a recorded race's from its lane
    /// files on disk (streamed: an hours-long race is not held in memory), then those the
    /// recording missed (all of them when not recording). Throws Error.
    void writeCsv(const QString& path) const;
    /// Samples held in memory for the CSV export: only those not in the recording.
    std::size_t samplesInMemory() const { return m_unrecorded.size(); }
    std::optional<RaceSummary> summary() const;
    QString datasetLabel() const;
    /// The race's workload (or the first recording's when only recordings are shown).
    QString workload() const;
    /// A script race's command as the title shows it: the program and the script by their file
    /// names, the rest as typed (the live race's, or the first recording's).
    QString command() const;
    /// Language models: tokens scored per example (throughput shown in tokens/s); 0 otherwise
    /// or for a recording of a workload this build does not know.
    std::int64_t tokensPerSample() const;
    bool fair() const;
    std::int64_t warmupSteps() const;
    std::optional<double> targetAccuracy() const;

    /// Collects now every sample the lanes have emitted (waits for the race's runner to hand
    /// them over); the timer, ~15 times a second, takes what the runner has handed over.
    void poll();

    /// Repeats: keeps the live lanes' histories of the race just finished as one more
    /// repeat; the charts draw each lane's band across the kept repeats and the running one.
    void keepRepeat();
    /// Forgets the kept repeats (a new race, not a repeat of the last).
    void clearRepeats();
    int keptRepeats() const { return static_cast<int>(m_pastRepeats.size()); }
    /// Each lane's other repeats: the kept ones for live lanes, the earlier repeats of a repeat
    /// set for its recorded lanes.
    BandSources bandSources() const;
    /// The spread of the last repeat set opened (addRecording of a repeat-K folder), else nullopt.
    const std::optional<RepeatSummary>& openedRepeats() const { return m_openedRepeats; }

Q_SIGNALS:
    void settingUp(); // start() began building a race
    void started();
    void updated();
    void finishedRace();
    void failed(const QString& message);
    void setupFailed(const QString& message); // start() could not set the race up (also failed())

private:
    struct Replay {
        std::shared_ptr<const Recording> recording;
        std::string lane;
        std::size_t next = 0;
        std::size_t index = 0; // into m_lanes / m_histories
        // The summary of the samples played so far, fed as `next` advances (O(1) per refresh).
        mutable RunningSummary running;
        mutable std::size_t summarized = 0;
    };
    void collect();
    bool liveSamplesTaken() const; // no live race, or its runner handed over its last samples
    void begin(std::unique_ptr<Race> race, const std::vector<QColor>& colors, const QString& recordDir);
    void rebuildReplays();
    QColor unusedColor() const;
    bool feedReplays();
    std::unique_ptr<Race> m_race;
    std::unique_ptr<SampleInbox> m_inbox;
    std::unique_ptr<RaceRunner> m_runner; // polls m_race and records it; destroyed before m_race
    QString m_recordDir;
    std::vector<std::shared_ptr<const Recording>> m_recordings;
    // Kept repeats of the live race (each: the live lanes' histories), and the earlier repeats of
    // each opened repeat set (by recording, then lane name). Never modified once stored: the
    // charts hold pointers into them until the generation changes.
    std::vector<std::vector<LaneHistory>> m_pastRepeats;
    std::map<const Recording*, std::map<std::string, std::vector<LaneHistory>>> m_recordedRepeats;
    std::uint64_t m_bandGeneration = 0;
    std::optional<RepeatSummary> m_openedRepeats;
    std::vector<Replay> m_replays;
    double m_replaySpeed = 1.0;
    double m_replayTime = -1;     // >= 0: the replay position, set by the caller
    bool m_replayStopped = false; // Stop froze the playback where it was
    qint64 m_pausedMs = 0;        // replay clock time spent paused
    qint64 m_pausedSince = 0;
    QElapsedTimer m_replayClock;
    std::size_t m_liveLanes = 0;
    void refreshLaunched(LaneInfo& info, const Lane& lane);
    std::vector<LaneInfo> m_lanes;
    std::vector<LaneHistory> m_histories;
    std::vector<std::filesystem::path> m_recordedFiles; // the race's recording lane files
    std::vector<MetricSample> m_unrecorded;             // received while not recording (the CSV export)
    QTimer m_timer;
    bool m_paused = false;
    bool m_announcedFinish = false;
    bool m_settingUp = false;
    bool m_cancelSetup = false; // stop() while setting up
};

} // namespace devicerace::ui
