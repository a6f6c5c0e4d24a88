#pragma once
/// Runs a race for a front — the CLI's live table, the window's charts, a test's fake: polls
/// every lane on a thread of its own, appends each sample to the recording there (a slow or full
/// disk never stalls the front), and hands the samples to the front in batches. The one place
/// both fronts take samples from, whatever kind of lane a race holds.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "devicerace/metric_sample.h"

namespace devicerace {

class Race;
class RecordingWriter;

/// One lane's samples since the last batch, in the order the lane emitted them. The first
/// `recorded` of them reached the recording (all when recording; none when not, or after the
/// recording stopped): a front that exports keeps only the others in memory.
struct LaneBatch {
    std::size_t lane = 0; // in the race's lane order
    std::vector<MetricSample> samples;
    std::size_t recorded = 0;
};

/// What a runner hands over. Called on the runner's thread, one call at a time.
class RaceFront {
public:
    virtual ~RaceFront() = default;
    virtual void samples(LaneBatch batch) = 0;
    /// The recording failed and stopped (the race goes on): the reason, naming the file.
    virtual void recordingStopped(const std::string& why) { (void)why; }
};

/// A front that keeps what the runner hands it until its owner takes it, on any thread (the
/// window's timer, the CLI's loop).
class SampleInbox : public RaceFront {
public:
    void samples(LaneBatch batch) override;
    void recordingStopped(const std::string& why) override;
    /// The batches since the last take, in arrival order.
    std::vector<LaneBatch> take();
    /// The recording's failure, once (empty when none or already taken).
    std::string takeRecordingFailure();

private:
    std::mutex m_mutex;
    std::vector<LaneBatch> m_batches;
    std::string m_failure;
};

class RaceRunner {
public:
    static constexpr std::chrono::milliseconds kDefaultPeriod{66}; // ~15 Hz: smooth to the eye

    /// Opens the recording in `recordDir` when one is named (throws Error naming the path, before
    /// anything runs). `race` and `front` outlive the runner.
    RaceRunner(Race& race, RaceFront& front, const std::filesystem::path& recordDir = {},
               std::chrono::milliseconds period = kDefaultPeriod);
    ~RaceRunner(); // polling ends (the race is not stopped)
    RaceRunner(const RaceRunner&) = delete;
    RaceRunner& operator=(const RaceRunner&) = delete;

    /// Starts the race and the polling thread.
    void start();
    /// Wakes the polling thread and waits until it has handed over everything the lanes had
    /// emitted when this was called (tests, a window about to close).
    void sync();
    /// The race finished and the front has every sample it emitted.
    bool done() const;
    /// Ends polling now (a race left behind at exit); the front gets nothing more.
    void halt();

    /// The recording's lane files in the race's lane order (empty when not recording).
    const std::vector<std::filesystem::path>& recordedFiles() const { return m_files; }
    bool recording() const;
    /// The thread that polls the lanes and writes the recording.
    std::thread::id pollingThread() const { return m_thread.get_id(); }

private:
    void loop();
    bool pollOnce(); // true once the race has finished and the last samples are out
    Race& m_race;
    RaceFront& m_front;
    std::unique_ptr<RecordingWriter> m_recorder; // polling thread only, once started
    std::vector<std::filesystem::path> m_files;
    std::chrono::milliseconds m_period;
    mutable std::mutex m_mutex;
    std::condition_variable m_wake, m_polled;
    std::uint64_t m_requested = 0, m_completed = 0; // sync(): polls asked for and polls done
    bool m_done = false, m_halt = false, m_recording = false;
    std::thread m_thread;
};

} // namespace devicerace
