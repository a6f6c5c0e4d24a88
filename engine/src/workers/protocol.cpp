#include "workers/protocol.h"

#include "lanes/lane_fields.h"

#include <fmt/format.h>

#include <charconv>

#include "devicerace/errors.h"
#include "util/json_util.h"
#include "workers/workload_schema.h"
#include "devicerace/workload.h"

namespace devicerace::detail {

using nlohmann::json;

void LineSplitter::feed(std::string_view bytes, const std::function<void(std::string&&)>& onLine) {
    while (!bytes.empty()) {
        const auto nl = bytes.find('\n');
        const auto chunk = bytes.substr(0, nl);
        if (!m_skipping) {
            if (m_partial.size() + chunk.size() > m_max) {
                m_skipping = true;
                m_partial.clear();
                m_partial.shrink_to_fit();
            } else {
                m_partial.append(chunk);
            }
        }
        if (nl == std::string_view::npos) {
            return;
        }
        bytes.remove_prefix(nl + 1);
        if (m_skipping) {
            ++m_dropped;
            m_skipping = false;
            continue;
        }
        std::string line;
        line.swap(m_partial);
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        onLine(std::move(line));
    }
}

std::optional<Message> parseMessage(std::string_view line) {
    if (line.size() > kMaxLineBytes || line.empty() || line.front() != '{') {
        return std::nullopt;
    }
    // Depth-limited by nlohmann's own recursion; an object nested absurdly deep is refused by
    // the size cap long before the stack matters (1 MiB of '{' is 1M levels: checked below).
    std::size_t depth = 0, maxDepth = 0;
    for (char c : line) {
        if (c == '{' || c == '[') {
            maxDepth = std::max(maxDepth, ++depth);
        } else if ((c == '}' || c == ']') && depth > 0) {
            --depth;
        }
    }
    // Nesting deeper than any message has (strings with brackets only over-count).
    constexpr std::size_t kMaxDepth = 64;
    if (maxDepth > kMaxDepth) {
        return std::nullopt;
    }
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        return std::nullopt;
    }
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) {
        return std::nullopt;
    }
    Message m;
    m.type = it->get<std::string>();
    m.body = std::move(j);
    return m;
}

