#include "live_table.h"
#include "cli_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace devicerace::cli {

namespace {
// Seconds between progress lines when the output is not a terminal.
constexpr double kLinePeriod = 5.0;
constexpr int kBarWidth = 24;
} // namespace

LiveView::LiveView(LiveMode mode, std::FILE* out) : m_mode(mode), m_out(out) {}

void LiveView::addLane(std::string name, std::int64_t totalSteps) {
    LaneRow row;
    row.name = std::move(name);
    row.totalSteps = totalSteps;
    m_nameWidth = std::max(m_nameWidth, textColumns(row.name)); // the name column: the widest name
    m_rows.push_back(std::move(row));
}

std::string LiveView::progressBar(double fraction, int width) {
    fraction = std::clamp(fraction, 0.0, 1.0);
    const int full = static_cast<int>(std::lround(fraction * width));
    std::string bar;
    for (int i = 0; i < width; ++i) {
        bar += i < full ? "█" : "░";
    }
    return bar;
}

std::string LiveView::formatEta(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) {
        return "--:--";
    }
    const auto s = static_cast<long>(std::lround(seconds));
    if (s >= 3600) {
        return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
    }
    return fmt::format("{}:{:02}", s / 60, s % 60);
}

void LiveView::update(std::size_t index, const std::vector<MetricSample>& samples) {
    auto& row = m_rows.at(index);
    for (const auto& s : samples) {
        row.step = std::max(row.step, s.step);
        row.time = std::max(row.time, s.time);
        switch (s.kind) {
        case SampleKind::Train:
            if (!s.warmup || !row.samplesPerSec) {
                row.samplesPerSec = s.samplesPerSec;
                row.stepsPerSec = s.stepsPerSec;
            }
            if (s.loss) {
                row.loss = s.loss;
            }
            break;
        case SampleKind::Eval:
            row.accuracy = s.accuracy;
            if (m_mode != LiveMode::Table) {
                // A script's evaluation may lack its epoch (its data set's size is its own), its loss
                // or its accuracy (it printed one figure): those are left out, never shown as nan.
                std::string line = fmt::format("{:<{}} eval  step {:>6}", row.name, m_nameWidth, s.step);
                if (s.epoch > 0) {
                    line += fmt::format("  epoch {:5.2f}", s.epoch);
                }
                line += fmt::format("  t {:7.1f}s", s.time);
                if (s.loss) {
                    line += fmt::format("  {} {:.4f}", m_tokensPerSample > 0 ? "val loss" : "test loss", *s.loss);
                }
                if (s.accuracy) {
                    line +=
                        fmt::format("  {} {:.4f}", m_tokensPerSample > 0 ? "next-char acc" : "test acc", *s.accuracy);
                }
                fmt::print(m_out, "{}\n", line);
                if (!s.text.empty() && m_tokensPerSample > 0) {
                    fmt::print(m_out, "{:<{}} writes: {}\n", row.name, m_nameWidth, oneLine(s.text));
                } else if (!s.text.empty()) {
                    // Generated text keeps its line breaks, indented under the lane.
                    std::string text = s.text;
                    const std::string indent = std::string(1, '\n').append(m_nameWidth + 1, ' ');
                    for (std::size_t p = text.find('\n'); p != std::string::npos;
                         p = text.find('\n', p + indent.size())) {
                        text.replace(p, 1, indent);
                    }
                    fmt::print(m_out, "{:<{}} sample: {}\n", row.name, m_nameWidth, text);
                }
            }
            break;
        case SampleKind::State:
            row.state = s.state;
            row.message = s.message;
            if (m_mode != LiveMode::Table && s.state != LaneState::Running && s.state != LaneState::Preparing &&
                s.state != LaneState::Evaluating) {
                fmt::print(m_out, "{:<{}} {}\n", row.name, m_nameWidth, stateText(s.state, s.message));
            }
            break;
        }
    }
    std::fflush(m_out);
}

std::string LiveView::oneLine(const std::string& text) {
    std::string out;
    for (const char c : text) {
        if (c == '\n') {
            out += " \u21b5 ";
        } else {
            out += c == '\t' || c == '\r' ? ' ' : c;
        }
    }
    return out;
}

std::string LiveView::rowText(const LaneRow& row) const {
    const double fraction = row.totalSteps > 0 ? static_cast<double>(row.step) / row.totalSteps : 0;
    std::string status;
    if (row.state == LaneState::Evaluating) {
        status = "evaluating…";
    } else if (row.state == LaneState::Running || row.state == LaneState::Paused) {
        const double eta = row.stepsPerSec && *row.stepsPerSec > 0 && row.totalSteps > 0
                               ? (row.totalSteps - row.step) / *row.stepsPerSec
                               : NAN;
        status = row.state == LaneState::Paused ? "paused"
                 : row.totalSteps > 0           ? "ETA " + formatEta(eta)
                                                : "running"; // a script's own length: no ETA to give
    } else {
        status = stateText(row.state, row.state == LaneState::Finished ? std::string() : row.message);
    }
    const auto rate = row.samplesPerSec
                          ? std::optional<double>(*row.samplesPerSec *
                                                  static_cast<double>(std::max<std::int64_t>(1, m_tokensPerSample)))
                          : std::nullopt;
    // A lane whose length is not known (a script's own) shows its step alone.
    const std::string of = row.totalSteps > 0 ? fmt::format("/{}", row.totalSteps) : std::string();
    // ... and no progress: an empty bar at 0% all race long would say it is not moving.
    const std::string progress = row.totalSteps > 0
                                     ? fmt::format("{} {:>3.0f}%", progressBar(fraction, kBarWidth), fraction * 100)
                                     : std::string(kBarWidth + 5, ' ');
    return fmt::format("{:<{}} {}  step {:>6}{:<7} {:>9} {}  loss {:>7}  acc {:>6}  {}", row.name, m_nameWidth,
                       progress, row.step, of, rate ? groupThousands(*rate) : std::string("-"),
                       m_tokensPerSample > 0 ? "tokens/s" : "samples/s",
                       row.loss ? fmt::format("{:.4f}", *row.loss) : std::string("-"),
                       row.accuracy ? fmt::format("{:.4f}", *row.accuracy) : std::string("-"), status);
}

void LiveView::render(double secondsSinceStart) {
    if (m_mode == LiveMode::Quiet) {
        return;
    }
    if (m_mode == LiveMode::Lines) {
        if (secondsSinceStart - m_lastLines < kLinePeriod) {
            return;
        }
        m_lastLines = secondsSinceStart;
        for (const auto& row : m_rows) {
            if (row.state == LaneState::Running || row.state == LaneState::Evaluating) {
                fmt::print(m_out, "{}\n", rowText(row));
            }
        }
        std::fflush(m_out);
        return;
    }
    std::string frame;
    if (m_drawnLines > 0) {
        frame += fmt::format("\x1b[{}A", m_drawnLines); // cursor up to the table's first line
    }
    for (const auto& row : m_rows) {
        frame += "\r\x1b[2K" + rowText(row) + "\n";
    }
    m_drawnLines = static_cast<int>(m_rows.size());
    std::fputs(frame.c_str(), m_out);
    std::fflush(m_out);
}

void LiveView::finish() {
    if (m_mode == LiveMode::Table) {
        render(1e18);
    }
}

} // namespace devicerace::cli
