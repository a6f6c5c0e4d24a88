#include "lanes/lane_record.h"

#include <algorithm>
#include <chrono>

namespace devicerace::detail {

double unixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

void LaneRecord::push(MetricSample s) {
    if (s.wallTime == 0) {
        s.wallTime = unixNow();
    }
    std::lock_guard lock(m_mutex);
    if (s.kind == SampleKind::State) {
        m_state = s.state;
        if (!s.message.empty()) {
            m_message = s.message;
        }
    }
    m_running.add(s);
    if (s.kind != SampleKind::State || s.step > 0) {
        m_lastProgress = s;
    }
    m_history.push_back(s);
    if (m_history.size() > kHistoryLimit) {
        m_history.pop_front();
    }
    m_pending.push_back(std::move(s));
}

void LaneRecord::finish(LaneState state, std::string message) {
    MetricSample s;
    s.kind = SampleKind::State;
    s.lane = m_lane;
    s.state = state;
    s.message = std::move(message);
    s.wallTime = unixNow();
    {
        std::lock_guard lock(m_mutex);
        if (isTerminal(m_state)) {
            return;
        }
        if (const auto& it = m_lastProgress) {
            s.step = it->step;
            s.samples = it->samples;
            s.epoch = it->epoch;
            s.time = std::max(s.time, it->time);
            s.memoryBytes = it->memoryBytes;
        }
    }
    push(std::move(s));
}

bool LaneRecord::stopIfPending(const std::string& message) {
    std::lock_guard lock(m_mutex);
    if (m_state != LaneState::Pending) {
        return false;
    }
    m_state = LaneState::Stopped;
    m_message = message;
    return true;
}

std::vector<MetricSample> LaneRecord::take() {
    std::lock_guard lock(m_mutex);
    std::vector<MetricSample> out;
    out.swap(m_pending);
    return out;
}

std::vector<MetricSample> LaneRecord::history() const {
    std::lock_guard lock(m_mutex);
    return {m_history.begin(), m_history.end()};
}

LaneState LaneRecord::state() const {
    std::lock_guard lock(m_mutex);
    return m_state;
}

std::string LaneRecord::message() const {
    std::lock_guard lock(m_mutex);
    return m_message;
}

std::string LaneRecord::execution() const {
    std::lock_guard lock(m_mutex);
    return m_execution;
}

void LaneRecord::setExecution(std::string text) {
    std::lock_guard lock(m_mutex);
    m_execution = std::move(text);
}

LaneSummary LaneRecord::summary(const LaneSpec& spec, std::int64_t batch, const QualityTarget& target) const {
    std::lock_guard lock(m_mutex);
    auto s = m_running.summary(spec, batch, target);
    s.state = m_state;
    s.error = m_message;
    s.execution = m_execution;
    return s;
}

std::int64_t LaneRecord::lastStep() const {
    std::lock_guard lock(m_mutex);
    return m_history.empty() ? 0 : m_history.back().step;
}

} // namespace devicerace::detail
