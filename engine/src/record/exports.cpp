#include "devicerace/exports.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "devicerace/errors.h"

namespace devicerace {

using nlohmann::json;

namespace {

template <typename T>
json orNull(const std::optional<T>& v) {
    if (!v) {
        return nullptr;
    }
    if constexpr (std::is_floating_point_v<T>) {
        if (!std::isfinite(*v)) {
            return nullptr;
        }
    }
    return *v;
}

std::string csvField(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) {
        return s;
    }
    std::string out = "\"";
    for (char c : s) {
        out += c == '"' ? std::string("\"\"") : std::string(1, c);
    }
    return out + "\"";
}

template <typename T>
std::string csvNumber(const std::optional<T>& v) {
    if (!v) {
        return {};
    }
    if constexpr (std::is_floating_point_v<T>) {
        return std::isfinite(*v) ? fmt::format("{}", *v) : std::string();
    } else {
        return fmt::format("{}", *v);
    }
}

} // namespace

std::string summaryToJson(const RaceSummary& summary) {
    json j;
    j["workload"] = summary.workload;
    j["dataset"] = {{"name", summary.datasetName}, {"synthetic", summary.synthetic}};
    j["mode"] = summary.fair ? "fair" : "live";
    j["data_note"] = summary.dataNote.empty() ? json(nullptr) : json(summary.dataNote);
    j["lanes"] = json::array();
    for (const auto& l : summary.lanes) {
        j["lanes"].push_back({
            {"name", l.name},
            {"device", l.device},
            {"kind", toString(l.kind)},
            {"host", l.host.empty() ? json(nullptr) : json(l.host)},
            {"threads", orNull(l.threads)},
            {"batch", l.batch},
            {"status", toString(l.state)},
            {"error", l.error.empty() ? json(nullptr) : json(l.error)},
            {"steps", l.steps},
            {"samples", l.samples},
            {"wall_seconds", l.wallSeconds},
            {"samples_per_sec", orNull(l.samplesPerSec)},
            {"steps_per_sec", orNull(l.stepsPerSec)},
            {"measured_samples", l.measuredSamples},
            {"measured_seconds", l.measuredSeconds},
            {"final_test_accuracy", orNull(l.finalTestAccuracy)},
            {"time_to_target_seconds", orNull(l.timeToTargetSeconds)},
            {"peak_memory_bytes", orNull(l.peakMemoryBytes)},
            {"cost_per_hour", orNull(l.costPerHour)},
            {"total_cost_usd", orNull(l.totalCostUsd)},
            {"cost_to_target_usd", orNull(l.costToTargetUsd)},
            {"cost_vs_baseline", orNull(l.costVsBaseline)},
            {"dataset", {{"name", l.datasetName}, {"synthetic", l.synthetic}}},
            {"execution", l.execution.empty() ? json(nullptr) : json(l.execution)},
        });
        if (l.workers > 0) {
            auto& lane = j["lanes"].back();
            lane["workers"] = l.workers;
            lane["worker_samples_per_sec"] = l.workerSamplesPerSec;
            lane["allreduce_share"] = orNull(l.allreduceShare);
            lane["scaling"] = l.scalingBaseline.empty()
                                  ? json(nullptr)
                                  : json{{"baseline", l.scalingBaseline},
                                         {"speedup", orNull(l.scalingSpeedup)},
                                         {"efficiency", orNull(l.scalingEfficiency)}};
        }
    }
    j["speedup"] = json::object();
    for (const auto& l : summary.lanes) {
        auto it = summary.speedup.find(l.name);
        j["speedup"][l.name] = it == summary.speedup.end() ? json(nullptr) : json(it->second);
    }
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string samplesToCsv(const std::vector<MetricSample>& samples) {
    std::string out =
        "lane,kind,step,samples,epoch,t,wall_time,loss,accuracy,samples_per_sec,steps_per_sec,interval_s,"
        "memory_bytes,warmup,state,message\n";
    for (const auto& s : samples) {
        out += fmt::format("{},{},{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{}\n", csvField(s.lane), toString(s.kind),
                           s.step, s.samples, s.epoch, s.time, s.wallTime, csvNumber(s.loss), csvNumber(s.accuracy),
                           csvNumber(s.samplesPerSec), csvNumber(s.stepsPerSec), csvNumber(s.intervalSeconds),
                           csvNumber(s.memoryBytes), s.warmup ? 1 : 0,
                           s.kind == SampleKind::State ? toString(s.state) : std::string(), csvField(s.message));
    }
    return out;
}

std::string samplesToJsonLines(const std::vector<MetricSample>& samples) {
    std::string out;
    for (const auto& s : samples) {
        out += toJsonLine(s);
        out += '\n';
    }
    return out;
}

void writeFileAtomically(const std::filesystem::path& path, const std::string& contents) {
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        throw Error(fmt::format("{}: cannot write: folder {} does not exist", path.string(), dir.string()));
    }
    auto tmp = path;
    tmp += fmt::format(".tmp{}", ::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) {
        throw Error(fmt::format("{}: cannot write: {}", path.string(), std::strerror(errno)));
    }
    const bool wrote = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
    const int writeErr = errno;
    const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const int flushErr = errno;
    const bool closed = std::fclose(f) == 0;
    if (!wrote || !flushed || !closed) {
        std::remove(tmp.c_str());
        throw Error(fmt::format("{}: write failed: {}", path.string(), std::strerror(!wrote ? writeErr : flushErr)));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        throw Error(fmt::format("{}: cannot replace: {}", path.string(), std::strerror(err)));
    }
}

} // namespace devicerace
