#include "devicerace/metric_sample.h"
#include "metrics/sample_json.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "devicerace/errors.h"
#include "util/json_util.h"

namespace devicerace {

using nlohmann::json;

std::string toString(SampleKind k) {
    switch (k) {
    case SampleKind::Train: return "train";
    case SampleKind::Eval: return "eval";
    case SampleKind::State: return "state";
    }
    return "?";
}

std::string toString(LaneState s) {
    switch (s) {
    case LaneState::Pending: return "pending";
    case LaneState::Preparing: return "preparing";
    case LaneState::Running: return "running";
    case LaneState::Evaluating: return "evaluating";
    case LaneState::Paused: return "paused";
    case LaneState::Finished: return "finished";
    case LaneState::Failed: return "failed";
    case LaneState::Diverged: return "diverged";
    case LaneState::Stopped: return "stopped";
    }
    return "?";
}

bool isTerminal(LaneState s) {
    return s == LaneState::Finished || s == LaneState::Failed || s == LaneState::Diverged || s == LaneState::Stopped;
}

namespace {

// JSON has no NaN/Inf: non-finite values are written as null (a diverged loss stays visible
// through the lane's state message instead).
json number(const std::optional<double>& v) {
    if (!v || !std::isfinite(*v)) {
        return nullptr;
    }
    return *v;
}

LaneState stateFromString(const std::string& s) {
    for (auto st :
         {LaneState::Pending, LaneState::Preparing, LaneState::Running, LaneState::Evaluating, LaneState::Paused,
          LaneState::Finished, LaneState::Failed, LaneState::Diverged, LaneState::Stopped}) {
        if (toString(st) == s) {
            return st;
        }
    }
    throw DataError(fmt::format("unknown lane state '{}'", s));
}

// A step breakdown from a peer: phase -> seconds; negative, non-finite or non-numeric phases are
// dropped, never summed.
std::map<std::string, double> phasesOf(const json& j) {
    if (!j.is_object() || j.size() > 16) {
        throw DataError("a step breakdown must be an object of at most 16 phases");
    }
    std::map<std::string, double> out;
    for (const auto& [phase, secs] : j.items()) {
        if (secs.is_number() && std::isfinite(secs.get<double>()) && secs.get<double>() >= 0) {
            out[phase.substr(0, 32)] = secs.get<double>();
        }
    }
    return out;
}

} // namespace

std::string toJsonLine(const MetricSample& s) {
    json j;
    j["kind"] = toString(s.kind);
    j["lane"] = s.lane;
    j["step"] = s.step;
    j["samples"] = s.samples;
    j["epoch"] = s.epoch;
    j["t"] = s.time;
    j["wall_time"] = s.wallTime;
    j["loss"] = number(s.loss);
    j["accuracy"] = number(s.accuracy);
    j["samples_per_sec"] = number(s.samplesPerSec);
    j["steps_per_sec"] = number(s.stepsPerSec);
    j["interval_s"] = number(s.intervalSeconds);
    j["memory_bytes"] = s.memoryBytes ? json(*s.memoryBytes) : json(nullptr);
    j["warmup"] = s.warmup;
    if (s.kind == SampleKind::State) {
        j["state"] = toString(s.state);
        j["message"] = s.message;
    }
    if (!s.text.empty()) {
        j["text"] = s.text;
    }
    if (!s.workerSamplesPerSec.empty()) {
        json rates = json::array();
        for (double r : s.workerSamplesPerSec) {
            rates.push_back(number(r));
        }
        j["worker_samples_per_sec"] = std::move(rates);
    }
    if (s.allreduceShare) {
        j["allreduce_share"] = number(s.allreduceShare);
    }
    if (!s.threadSpeeds.empty()) {
        json speeds = json::array();
        for (double v : s.threadSpeeds) {
            speeds.push_back(number(v));
        }
        j["thread_speeds"] = std::move(speeds);
    }
    if (s.otherCpus) {
        j["other_cpus"] = number(s.otherCpus);
    }
    if (s.stealShare) {
        j["steal"] = number(s.stealShare);
    }
    if (!s.workerStepBreakdown.empty()) {
        json ranks = json::array();
        for (const auto& phases : s.workerStepBreakdown) {
            json b = json::object();
            for (const auto& [phase, secs] : phases) {
                b[phase] = number(secs);
            }
            ranks.push_back(std::move(b));
        }
        j["worker_step_breakdown"] = std::move(ranks);
    }
    if (s.lr) {
        j["lr"] = number(s.lr);
    }
    if (!s.stepBreakdown.empty()) {
        json b = json::object();
        for (const auto& [phase, secs] : s.stepBreakdown) {
            b[phase] = number(secs);
        }
        j["step_breakdown"] = std::move(b);
    }
    if (s.energyJoules) {
        j["energy_j"] = number(s.energyJoules);
    }
    if (s.flopsPerSample) {
        j["flops_per_sample"] = number(s.flopsPerSample);
    }
    if (s.peakFlopsPerSec) {
        j["peak_flops_per_sec"] = number(s.peakFlopsPerSec);
        j["peak_source"] = s.peakSource;
    }
    if (!s.energySource.empty()) {
        j["energy_source"] = s.energySource;
    }
    if (s.machineCpus) {
        j["machine_cpus"] = *s.machineCpus;
    }
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

MetricSample sampleFromJsonLine(const std::string& line) {
    json j;
    try {
        j = json::parse(line);
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed metric sample: {}", e.what()));
    }
    return detail::sampleFromJson(j);
}

MetricSample detail::sampleFromJson(const json& j) {
    try {
        if (!j.is_object()) {
            throw DataError("a metric sample must be a JSON object");
        }
        MetricSample s;
        auto kind = j.at("kind").get<std::string>();
        if (kind == "train") {
            s.kind = SampleKind::Train;
        } else if (kind == "eval") {
            s.kind = SampleKind::Eval;
        } else if (kind == "state") {
            s.kind = SampleKind::State;
        } else {
            throw DataError(fmt::format("unknown sample kind '{}'", kind));
        }
        s.lane = j.at("lane").get<std::string>();
        s.step = detail::checkedAt<std::int64_t>(j, "step");
        s.samples = detail::checkedAt<std::int64_t>(j, "samples");
        s.epoch = j.value("epoch", 0.0);
        s.time = j.at("t").get<double>();
        s.wallTime = j.value("wall_time", 0.0);
        s.loss = detail::optionalOf<double>(j, "loss");
        s.accuracy = detail::optionalOf<double>(j, "accuracy");
        s.samplesPerSec = detail::optionalOf<double>(j, "samples_per_sec");
        s.stepsPerSec = detail::optionalOf<double>(j, "steps_per_sec");
        s.intervalSeconds = detail::optionalOf<double>(j, "interval_s");
        s.memoryBytes = detail::optionalOf<std::uint64_t>(j, "memory_bytes");
        s.warmup = j.value("warmup", false);
        s.text = j.value("text", std::string());
        if (auto it = j.find("worker_samples_per_sec"); it != j.end()) {
            if (!it->is_array() || it->size() > 4096) {
                throw DataError("worker_samples_per_sec must be an array of at most 4,096 numbers");
            }
            for (const auto& r : *it) {
                s.workerSamplesPerSec.push_back(r.is_number() ? r.get<double>() : 0.0);
            }
        }
        s.allreduceShare = detail::optionalOf<double>(j, "allreduce_share");
        if (auto it = j.find("thread_speeds"); it != j.end()) {
            if (!it->is_array() || it->size() > 4096) {
                throw DataError("thread_speeds must be an array of at most 4,096 numbers");
            }
            for (const auto& v : *it) {
                s.threadSpeeds.push_back(v.is_number() ? v.get<double>() : 0.0);
            }
        }
        s.otherCpus = detail::optionalOf<double>(j, "other_cpus");
        s.stealShare = detail::optionalOf<double>(j, "steal");
        if (auto it = j.find("worker_step_breakdown"); it != j.end()) {
            if (!it->is_array() || it->size() > 4096) {
                throw DataError("worker_step_breakdown must be an array of at most 4,096 objects");
            }
            for (const auto& rank : *it) {
                s.workerStepBreakdown.push_back(phasesOf(rank));
            }
        }
        s.lr = detail::optionalOf<double>(j, "lr");
        if (auto it = j.find("step_breakdown"); it != j.end()) {
            s.stepBreakdown = phasesOf(*it);
        }
        s.energyJoules = detail::optionalOf<double>(j, "energy_j");
        s.flopsPerSample = detail::optionalOf<double>(j, "flops_per_sample");
        s.peakFlopsPerSec = detail::optionalOf<double>(j, "peak_flops_per_sec");
        s.peakSource = j.value("peak_source", std::string()).substr(0, 200);
        s.energySource = j.value("energy_source", std::string()).substr(0, 200);
        s.machineCpus = detail::optionalOf<int>(j, "machine_cpus");
        if (s.kind == SampleKind::State) {
            s.state = stateFromString(j.at("state").get<std::string>());
            s.message = j.value("message", std::string());
        }
        return s;
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed metric sample: {}", e.what()));
    }
}

} // namespace devicerace