std::string encodeMessage(const json& message) {
    return message.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::optional<int> protoMajor(const std::string& version) {
    const auto dot = version.find('.');
    int major = 0;
    auto [ptr, ec] =
        std::from_chars(version.data(), version.data() + (dot == std::string::npos ? version.size() : dot), major);
    if (ec != std::errc() || dot == std::string::npos || ptr != version.data() + dot) {
        return std::nullopt;
    }
    return major;
}

std::string protoVersion() { return fmt::format("{}.{}", kProtoMajor, kProtoMinor); }

namespace {

json expectedParameters(const std::string& workload) {
    try {
        return findWorkload(workload).parameters;
    } catch (const std::exception&) {
        return nullptr; // the worker names the unknown workload itself
    }
}

// The lane's workload as the schema has it (workers/workload_schema.h): what a lane program in
// another framework builds its network and training from. Null for names this engine does not
// list (script lanes, or the worker names the unknown workload itself).
json workloadEntry(const std::string& workload) {
    if (workload == kScriptWorkload) {
        return nullptr;
    }
    try {
        return workloadSchemaEntry(workload);
    } catch (const std::exception&) {
        return nullptr;
    }
}

} // namespace

json configMessage(const LaneSpec& spec, const LaneRunSettings& s) {
    LaneSpec local = spec;
    local.host.clear(); // the worker runs it where it is
    local.isolate.reset();
    local.cli.reset();
    local.cmd.reset(); // a program name never travels to a worker
    return {{"type", "config"},
            {"proto", protoVersion()},
            {"workload", s.workload},
            // The lane as typed fields, each read back by its key's parser (lanes/lane_keys.cpp);
            // the text form too, for workers of protocol 1.0.
            {"lane_fields", laneToFields(local)},
            {"lane", formatLaneSpec(local)},
            {"data", s.dataMode ? json(toString(*s.dataMode)) : json(nullptr)},
            {"data_dir", s.dataDir},
            {"train_limit", orNull(s.trainLimit)},
            {"test_limit", orNull(s.testLimit)},
            {"epochs", orNull(s.epochs)},
            {"steps", orNull(s.steps)},
            {"target", orNull(s.targetAccuracy)},
            {"target_loss", orNull(s.targetLoss)},
            {"seed", s.seed},
            {"eval_every", s.evalEverySteps},
            {"warmup", s.warmupSteps},
            {"report_interval", s.reportIntervalSeconds},
            {"fail_at_step", s.failAtStep},
            // Other trainers check their network against the engine's (the same model?).
            {"expected_parameters", expectedParameters(s.workload)},
            // Protocol 1.2: the workload's definition and the constants the trainers share, so a
            // lane program copies nothing of the engine's by hand.
            {"workload_info", workloadEntry(s.workload)},
            {"constants", sharedConstants()},
            // Script lanes: the user's command (the script lane runs it; any other worker ignores
            // it) and the CPUs of this machine its processes may use.
            {"command", s.command},
            {"cpus", s.cpus},
            {"dist", s.dist ? json{{"rank", s.dist->rank},
                                   {"world", s.dist->world},
                                   {"backend", s.dist->backend},
                                   {"store_host", s.dist->storeHost},
                                   {"store_port", s.dist->storePort},
                                   {"bind_host", s.dist->bindHost},
                                   {"timeout", s.dist->timeoutSeconds},
                                   {"fixed_global_batch", s.dist->fixedGlobalBatch}}
                            : json(nullptr)}};
}

std::pair<LaneSpec, LaneRunSettings> configFromMessage(const json& m) {
    try {
        LaneRunSettings s;
        s.workload = m.at("workload").get<std::string>();
        auto spec = m.contains("lane_fields") ? laneFromFields(m.at("lane_fields"))
                                              : parseLaneSpec(m.at("lane").get<std::string>());
        if (!spec.host.empty()) {
            throw UsageError("a worker runs its lane where it is: the lane may not name another host");
        }
        if (laneKind(spec) == LaneKind::Parallel || !spec.launcher.empty()) {
            throw UsageError("a worker trains one rank of a data-parallel lane, not a whole one (config.dist)");
        }
        if (auto data = optionalOf<std::string>(m, "data")) {
            if (*data != "real" && *data != "synthetic") {
                throw DataError(fmt::format("config: data '{}' (expected real or synthetic)", *data));
            }
            s.dataMode = *data == "real" ? DataMode::Real : DataMode::Synthetic;
        }
        s.dataDir = m.value("data_dir", std::string());
        s.trainLimit = optionalOf<std::int64_t>(m, "train_limit");
        s.testLimit = optionalOf<std::int64_t>(m, "test_limit");
        s.epochs = optionalOf<int>(m, "epochs");
        s.steps = optionalOf<std::int64_t>(m, "steps");
        s.targetAccuracy = optionalOf<double>(m, "target");
        s.targetLoss = optionalOf<double>(m, "target_loss");
        s.seed = checkedValue(m, "seed", std::uint64_t{0});
        s.evalEverySteps = checkedValue(m, "eval_every", std::int64_t{0});
        s.warmupSteps = checkedValue(m, "warmup", std::int64_t{20});
        s.reportIntervalSeconds = m.value("report_interval", 0.1);
        s.failAtStep = checkedValue(m, "fail_at_step", std::int64_t{0});
        if (auto it = m.find("dist"); it != m.end() && !it->is_null()) {
            DistConfig d;
            d.rank = checkedAt<int>(*it, "rank");
            d.world = checkedAt<int>(*it, "world");
            d.backend = it->at("backend").get<std::string>();
            d.storeHost = it->value("store_host", std::string());
            d.storePort = checkedValue(*it, "store_port", 0);
            d.bindHost = it->value("bind_host", std::string());
            d.timeoutSeconds = it->value("timeout", 60.0);
            d.fixedGlobalBatch = it->value("fixed_global_batch", false);
            if (d.world < 1 || d.world > 4096 || d.rank < 0 || d.rank >= d.world ||
                (d.backend != "gloo" && d.backend != "nccl") || d.storePort < 0 || d.storePort > 65535 ||
                (d.rank > 0 && (d.storeHost.empty() || d.storePort == 0)) ||
                !(d.timeoutSeconds >= 1 && d.timeoutSeconds <= 3600)) {
                throw DataError("config: dist is out of range (rank, world, backend, store or timeout)");
            }
            s.dist = std::move(d);
        }
        if ((s.trainLimit && *s.trainLimit < 1) || (s.testLimit && *s.testLimit < 1) || (s.epochs && *s.epochs < 1) ||
            (s.steps && *s.steps < 1) || s.evalEverySteps < 0 || s.warmupSteps < 0 ||
            !(s.reportIntervalSeconds >= 0.01 && s.reportIntervalSeconds <= 60)) {
            throw DataError("config: a count or interval is out of range");
        }
        return {std::move(spec), std::move(s)};
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed config message: {}", e.what()));
    }
}

json readyMessage(const ReadyInfo& r) {
    return {{"type", "ready"},
            {"batch", r.batch},
            {"total_steps", r.totalSteps},
            {"threads", orNull(r.threads)},
            {"dataset",
             {{"name", r.datasetName},
              {"source", r.datasetSource},
              {"synthetic", r.synthetic},
              {"train", r.trainCount},
              {"test", r.testCount},
              {"vocabulary", r.vocabulary},
              {"tokens", r.tokenText},
              {"note", r.dataNote}}},
            {"store_port", orNull(r.storePort)},
            {"ranks", orNull(r.ranks)},
            {"job", r.job},
            {"nodes", r.nodes}};
}

ReadyInfo readyFromMessage(const json& m) {
    try {
        ReadyInfo r;
        r.batch = checkedAt<std::int64_t>(m, "batch");
        r.totalSteps = checkedAt<std::int64_t>(m, "total_steps");
        r.threads = optionalOf<int>(m, "threads");
        const auto& d = m.at("dataset");
        r.datasetName = d.at("name").get<std::string>();
        r.datasetSource = d.value("source", std::string());
        r.synthetic = d.value("synthetic", false);
        r.trainCount = checkedValue(d, "train", std::int64_t{0});
        r.testCount = checkedValue(d, "test", std::int64_t{0});
        r.dataNote = d.value("note", std::string());
        r.vocabulary = checkedValue(d, "vocabulary", 0);
        if (d.contains("tokens") && d["tokens"].is_array()) {
            r.tokenText = d["tokens"].get<std::vector<std::string>>();
        }
        if (r.vocabulary < 0 || (!r.tokenText.empty() && static_cast<int>(r.tokenText.size()) != r.vocabulary)) {
            throw DataError("ready: tokens must list one text per id of the vocabulary");
        }
        r.storePort = optionalOf<int>(m, "store_port");
        r.ranks = optionalOf<int>(m, "ranks");
        r.job = m.value("job", std::string());
        r.nodes = m.value("nodes", std::string());
        if ((r.ranks && (*r.ranks < 1 || *r.ranks > 65536)) || r.job.size() > 256 || r.nodes.size() > 4096) {
            throw DataError("ready: ranks, job or nodes out of range");
        }
        // 0: not known before the lane runs (a script lane's batch and length are its command's).
        if (r.batch < 0 || r.totalSteps < 0) {
            throw DataError("ready: batch and total_steps must be 0 (not known) or more");
        }
        return r;
    } catch (const json::exception& e) {
        throw DataError(fmt::format("malformed ready message: {}", e.what()));
    }
}

} // namespace devicerace::detail
