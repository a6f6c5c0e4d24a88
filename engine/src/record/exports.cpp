#include "devicerace/exports.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>
#include <unistd.h>

#include "devicerace/errors.h"
#include "devicerace/recording.h"

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

std::string planToJson(const RacePlan& plan) {
    json lanes = json::array();
    for (const auto& l : plan.lanes) {
        lanes.push_back({{"name", l.spec.name},
                         {"spec", formatLaneSpec(l.spec)},
                         {"kind", toString(l.kind)},
                         {"device", l.spec.device},
                         {"host", l.spec.host},
                         {"threads", l.localCpuProcesses > 0 ? json(l.localThreads) : json(nullptr)},
                         {"cpu_processes", l.localCpuProcesses},
                         {"batch", orNull(l.batch)},
                         {"total_steps", orNull(l.totalSteps)},
                         {"problem", l.problem},
                         {"checking", l.checking},
                         {"needs_consent", l.needsConsent}});
    }
    const json out = {{"workload", plan.spec.workload},
                      {"fair", plan.spec.fair},
                      {"target_accuracy", orNull(plan.spec.targetAccuracy)},
                      {"target_loss", orNull(plan.spec.targetLoss)},
                      {"eval_every_steps", plan.evalEverySteps},
                      {"cpu_threads", plan.cpuThreads},
                      {"logical_cpus", plan.logicalCpus},
                      {"sharing_note", plan.sharingNote},
                      {"omp_wait", plan.wait.spin ? "spin" : "passive"},
                      {"omp_wait_reason", plan.wait.reason},
                      {"data_note", plan.dataNote},
                      {"problems", plan.problems},
                      {"lanes", lanes}};
    return out.dump(2) + "\n";
}

