#pragma once
// The base every lane kind shares: it holds the lane's LaneRecord (samples, state, message,
// execution text, running summary) and answers the Lane calls that only read it, so a thread
// lane, a worker lane and a data-parallel lane differ only in how they train. Thread-safe.
#include <optional>
#include <string>

#include "devicerace/lane.h"
#include "lanes/lane_record.h"

namespace devicerace::detail {

class LaneBase : public Lane {
public:
    LaneState state() const final { return m_record.state(); }
    std::string message() const final { return m_record.message(); }
    std::vector<MetricSample> takeSamples() final { return m_record.take(); }
    std::vector<MetricSample> history() const final { return m_record.history(); }
    /// The record's summary (the lane's spec, batch and target), completed by the kind.
    LaneSummary summary() const final {
        auto s = m_record.summary(spec(), batch(), m_target);
        completeSummary(s);
        return s;
    }

protected:
    LaneBase(std::string laneName, QualityTarget target) : m_record(std::move(laneName)), m_target(target) {}
    LaneRecord& record() { return m_record; }
    const LaneRecord& record() const { return m_record; }
    /// Adds what only this kind knows to its summary (the data set it trains on, its ranks).
    virtual void completeSummary(LaneSummary& summary) const = 0;

private:
    LaneRecord m_record;
    QualityTarget m_target;
};

} // namespace devicerace::detail
