#include "race_controller.h"

#include <thread>

#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/repeats.h"
#include "devicerace/workload.h"
#include "background_task.h"
#include "charts/palette.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace devicerace::ui {

namespace {
// The GUI's polling period: ~15 Hz is smooth to the eye and costs the lanes nothing.
constexpr int kPollMs = 66;
} // namespace

RaceController::RaceController(QObject* parent) : QObject(parent) {
    m_timer.setInterval(kPollMs);
    connect(&m_timer, &QTimer::timeout, this, &RaceController::collect);
}

RaceController::~RaceController() {
    m_timer.stop();
    m_runner.reset(); // polls no more: then the race it polls can go
    m_race.reset();   // requests stop and joins every lane
}

bool RaceController::start(const RaceSpec& spec, const std::vector<QColor>& colors, const QString& recordDir,
                           LaneFactory factory) {
    if (m_settingUp) {
        return false; // one race set up at a time
    }
    // Building a race loads data and, for worker lanes, starts processes, connects over ssh and
    // waits for each worker's hello (seconds; up to ssh's 10 s connect timeout): on a thread of
    // its own. The GUI thread goes on serving every event (no nested event loop); the race
    // starts when it is built (started()), or failed() says why not.
    m_settingUp = true;
    m_cancelSetup = false;
    struct Built {
        std::shared_ptr<std::unique_ptr<Race>> race = std::make_shared<std::unique_ptr<Race>>();
        QString error;
    };
    runInBackground(
        this,
        [spec, factory = std::move(factory)]() mutable {
            Built built;
            try {
                *built.race = std::make_unique<Race>(spec, std::move(factory));
            } catch (const std::exception& e) {
                built.error = QString::fromStdString(e.what());
            } catch (...) {
                built.error = tr("the race could not be set up");
            }
            return built;
        },
        [this, colors, recordDir](Built built) {
            m_settingUp = false;
            if (m_cancelSetup || !built.error.isEmpty()) {
                // A race stopped while being set up is dropped here: its lanes never started.
                const QString why =
                    m_cancelSetup ? tr("stopped while the race was being set up: no lane ran") : built.error;
                Q_EMIT failed(why);
                Q_EMIT setupFailed(why);
                return;
            }
            begin(std::move(*built.race), colors, recordDir);
        });
    Q_EMIT settingUp();
    return true;
}

void RaceController::begin(std::unique_ptr<Race> race, const std::vector<QColor>& colors, const QString& recordDir) {
    m_timer.stop();
    m_runner.reset();
    m_race = std::move(race);
    m_inbox = std::make_unique<SampleInbox>(); // nothing of the last race's left in it
    m_recordDir.clear();
    m_recordedFiles.clear();
    // The runner polls the lanes and writes the recording off the GUI thread (a slow disk never
    // stalls the window); the timer only takes the batches it handed over.
    if (!recordDir.isEmpty()) {
        try {
            m_runner = std::make_unique<RaceRunner>(*m_race, *m_inbox, recordDir.toStdString());
            m_recordDir = recordDir;
            m_recordedFiles = m_runner->recordedFiles();
        } catch (const std::exception& e) {
            Q_EMIT failed(tr("not recording: %1").arg(QString::fromStdString(e.what())));
        }
    }
    if (!m_runner) {
        m_runner = std::make_unique<RaceRunner>(*m_race, *m_inbox);
    }
    m_lanes.clear();
    m_histories.clear();
    m_unrecorded.clear();
    m_paused = false;
    m_announcedFinish = false;
    int i = 0;
    for (auto* lane : m_race->lanes()) {
        LaneInfo info;
        info.name = QString::fromStdString(lane->spec().name);
        // Remote lanes carry their host wherever the device shows ("gpubox/cuda:0").
        const auto& ls = lane->spec();
        info.device = QString::fromStdString(ls.launcher == "slurm"    ? "slurm/" + ls.device
                                             : ls.launcher == "attach" ? ls.launcherTarget + "/" + ls.device
                                             : ls.host.empty()         ? ls.device
                                                               : parseSshTarget(ls.host).host + "/" + ls.device);
        info.launched = !ls.launcher.empty();
        info.color = i < static_cast<int>(colors.size()) ? colors[static_cast<std::size_t>(i)] : laneColor(i);
        info.totalSteps = lane->totalSteps();
        info.batch = lane->batch();
        info.costPerHour = lane->spec().costPerHour;
        info.energyCounter =
            m_race->spec().fair ? "lane " + std::to_string(i) : "live|" + energyCounter(ls.host, ls.device);
        m_lanes.push_back(info);
        m_histories.emplace_back();
        m_histories.back().costPerHour = info.costPerHour;
        ++i;
    }
    m_liveLanes = m_lanes.size();
    rebuildReplays();
    m_replayTime = -1; // recordings race from the start beside the live lanes
    m_runner->start();
    m_timer.start();
    Q_EMIT started();
}