std::string summaryToJson(const RaceSummary& summary) {
    json j;
    j["workload"] = summary.workload;
    j["dataset"] = {{"name", summary.datasetName}, {"synthetic", summary.synthetic}};
    j["mode"] = summary.fair ? "fair" : "live";
    j["omp_wait_policy"] = !summary.ompWaitPolicy           ? json(nullptr)
                           : summary.ompWaitPolicy->empty() ? json("default")
                                                            : json(*summary.ompWaitPolicy);
    j["tokens_per_sample"] = summary.tokensPerSample > 0 ? json(summary.tokensPerSample) : json(nullptr);
    j["data_note"] = summary.dataNote.empty() ? json(nullptr) : json(summary.dataNote);
    j["command"] = summary.command.empty() ? json(nullptr) : json(summary.command);
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
            {"preparing_seconds", orNull(l.preparingSeconds)},
            {"samples_per_sec", orNull(l.samplesPerSec)},
            {"steps_per_sec", orNull(l.stepsPerSec)},
            {"measured_samples", l.measuredSamples},
            {"measured_seconds", l.measuredSeconds},
            {"final_test_accuracy", orNull(l.finalTestAccuracy)},
            {"final_test_loss", orNull(l.finalTestLoss)},
            {"tokens_per_sec", orNull(l.tokensPerSec)},
            {"time_to_target_seconds", orNull(l.timeToTargetSeconds)},
            {"peak_memory_bytes", orNull(l.peakMemoryBytes)},
            {"cost_per_hour", orNull(l.costPerHour)},
            {"total_cost_usd", orNull(l.totalCostUsd)},
            {"cost_to_target_usd", orNull(l.costToTargetUsd)},
            {"cost_vs_baseline", orNull(l.costVsBaseline)},
            {"dataset", {{"name", l.datasetName}, {"synthetic", l.synthetic}}},
            {"execution", l.execution.empty() ? json(nullptr) : json(l.execution)},
        });
        auto& lane = j["lanes"].back();
        json breakdown = nullptr;
        if (!l.stepBreakdown.empty()) {
            breakdown = json::object();
            for (const auto& [phase, secs] : l.stepBreakdown) {
                breakdown[phase] = secs;
            }
        }
        lane["step_breakdown"] = std::move(breakdown);
        lane["data_share"] = orNull(l.dataShare);
        lane["input_bound"] = l.inputBound;
        lane["flops_per_sample"] = orNull(l.flopsPerSample);
        lane["achieved_flops_per_sec"] = orNull(l.achievedFlopsPerSec);
        lane["peak_flops_per_sec"] = orNull(l.peakFlopsPerSec);
        lane["peak_source"] = l.peakSource.empty() ? json(nullptr) : json(l.peakSource);
        lane["utilization"] = orNull(l.utilization);
        lane["energy_joules"] = orNull(l.energyJoules);
        lane["samples_per_joule"] = orNull(l.samplesPerJoule);
        lane["energy_source"] = l.energySource.empty() ? json(nullptr) : json(l.energySource);
        lane["lr"] = orNull(l.lr);
        lane["thread_speeds"] = l.threadSpeeds.empty() ? json(nullptr) : json(l.threadSpeeds);
        lane["other_cpus"] = orNull(l.otherCpus);
        lane["steal"] = orNull(l.stealShare);
        lane["machine_cpus"] = l.machineCpus ? json(*l.machineCpus) : json(nullptr);
        if (l.workers > 0) {
            lane["workers"] = l.workers;
            if (!l.job.empty() || !l.nodes.empty()) {
                lane["job"] = l.job;
                lane["nodes"] = l.nodes;
            }
            lane["worker_samples_per_sec"] = l.workerSamplesPerSec;
            lane["allreduce_share"] = orNull(l.allreduceShare);
            json ranks = json::array();
            for (const auto& phases : l.workerStepBreakdown) {
                ranks.push_back(phases);
            }
            lane["worker_step_breakdown"] = std::move(ranks);
            lane["slowest_rank"] = l.slowestRank.empty() ? json(nullptr) : json(l.slowestRank);
            lane["scaling"] = l.scalingBaseline.empty() ? json(nullptr)
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
    j["explanations"] = summary.explanations;
    return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

constexpr const char* kCsvHeader =
    "lane,kind,step,samples,epoch,t,wall_time,loss,accuracy,samples_per_sec,steps_per_sec,interval_s,"
    "memory_bytes,warmup,state,message,lr,data_s,forward_s,backward_s,communication_s,optimizer_s,compute_s,"
    "other_s,energy_j\n";

std::string csvRow(const MetricSample& s) {
    // The step breakdown's phases as columns (seconds per step; empty when not measured).
    std::string phases;
    for (const char* phase : {"data", "forward", "backward", "communication", "optimizer", "compute", "other"}) {
        const auto it = s.stepBreakdown.find(phase);
        phases += ',';
        phases += it == s.stepBreakdown.end() ? std::string() : csvNumber(std::optional<double>(it->second));
    }
    return fmt::format("{},{},{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{},{}{},{}\n", csvField(s.lane),
                       toString(s.kind), s.step, s.samples, s.epoch, s.time, s.wallTime, csvNumber(s.loss),
                       csvNumber(s.accuracy), csvNumber(s.samplesPerSec), csvNumber(s.stepsPerSec),
                       csvNumber(s.intervalSeconds), csvNumber(s.memoryBytes), s.warmup ? 1 : 0,
                       s.kind == SampleKind::State ? toString(s.state) : std::string(), csvField(s.message),
                       csvNumber(s.lr), phases, csvNumber(s.energyJoules));
}

// A file written under a temporary name beside `path` and renamed over it by commit(), every
// byte checked; removed when not committed.
class AtomicFile {
public:
    explicit AtomicFile(std::filesystem::path path) : m_path(std::move(path)) {
        const auto dir = m_path.has_parent_path() ? m_path.parent_path() : std::filesystem::path(".");
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec)) {
            throw Error(fmt::format("{}: cannot write: folder {} does not exist", m_path.string(), dir.string()));
        }
        m_tmp = m_path;
        m_tmp += fmt::format(".tmp{}", ::getpid());
        m_file = std::fopen(m_tmp.c_str(), "wb");
        if (!m_file) {
            throw Error(fmt::format("{}: cannot write: {}", m_path.string(), std::strerror(errno)));
        }
    }
    ~AtomicFile() {
        if (m_file) {
            std::fclose(m_file);
            std::remove(m_tmp.c_str());
        }
    }
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(std::string_view bytes) {
        if (std::fwrite(bytes.data(), 1, bytes.size(), m_file) != bytes.size()) {
            throw Error(fmt::format("{}: write failed: {}", m_path.string(), std::strerror(errno)));
        }
    }
    void commit() {
        const bool flushed = std::fflush(m_file) == 0 && ::fsync(::fileno(m_file)) == 0;
        const int flushErr = errno;
        const bool closed = std::fclose(m_file) == 0;
        m_file = nullptr;
        if (!flushed || !closed) {
            std::remove(m_tmp.c_str());
            throw Error(fmt::format("{}: write failed: {}", m_path.string(), std::strerror(flushErr)));
        }
        if (std::rename(m_tmp.c_str(), m_path.c_str()) != 0) {
            const int err = errno;
            std::remove(m_tmp.c_str());
            throw Error(fmt::format("{}: cannot replace: {}", m_path.string(), std::strerror(err)));
        }
    }

private:
    std::filesystem::path m_path, m_tmp;
    std::FILE* m_file = nullptr;
};

} // namespace

std::string samplesToCsv(const std::vector<MetricSample>& samples) {
    std::string out = kCsvHeader;
    for (const auto& s : samples) {
        out += csvRow(s);
    }
    return out;
}

void writeSamplesCsv(const std::vector<std::filesystem::path>& jsonLineFiles, const std::vector<MetricSample>& more,
                     const std::filesystem::path& out) {
    AtomicFile file(out);
    file.write(kCsvHeader);
    for (const auto& path : jsonLineFiles) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            throw Error(fmt::format("{}: cannot read: {}", path.string(), std::strerror(errno)));
        }
        std::string line;
        std::string rows;
        while (std::getline(in, line)) {
            if (in.eof()) {
                break; // a line still being written (no newline yet): not a sample
            }
            rows += csvRow(sampleFromJsonLine(line));
            if (rows.size() > (1u << 20)) {
                file.write(rows);
                rows.clear();
            }
        }
        file.write(rows);
    }
    for (const auto& s : more) {
        file.write(csvRow(s));
    }
    file.commit();
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
    AtomicFile file(path);
    file.write(contents);
    file.commit();
}

} // namespace devicerace
