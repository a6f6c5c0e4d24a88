// Summaries over repeated races (devicerace/repeats.h). Torch-free.
#include "devicerace/repeats.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "devicerace/exports.h"
#include "devicerace/summary.h"

namespace devicerace {

std::optional<Spread> spreadOf(const std::vector<double>& values) {
    if (values.empty()) {
        return std::nullopt;
    }
    Spread s;
    s.n = static_cast<int>(values.size());
    s.median = median(values);
    s.min = *std::min_element(values.begin(), values.end());
    s.max = *std::max_element(values.begin(), values.end());
    double mean = 0;
    for (double v : values) {
        mean += v;
    }
    mean /= static_cast<double>(values.size());
    double sq = 0;
    for (double v : values) {
        sq += (v - mean) * (v - mean);
    }
    s.stddev = values.size() > 1 ? std::sqrt(sq / static_cast<double>(values.size() - 1)) : 0.0;
    return s;
}

RepeatSummary summarizeRepeats(std::vector<RaceSummary> repeats) {
    RepeatSummary out;
    out.repeats = std::move(repeats);
    out.median = out.repeats.front();
    for (auto& lane : out.median.lanes) {
        LaneRepeats r;
        r.name = lane.name;
        std::vector<double> rates, steps, tokens, targets, utilisations, speedups;
        for (const auto& race : out.repeats) {
            for (const auto& l : race.lanes) {
                if (l.name != lane.name) {
                    continue;
                }
                if (l.samplesPerSec) {
                    rates.push_back(*l.samplesPerSec);
                }
                if (l.stepsPerSec) {
                    steps.push_back(*l.stepsPerSec);
                }
                if (l.tokensPerSec) {
                    tokens.push_back(*l.tokensPerSec);
                }
                if (l.timeToTargetSeconds) {
                    targets.push_back(*l.timeToTargetSeconds);
                }
                if (l.utilization) {
                    utilisations.push_back(*l.utilization);
                }
            }
            if (auto it = race.speedup.find(lane.name); it != race.speedup.end()) {
                speedups.push_back(it->second);
            }
        }
        r.samplesPerSec = spreadOf(rates);
        r.timeToTargetSeconds = spreadOf(targets);
        r.utilization = spreadOf(utilisations);
        r.speedup = spreadOf(speedups);
        r.baseline = out.lanes.empty();
        if (r.speedup && !r.baseline) {
            const auto& s = *r.speedup;
            r.withinNoise = s.n < 3 ? (s.min <= 1.0 && 1.0 <= s.max) : std::abs(s.median - 1.0) <= 2 * s.stddev;
        }
        auto med = [](const std::vector<double>& v) { return v.empty() ? std::nullopt : std::optional(median(v)); };
        lane.samplesPerSec = med(rates);
        lane.stepsPerSec = med(steps);
        lane.tokensPerSec = med(tokens);
        lane.timeToTargetSeconds = med(targets);
        lane.utilization = med(utilisations);
        if (lane.flopsPerSample && lane.samplesPerSec) {
            lane.achievedFlopsPerSec = *lane.flopsPerSample * *lane.samplesPerSec;
        }
        if (r.speedup) {
            out.median.speedup[lane.name] = r.speedup->median;
        }
        out.lanes.push_back(std::move(r));
    }
    return out;
}

std::string speedupText(const LaneRepeats& lane) {
    if (lane.baseline) {
        return "baseline";
    }
    if (!lane.speedup) {
        return "-";
    }
    const auto& s = *lane.speedup;
    return fmt::format("{:.2f}× ± {:.2f} (N = {}){}", s.median, s.stddev, s.n,
                       lane.withinNoise ? " — within noise" : "");
}

std::string repeatsToJson(const RepeatSummary& summary) {
    using nlohmann::json;
    auto j = json::parse(summaryToJson(summary.median));
    auto spread = [](const std::optional<Spread>& s) -> json {
        if (!s) {
            return nullptr;
        }
        return {{"median", s->median}, {"stddev", s->stddev}, {"min", s->min}, {"max", s->max}, {"n", s->n}};
    };
    j["repeats"] = json::array();
    for (const auto& race : summary.repeats) {
        j["repeats"].push_back(json::parse(summaryToJson(race)));
    }
    j["speedup_spread"] = json::object();
    j["lane_spread"] = json::object();
    for (const auto& lane : summary.lanes) {
        auto s = spread(lane.speedup);
        if (!s.is_null()) {
            s["within_noise"] = lane.withinNoise;
            s["text"] = speedupText(lane);
        }
        j["speedup_spread"][lane.name] = std::move(s);
        j["lane_spread"][lane.name] = {{"samples_per_sec", spread(lane.samplesPerSec)},
                                       {"time_to_target_seconds", spread(lane.timeToTargetSeconds)},
                                       {"utilization", spread(lane.utilization)}};
    }
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace devicerace