bool RaceController::addRecording(const QString& dir, QString* error) {
    std::shared_ptr<const Recording> rec;
    std::map<std::string, std::vector<LaneHistory>> earlier; // a repeat set's earlier repeats
    try {
        const auto repeats = repeatSetFolders(dir.toStdString());
        rec = std::make_shared<Recording>(
            readRecording(repeats.empty() ? std::filesystem::path(dir.toStdString()) : repeats.back()));
        std::vector<RaceSummary> summaries;
        for (std::size_t r = 0; r + 1 < repeats.size(); ++r) {
            const auto repeat = readRecording(repeats[r]);
            summaries.push_back(summarizeRecording(repeat));
            for (auto& [lane, history] : historiesOf(repeat)) {
                earlier[lane].push_back(std::move(history));
            }
        }
        if (!summaries.empty()) {
            summaries.push_back(summarizeRecording(*rec));
            m_openedRepeats = summarizeRepeats(std::move(summaries));
        }
    } catch (const std::exception& e) {
        if (error) {
            *error = QString::fromStdString(e.what());
        }
        Q_EMIT failed(QString::fromStdString(e.what()));
        return false;
    }
    m_recordings.push_back(rec);
    if (!earlier.empty()) {
        m_recordedRepeats[rec.get()] = std::move(earlier);
        ++m_bandGeneration;
    }
    if (!m_race) {
        m_lanes.clear();
        m_histories.clear();
        m_liveLanes = 0;
    }
    m_lanes.resize(m_liveLanes);
    m_histories.resize(m_liveLanes);
    rebuildReplays();
    // Shown complete until a start() or replayRecordings() plays it from the beginning.
    m_replayTime = std::numeric_limits<double>::infinity();
    m_announcedFinish = false;
    m_timer.start();
    Q_EMIT started();
    return true;
}

void RaceController::replayRecordings() {
    if (m_recordings.empty()) {
        return;
    }
    m_lanes.resize(m_liveLanes);
    m_histories.resize(m_liveLanes);
    rebuildReplays();
    m_replayTime = -1;
    m_paused = false;
    m_announcedFinish = false;
    m_timer.start();
    Q_EMIT started();
}

bool RaceController::replaying() const { return !m_replays.empty() && !replayDone(); }

void RaceController::clearRecordings() {
    m_recordings.clear();
    m_recordedRepeats.clear();
    m_openedRepeats.reset();
    ++m_bandGeneration;
    m_lanes.resize(m_liveLanes);
    m_histories.resize(m_liveLanes);
    m_replays.clear();
    Q_EMIT started();
}

void RaceController::setReplaySpeed(double speed) { m_replaySpeed = speed; }

QColor RaceController::unusedColor() const {
    // The first palette colour no lane has yet: a recorded lane never looks like a live one.
    for (int i = 0; i < 64; ++i) {
        const QColor c = laneColor(i);
        if (std::none_of(m_lanes.begin(), m_lanes.end(), [&](const LaneInfo& l) { return l.color == c; })) {
            return c;
        }
    }
    return laneColor(static_cast<int>(m_lanes.size()));
}

