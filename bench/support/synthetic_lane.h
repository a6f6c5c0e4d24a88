#pragma once
// A lane that trains nothing: it emits train samples at a fixed rate of lane time, and an
// evaluation every `evalEvery` seconds, when its driver calls emitUntil(). A soak benchmark
// (bench/gui_soak.cpp) and the long-race tests (tests/ui/tst_long_race.cpp) feed the window's poller, recorder and
// charts with hours of samples in minutes through it. Thread-safe like every Lane.
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "devicerace/lane.h"
#include "devicerace/lane_spec.h"
#include "devicerace/race.h"
#include "devicerace/summary.h"

namespace devicerace::bench {

class SyntheticLane : public Lane {
public:
    SyntheticLane(LaneSpec spec, std::shared_ptr<const Dataset> data, double samplesPerSecond, int index)
        : m_spec(std::move(spec)), m_data(std::move(data)), m_rate(samplesPerSecond), m_index(index) {}

    /// Emits every sample due up to lane time `seconds` (train intervals of 1/rate s).
    void emitUntil(double seconds) {
        std::lock_guard lock(m_mutex);
        if (m_state != LaneState::Running) {
            return;
        }
        while (static_cast<double>(m_emitted + 1) / m_rate <= seconds) {
            ++m_emitted;
            MetricSample s = at(SampleKind::Train);
            s.epoch = static_cast<double>(s.samples) / 60000.0;
            const double wobble = std::sin(static_cast<double>(m_emitted) / 300.0 + m_index);
            s.samplesPerSec = 1000.0 * (m_index + 1) * (1.0 + 0.05 * wobble);
            s.stepsPerSec = *s.samplesPerSec / kBatch;
            s.intervalSeconds = 1.0 / m_rate;
            s.loss = 2.0 / (1.0 + s.time / 600.0) + 0.05 * wobble;
            s.warmup = m_emitted <= 20;
            push(std::move(s));
            if (std::fmod(static_cast<double>(m_emitted), m_rate * kEvalEvery) == 0) {
                MetricSample e = at(SampleKind::Eval);
                e.accuracy = 0.9 - 0.5 / (1.0 + e.time / 300.0);
                e.loss = 0.3;
                push(std::move(e));
            }
        }
    }
    /// Ends the lane as Finished (its final State sample).
    void finish() {
        std::lock_guard lock(m_mutex);
        setState(LaneState::Finished);
    }
    std::int64_t emitted() const {
        std::lock_guard lock(m_mutex);
        return m_emitted;
    }

    LaneKind kind() const override { return LaneKind::Thread; }
    const LaneSpec& spec() const override { return m_spec; }
    std::int64_t batch() const override { return kBatch; }
    std::int64_t totalSteps() const override { return 0; }
    void start() override {
        std::lock_guard lock(m_mutex);
        setState(LaneState::Running);
    }
    void requestStop() override {
        std::lock_guard lock(m_mutex);
        if (!isTerminal(m_state)) {
            setState(LaneState::Stopped);
        }
    }
    void setPaused(bool) override {}
    void wait() override {}
    LaneState state() const override {
        std::lock_guard lock(m_mutex);
        return m_state;
    }
    std::string message() const override { return {}; }
    std::vector<MetricSample> takeSamples() override {
        std::lock_guard lock(m_mutex);
        std::vector<MetricSample> out;
        out.swap(m_pending);
        return out;
    }
    std::vector<MetricSample> history() const override { return {}; } // not kept: hours of samples
    LaneSummary summary() const override {
        std::lock_guard lock(m_mutex);
        auto s = m_running.summary(m_spec, kBatch, {});
        s.state = m_state;
        return s;
    }
    double cpuSeconds() const override { return 0; }
    std::shared_ptr<const Dataset> dataset() const override { return m_data; }

    static constexpr std::int64_t kBatch = 32;
    static constexpr double kEvalEvery = 10; // seconds of lane time between evaluations

private:
    void push(MetricSample s) { // m_mutex held
        m_running.add(s);
        m_pending.push_back(std::move(s));
    }
    // A sample of `kind` at the current step (m_mutex held).
    MetricSample at(SampleKind kind) const {
        MetricSample s;
        s.kind = kind;
        s.lane = m_spec.name;
        s.step = m_emitted;
        s.samples = m_emitted * kBatch;
        s.time = static_cast<double>(m_emitted) / m_rate;
        s.wallTime = 1.7e9 + s.time;
        return s;
    }
    void setState(LaneState state) { // m_mutex held
        m_state = state;
        MetricSample s = at(SampleKind::State);
        s.state = state;
        push(std::move(s));
    }

    LaneSpec m_spec;
    std::shared_ptr<const Dataset> m_data;
    double m_rate;
    int m_index;
    mutable std::mutex m_mutex;
    LaneState m_state = LaneState::Pending;
    std::int64_t m_emitted = 0;
    std::vector<MetricSample> m_pending;
    RunningSummary m_running;
};

/// A race of `lanes` one-thread CPU lanes named s0, s1, … on a small synthetic fashion-mlp set:
/// what a factory of synthetic lanes replaces.
inline RaceSpec syntheticRaceSpec(int lanes) {
    RaceSpec spec;
    spec.workload = "fashion-mlp";
    spec.data = DataMode::Synthetic;
    spec.trainLimit = 64;
    spec.testLimit = 16;
    for (int i = 0; i < lanes; ++i) {
        spec.lanes.push_back(parseLaneSpec("cpu,threads=1,batch=32,name=s" + std::to_string(i)));
    }
    return spec;
}

/// Builds each lane of a race as a SyntheticLane of `samplesPerSecond`, noting it in `sources`
/// (which outlives the race) for the caller to drive.
inline LaneFactory syntheticLanes(std::vector<SyntheticLane*>& sources, double samplesPerSecond) {
    return [&sources, samplesPerSecond](LaneSpec spec, LaneRunSettings settings) -> std::unique_ptr<Lane> {
        auto lane = std::make_unique<SyntheticLane>(std::move(spec), settings.data, samplesPerSecond,
                                                    static_cast<int>(sources.size()));
        sources.push_back(lane.get());
        return lane;
    };
}

} // namespace devicerace::bench
