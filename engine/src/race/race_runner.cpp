#include "devicerace/race_runner.h"

#include <fmt/format.h>

#include <exception>
#include <utility>

#include "devicerace/race.h"
#include "devicerace/recording.h"

namespace devicerace {

void SampleInbox::samples(LaneBatch batch) {
    std::lock_guard lock(m_mutex);
    m_batches.push_back(std::move(batch));
}

void SampleInbox::recordingStopped(const std::string& why) {
    std::lock_guard lock(m_mutex);
    m_failure = why;
}

std::vector<LaneBatch> SampleInbox::take() {
    std::lock_guard lock(m_mutex);
    return std::exchange(m_batches, {});
}

std::string SampleInbox::takeRecordingFailure() {
    std::lock_guard lock(m_mutex);
    return std::exchange(m_failure, {});
}

RaceRunner::RaceRunner(Race& race, RaceFront& front, const std::filesystem::path& recordDir,
                       std::chrono::milliseconds period)
    : m_race(race), m_front(front), m_period(period) {
    if (!recordDir.empty()) {
        m_recorder = std::make_unique<RecordingWriter>(recordDir, race);
        m_files = m_recorder->laneFiles();
        m_recording = true;
    }
}

RaceRunner::~RaceRunner() {
    {
        std::lock_guard lock(m_mutex);
        m_halt = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) {
        m_thread.join();
    }
}

void RaceRunner::start() {
    m_race.start();
    m_thread = std::thread([this] { loop(); });
}

void RaceRunner::sync() {
    std::unique_lock lock(m_mutex);
    if (!m_thread.joinable() || m_halt) {
        return;
    }
    const std::uint64_t ticket = ++m_requested;
    m_wake.notify_all();
    m_polled.wait(lock, [&] { return m_completed >= ticket || m_halt || m_done; });
}

bool RaceRunner::done() const {
    std::lock_guard lock(m_mutex);
    return m_done;
}

void RaceRunner::halt() {
    {
        std::lock_guard lock(m_mutex);
        m_halt = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) {
        m_thread.join();
    }
}

bool RaceRunner::recording() const {
    std::lock_guard lock(m_mutex);
    return m_recording;
}

bool RaceRunner::pollOnce() {
    // Read before taking samples: nothing follows a final state, so a finished race's last
    // samples are in this poll.
    const bool finished = m_race.finished();
    const auto lanes = m_race.lanes();
    for (std::size_t i = 0; i < lanes.size(); ++i) {
        LaneBatch batch{i, lanes[i]->takeSamples(), 0};
        if (batch.samples.empty()) {
            continue;
        }
        if (m_recorder) {
            try {
                for (; batch.recorded < batch.samples.size(); ++batch.recorded) {
                    m_recorder->append(batch.samples[batch.recorded]);
                }
            } catch (const std::exception& e) {
                m_recorder.reset();
                {
                    std::lock_guard lock(m_mutex);
                    m_recording = false;
                }
                m_front.recordingStopped(e.what());
            }
        }
        m_front.samples(std::move(batch));
    }
    return finished;
}

void RaceRunner::loop() {
    std::unique_lock lock(m_mutex);
    while (!m_halt) {
        const std::uint64_t asked = m_requested;
        lock.unlock();
        const bool finished = pollOnce();
        lock.lock();
        m_completed = asked;
        if (finished) {
            m_recorder.reset(); // closes the lane files
            m_done = true;
            m_polled.notify_all();
            return;
        }
        m_polled.notify_all();
        m_wake.wait_for(lock, m_period, [&] { return m_halt || m_requested != asked; });
    }
    m_polled.notify_all();
}

} // namespace devicerace