void RaceController::rebuildReplays() {
    m_replays.clear();
    int recIndex = 0;
    for (const auto& rec : m_recordings) {
        ++recIndex;
        const QString date = QString::fromStdString(rec->startedAt).left(10);
        for (const auto& lane : rec->lanes) {
            LaneInfo info;
            info.recorded = true;
            // Recorded lanes say so, with their device and date.
            QString device = QString::fromStdString(lane.device);
            if (lane.device.starts_with("cuda") && !rec->gpuNames.empty()) {
                device += QStringLiteral(" ") + QString::fromStdString(rec->gpuNames);
            }
            // Short names (they head legends and the strip); the date goes with the device.
            info.name = QString::fromStdString(lane.name) + tr(" (rec)");
            info.device = device + tr(" (recorded %1)").arg(date);
            info.color = unusedColor();
            info.totalSteps = lane.totalSteps;
            info.batch = lane.batch;
            info.costPerHour = lane.costPerHour;
            info.energyCounter = "rec " + std::to_string(recIndex) + "|" +
                                 (rec->fair ? lane.name : energyCounter(lane.host, lane.device));
            Replay replay;
            replay.recording = rec;
            replay.lane = lane.name;
            replay.index = m_lanes.size();
            m_replays.push_back(std::move(replay));
            m_lanes.push_back(info);
            m_histories.emplace_back();
            m_histories.back().costPerHour = info.costPerHour;
        }
    }
    m_replayClock.start();
    m_pausedMs = 0;
    m_replayStopped = false;
}

bool RaceController::feedReplays() {
    if (m_replayStopped) {
        return false;
    }
    if (m_paused && m_replayTime < 0) {
        return false;
    }
    const double t = m_replayTime >= 0 ? m_replayTime
                     : m_replaySpeed <= 0
                         ? 1e300
                         : static_cast<double>(m_replayClock.elapsed() - m_pausedMs) / 1000.0 * m_replaySpeed;
    bool changed = false;
    for (auto& r : m_replays) {
        const auto& samples = r.recording->samples.at(r.lane);
        while (r.next < samples.size() && samples[r.next].time <= t) {
            m_histories[r.index].append(samples[r.next]);
            ++r.next;
            changed = true;
        }
    }
    return changed;
}

QStringList RaceController::recordingDirs() const {
    QStringList out;
    for (const auto& rec : m_recordings) {
        out << QString::fromStdString(rec->dir.string());
    }
    return out;
}

double RaceController::replayLength() const {
    double end = 0;
    for (const auto& r : m_replays) {
        for (const auto& s : r.recording->samples.at(r.lane)) { // the latest, wherever it is in the file
            end = std::max(end, s.time);
        }
    }
    return end;
}

bool RaceController::replayDone() const {
    if (m_replayStopped) {
        return true;
    }
    for (const auto& r : m_replays) {
        if (r.next < r.recording->samples.at(r.lane).size()) {
            return false;
        }
    }
    return true;
}

void RaceController::stop() {
    if (m_settingUp) {
        m_cancelSetup = true; // dropped once built (a worker's hello cannot be interrupted)
    }
    if (m_race) {
        m_race->requestStop();
    }
    if (replaying()) {
        m_replayStopped = true; // recorded lanes stop where they are, like the live ones
        // ... and say so: a lane cut off mid-replay is stopped, not "running · ETA".
        for (const auto& r : m_replays) {
            auto& h = m_histories[r.index];
            if (r.next < r.recording->samples.at(r.lane).size() && !isTerminal(h.state)) {
                MetricSample s;
                s.kind = SampleKind::State;
                s.lane = r.lane;
                s.state = LaneState::Stopped;
                s.step = h.lastStep;
                s.time = h.lastTime;
                s.message = "replay stopped at step " + std::to_string(h.lastStep);
                h.append(s);
            }
        }
        m_timer.start(); // the next poll announces the finish
    }
}

void RaceController::setPaused(bool paused) {
    if (!m_race && !replaying()) {
        return;
    }
    if (paused != m_paused && m_replayClock.isValid()) {
        // Recorded lanes pause with the live ones: their clock skips the paused time.
        if (paused) {
            m_pausedSince = m_replayClock.elapsed();
        } else {
            m_pausedMs += m_replayClock.elapsed() - m_pausedSince;
        }
    }
    m_paused = paused;
    if (m_race) {
        m_race->setPaused(paused);
    }
}

void RaceController::setLanePaused(int lane, bool paused) {
    if (m_race && lane >= 0 && lane < static_cast<int>(m_lanes.size())) {
        m_race->lanes()[static_cast<std::size_t>(lane)]->setPaused(paused);
    }
}

void RaceController::stopLane(int lane) {
    if (m_race && lane >= 0 && lane < static_cast<int>(m_lanes.size())) {
        m_race->lanes()[static_cast<std::size_t>(lane)]->requestStop();
    }
}

