#include "race_controller.h"

#include <algorithm>

// RaceController's repeats: the kept histories the charts draw bands from, and repeat sets
// opened from disk (split from race_controller.cpp).
namespace devicerace::ui {

std::map<std::string, LaneHistory> historiesOf(const Recording& recording) {
    std::map<std::string, LaneHistory> out;
    for (const auto& lane : recording.lanes) {
        auto& h = out[lane.name];
        h.costPerHour = lane.costPerHour;
        if (const auto it = recording.samples.find(lane.name); it != recording.samples.end()) {
            for (const auto& sample : it->second) {
                h.append(sample);
            }
        }
    }
    return out;
}

void RaceController::keepRepeat() {
    m_pastRepeats.emplace_back(m_histories.begin(), m_histories.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                                              m_liveLanes, m_histories.size())));
    ++m_bandGeneration;
}

void RaceController::clearRepeats() {
    m_pastRepeats.clear();
    ++m_bandGeneration;
}

BandSources RaceController::bandSources() const {
    BandSources out;
    out.generation = m_bandGeneration;
    out.perLane.resize(m_histories.size());
    for (const auto& repeat : m_pastRepeats) {
        for (std::size_t i = 0; i < repeat.size() && i < m_liveLanes && i < out.perLane.size(); ++i) {
            out.perLane[i].push_back(&repeat[i]);
        }
    }
    for (const auto& r : m_replays) {
        const auto set = m_recordedRepeats.find(r.recording.get());
        if (set == m_recordedRepeats.end() || r.index >= out.perLane.size()) {
            continue;
        }
        if (const auto lane = set->second.find(r.lane); lane != set->second.end()) {
            for (const auto& h : lane->second) {
                out.perLane[r.index].push_back(&h);
            }
        }
    }
    return out;
}

} // namespace devicerace::ui
