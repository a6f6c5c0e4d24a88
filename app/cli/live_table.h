#pragma once
// What the CLI prints while a race runs: a table redrawn in place on a terminal, or plain
// lines otherwise. Main thread only.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "devicerace/metric_sample.h"

namespace devicerace::cli {

enum class LiveMode {
    Table, // a terminal: redraw in place
    Lines, // not a terminal: progress lines every few seconds plus every evaluation/state change
    Quiet  // --quiet: evaluation and state lines only
};

struct LaneRow {
    std::string name;
    std::int64_t totalSteps = 0;
    std::int64_t step = 0;
    std::optional<double> samplesPerSec, stepsPerSec, loss, accuracy;
    LaneState state = LaneState::Pending;
    std::string message;
    double time = 0;
};

class LiveView {
public:
    LiveView(LiveMode mode, std::FILE* out);
    void addLane(std::string name, std::int64_t totalSteps);
    /// Language models: throughput in tokens/s (samples/s x this), "val loss", one-line samples.
    void setTokensPerSample(std::int64_t tokens) { m_tokensPerSample = tokens; }
    /// A language model's sample on one line: line breaks as " ↵ ", tabs as spaces (the window's text strip too).
    static std::string oneLine(const std::string& text);
    /// Folds new samples of lane `index` into its row (printing event lines in line modes).
    void update(std::size_t index, const std::vector<MetricSample>& samples);
    /// Draws the table (Table mode) or periodic progress lines (Lines mode).
    void render(double secondsSinceStart);
    void finish();

    static std::string progressBar(double fraction, int width);
    static std::string formatEta(double seconds);

private:
    std::string rowText(const LaneRow& row) const;
    LiveMode m_mode;
    std::FILE* m_out;
    std::vector<LaneRow> m_rows;
    int m_drawnLines = 0;
    double m_lastLines = -1e9;
    std::int64_t m_tokensPerSample = 0;
    std::size_t m_nameWidth = 10; // the lane column: the widest name, at least 10
};

} // namespace devicerace::cli