std::vector<double> RaceController::laneCpuSeconds() const {
    std::vector<double> out;
    if (m_race) {
        for (auto* lane : m_race->lanes()) {
            out.push_back(lane->cpuSeconds());
        }
    }
    return out;
}

bool RaceController::running() const { return m_race && !m_race->finished(); }
bool RaceController::finished() const { return !m_race || m_race->finished(); }
bool RaceController::liveSamplesTaken() const { return !m_runner || m_runner->done(); }

// A Slurm job's lane learns its steps, batch, job id and nodes once the job runs.
void RaceController::refreshLaunched(LaneInfo& info, const Lane& lane) {
    info.totalSteps = lane.totalSteps();
    info.batch = lane.batch();
    const auto s = lane.summary();
    if (!s.job.empty() || !s.nodes.empty()) {
        info.job = tr("job %1 · %2 ranks on %3")
                       .arg(QString::fromStdString(s.job.empty() ? std::string("?") : s.job))
                       .arg(s.workers)
                       .arg(QString::fromStdString(s.nodes.empty() ? std::string("?") : s.nodes));
    }
    info.settled = !s.nodes.empty(); // rank 0's ready came: steps, batch and nodes are final
}

void RaceController::poll() {
    if (m_runner) {
        m_runner->sync(); // everything the lanes emitted so far is in the inbox
    }
    collect();
}

void RaceController::collect() {
    // Read before taking batches: the runner is done only once the last ones are handed over.
    const bool done = liveSamplesTaken() && replayDone();
    bool changed = feedReplays();
    if (m_race && m_inbox) {
        auto lanes = m_race->lanes();
        for (std::size_t i = 0; i < lanes.size() && i < m_lanes.size(); ++i) {
            if (m_lanes[i].launched && !m_lanes[i].settled && !isTerminal(lanes[i]->state())) {
                refreshLaunched(m_lanes[i], *lanes[i]);
            }
        }
        if (auto why = m_inbox->takeRecordingFailure(); !why.empty()) {
            Q_EMIT failed(tr("recording stopped: %1 (the race goes on)").arg(QString::fromStdString(why)));
        }
        for (auto& batch : m_inbox->take()) {
            for (const auto& s : batch.samples) {
                m_histories[batch.lane].append(s);
            }
            changed = changed || !batch.samples.empty();
            // Memory keeps only what the recording lacks (every sample when not recording).
            m_unrecorded.insert(
                m_unrecorded.end(),
                std::make_move_iterator(batch.samples.begin() + static_cast<std::ptrdiff_t>(batch.recorded)),
                std::make_move_iterator(batch.samples.end()));
        }
    }
    if (changed) {
        Q_EMIT updated();
    }
    if (done && !m_announcedFinish) {
        m_announcedFinish = true;
        m_timer.stop();
        Q_EMIT finishedRace();
    }
}

void RaceController::writeCsv(const QString& path) const {
    writeSamplesCsv(m_recordedFiles, m_unrecorded, path.toStdString());
}

