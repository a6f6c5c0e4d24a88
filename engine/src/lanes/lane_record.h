#pragma once
// The samples, state and message a lane keeps, whatever its kind. Thread-safe.
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "devicerace/metric_sample.h"
#include "devicerace/summary.h"

namespace devicerace::detail {

class LaneRecord {
public:
    explicit LaneRecord(std::string laneName) : m_lane(std::move(laneName)) {}

    /// Stores a sample (wall time filled in when 0; a State sample sets state and message).
    void push(MetricSample s);
    /// Pushes the final State sample, carrying the last step/samples/epoch/time forward so
    /// the record stands on its own. Ignored once the lane is in a terminal state.
    void finish(LaneState state, std::string message);
    /// Pending -> Stopped without a sample (a lane stopped before it started). True if done.
    bool stopIfPending(const std::string& message);

    std::vector<MetricSample> take();
    /// The most recent samples, at most kHistoryLimit (the summary covers them all): an
    /// hours-long lane keeps a bounded record (the consumers of take() keep the rest).
    std::vector<MetricSample> history() const;
    static constexpr std::size_t kHistoryLimit = 100'000;
    LaneState state() const;
    std::string message() const;
    std::string execution() const;
    void setExecution(std::string text);
    /// The lane's summary so far, kept up to date sample by sample (O(1), whatever the race's
    /// length), with the record's state, message and execution text.
    LaneSummary summary(const LaneSpec& spec, std::int64_t batch, const QualityTarget& target) const;
    /// Progress so far: the step of the last sample (0 before any).
    std::int64_t lastStep() const;

private:
    std::string m_lane;
    mutable std::mutex m_mutex; // guards everything below
    std::vector<MetricSample> m_pending;
    std::deque<MetricSample> m_history;
    std::optional<MetricSample> m_lastProgress; // the last sample past step 0 or not a State
    RunningSummary m_running;
    LaneState m_state = LaneState::Pending;
    std::string m_message;
    std::string m_execution;
};

double unixNow(); // seconds since the Unix epoch

} // namespace devicerace::detail