std::optional<RaceSummary> RaceController::summary() const {
    if (!m_race && m_recordings.empty()) {
        return std::nullopt;
    }
    RaceSummary out;
    if (m_race) {
        out = m_race->summary();
    }
    // Recorded lanes: the summary of what has been played back so far. Their devices stay the
    // engine's ("cpu", "cuda:0") until every figure is made: the explanations tell a CPU from a
    // GPU by them. Then they read as the window shows them ("cpu (recorded 2026-11-29)").
    std::vector<std::pair<std::size_t, std::string>> shownDevices;
    // The run each lane is from: its recording, or none for the live race's lanes.
    std::vector<const Recording*> runOf(out.lanes.size(), nullptr);
    const bool liveFair = out.fair;
    for (const auto& r : m_replays) {
        for (const auto& lane : r.recording->lanes) {
            if (lane.name == r.lane) {
                const auto& samples = r.recording->samples.at(lane.name);
                if (r.next < r.summarized) { // played again from the start
                    r.running = {};
                    r.summarized = 0;
                }
                for (; r.summarized < std::min(r.next, samples.size()); ++r.summarized) {
                    r.running.add(samples[r.summarized]);
                }
                auto l = summarizeRecordedLane(*r.recording, lane, r.running, r.summarized);
                l.name = m_lanes[r.index].name.toStdString();
                shownDevices.emplace_back(out.lanes.size(), m_lanes[r.index].device.toStdString());
                out.lanes.push_back(std::move(l));
                runOf.push_back(r.recording.get());
            }
        }
    }
    if (!m_replays.empty()) { // live and recorded lanes side by side: one set of figures
        out.fair = m_race ? out.fair : fair();
        out.workload = workload().toStdString();
        finishRaceSummary(out); // speedups, costs, scaling, tokens/s over every lane
        // Why a lane is slower, only between lanes of one run: lanes recorded on another machine
        // (or at another time) differ for reasons no figure here measures.
        out.explanations.clear();
        std::vector<const Recording*> explained;
        for (const Recording* run : runOf) {
            if (std::find(explained.begin(), explained.end(), run) != explained.end()) {
                continue;
            }
            explained.push_back(run);
            std::vector<LaneSummary> lanes;
            for (std::size_t i = 0; i < out.lanes.size(); ++i) {
                if (runOf[i] == run) {
                    lanes.push_back(out.lanes[i]);
                }
            }
            for (auto& why : explainSlowerLanes(lanes, run ? run->fair : liveFair, out.workload)) {
                out.explanations.push_back(std::move(why));
            }
        }
        for (const auto& l : out.lanes) {
            if (!l.slowestRank.empty()) {
                out.explanations.push_back(l.name + ": " + l.slowestRank); // as finishRaceSummary words it
            }
        }
        for (auto& why : explainUnmeasuredLanes(out.lanes)) { // each lane's own: any run
            out.explanations.push_back(std::move(why));
        }
    }
    for (auto& [index, device] : shownDevices) {
        out.lanes[index].device = std::move(device);
    }
    return out;
}

QString RaceController::datasetLabel() const {
    if (!m_race) {
        // Only recordings: what the first one raced on.
        if (m_recordings.empty()) {
            return {};
        }
        const auto& rec = *m_recordings.front();
        return QString::fromStdString(rec.dataset) + (rec.synthetic ? tr(" (synthetic, recorded)") : tr(" (recorded)"));
    }
    const auto& ds = m_race->dataset();
    return QString::fromStdString(ds.name) +
           (ds.synthetic ? QStringLiteral(" (synthetic)") : QStringLiteral(" (real)"));
}

bool RaceController::fair() const {
    return m_race ? m_race->spec().fair : !m_recordings.empty() && m_recordings.front()->fair;
}

std::int64_t RaceController::tokensPerSample() const { return tokensPerSampleOf(workload().toStdString()); }

QString RaceController::workload() const {
    if (m_race) {
        return QString::fromStdString(m_race->spec().workload);
    }
    return m_recordings.empty() ? QString() : QString::fromStdString(m_recordings.front()->workload);
}
QString RaceController::command() const {
    const auto& words = m_race ? m_race->spec().command
                               : (m_recordings.empty() ? std::vector<std::string>{} : m_recordings.front()->command);
    QStringList out;
    for (const auto& w : words) {
        QString word = QString::fromStdString(w);
        // The program and a script by their file names (what a presenter says: "accelerate
        // launch train.py", not the virtual environment's path); the rest as typed.
        if ((out.isEmpty() || word.endsWith(QStringLiteral(".py"))) && word.contains(QLatin1Char('/')) &&
            !word.startsWith(QLatin1Char('-'))) {
            word = word.mid(word.lastIndexOf(QLatin1Char('/')) + 1);
        }
        out << word;
    }
    return out.join(QLatin1Char(' '));
}
std::int64_t RaceController::warmupSteps() const { return m_race ? m_race->spec().warmupSteps : 0; }
std::optional<double> RaceController::targetAccuracy() const {
    // A race to a validation loss (--target-loss) has no accuracy target: its time to target is
    // the engine's (the summary table), never projected from accuracy.
    if (m_race) {
        return m_race->spec().targetLoss ? std::nullopt : m_race->spec().targetAccuracy;
    }
    // Only recordings: their own target (the first that has one).
    for (const auto& rec : m_recordings) {
        if (rec->targetLoss) {
            return std::nullopt;
        }
        if (rec->targetAccuracy) {
            return rec->targetAccuracy;
        }
    }
    return std::nullopt;
}

} // namespace devicerace::ui
