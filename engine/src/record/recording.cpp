#include "devicerace/recording.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>

#include "util/file_util.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/exports.h"
#include "devicerace/summary.h"
#include "devices/device_json.h"
#include "util/json_util.h"

namespace devicerace {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Bounds for files that may come from other people.
constexpr std::uint64_t kMaxManifestBytes = 1u << 20;
constexpr std::uint64_t kMaxLaneFileBytes = 1ull << 30;
constexpr std::size_t kMaxLineBytes = 1u << 20;
constexpr std::size_t kMaxLanes = 256;

std::string isoNow() {
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

template <typename T>
json orNull(const std::optional<T>& v) {
    return v ? json(*v) : json(nullptr);
}

} // namespace

RecordingWriter::RecordingWriter(const fs::path& dir, const Race& race) : m_dir(dir) {
    std::error_code ec;
    if (fs::exists(dir / "manifest.json", ec)) {
        throw Error(fmt::format("{}: already holds a recording; choose another folder", dir.string()));
    }
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) {
        throw Error(fmt::format("{}: cannot create the recording folder: {}", dir.string(),
                                ec ? ec.message() : "not a folder"));
    }
    json m;
    m["format"] = kRecordingFormat;
    m["app_version"] = DEVICERACE_VERSION;
    m["workload"] = race.spec().workload;
    m["dataset"] = {{"name", race.dataset().name}, {"synthetic", race.dataset().synthetic}};
    if (const auto& d = race.dataset(); d.vocabulary > 0) { // the text's alphabet, saved with the race
        m["dataset"]["vocabulary"] = d.vocabulary;
        if (d.tokenText.size() <= kListedTokenTexts) {
            m["dataset"]["tokens"] = d.tokenText;
        }
    }
    m["mode"] = race.spec().fair ? "fair" : "live";
    m["warmup_steps"] = race.spec().warmupSteps;
    m["target_accuracy"] = orNull(race.spec().targetAccuracy);
    m["target_loss"] = orNull(race.spec().targetLoss);
    m["started_at"] = isoNow();
    if (!race.spec().command.empty()) {
        m["command"] = race.spec().command; // shown by replays; never run from here
    }
    // The machine the race ran on, in the device report's one JSON shape (the hello's, the CLI's).
    m["machine"] = detail::deviceReportJson(deviceReport());
    m["lanes"] = json::array();
    int index = 0;
    for (auto* lane : race.lanes()) {
        const auto file = fmt::format("lane-{}.jsonl", index++);
        m["lanes"].push_back(
            {{"name", lane->spec().name},
             {"file", file},
             {"spec", formatLaneSpec(lane->spec())},
             {"device", lane->spec().device},
             {"kind", toString(lane->kind())},
             {"host", lane->spec().host},
             {"machine", lane->workerMachine() ? detail::deviceReportJson(*lane->workerMachine()) : json(nullptr)},
             {"cost_per_hour", orNull(lane->spec().costPerHour)},
             {"total_steps", lane->totalSteps()},
             {"batch", lane->batch()}});
        std::FILE* f = std::fopen((dir / file).c_str(), "wb");
        if (!f) {
            throw Error(fmt::format("{}: cannot write: {}", (dir / file).string(), std::strerror(errno)));
        }
        m_files[lane->spec().name] = f;
        m_paths.push_back(dir / file);
    }
    writeFileAtomically(dir / "manifest.json", m.dump(2) + "\n");
}

RecordingWriter::~RecordingWriter() {
    for (auto& [name, f] : m_files) {
        std::fclose(f);
    }
}

void RecordingWriter::append(const MetricSample& sample) {
    auto it = m_files.find(sample.lane);
    if (it == m_files.end()) {
        return;
    }
    const std::string line = toJsonLine(sample) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), it->second) != line.size() || std::fflush(it->second) != 0) {
        throw Error(fmt::format("{}: recording write failed: {}", m_dir.string(), std::strerror(errno)));
    }
}

Recording readRecording(const fs::path& dir) {
    detail::checkFolder(dir, "a DeviceRace recording (manifest.json and lane files)");
    Recording r;
    r.dir = dir;
    json m;
    try {
        m = json::parse(detail::readFileBounded(dir / "manifest.json", kMaxManifestBytes));
    } catch (const json::exception& e) {
        throw DataError(fmt::format("{}: not valid JSON ({})", (dir / "manifest.json").string(), e.what()));
    }
    const auto where = (dir / "manifest.json").string();
    if (!m.is_object() || !m.contains("format") || !m["format"].is_number_integer() || m["format"].get<int>() < 1 ||
        m["format"].get<int>() > kRecordingFormat) {
        throw DataError(fmt::format("{}: unsupported recording format {} (this DeviceRace reads formats 1 to {})",
                                    where, m.is_object() && m.contains("format") ? m["format"].dump() : "(missing)",
                                    kRecordingFormat));
    }
    const int format = m["format"].get<int>();
    try {
        r.appVersion = m.value("app_version", std::string());
        r.workload = m.at("workload").get<std::string>();
        r.dataset = m.at("dataset").value("name", std::string());
        r.synthetic = m.at("dataset").value("synthetic", false);
        r.vocabulary = m.at("dataset").value("vocabulary", 0);
        if (const auto& d = m.at("dataset"); d.contains("tokens") && d["tokens"].is_array()) {
            r.tokenText = d["tokens"].get<std::vector<std::string>>();
        }
        r.fair = m.value("mode", std::string("live")) == "fair";
        if (const auto it = m.find("warmup_steps"); it != m.end() && it->is_number_integer() && *it >= 0) {
            r.warmupSteps = it->get<std::int64_t>();
        }
        if (m.contains("target_accuracy") && m["target_accuracy"].is_number()) {
            r.targetAccuracy = m["target_accuracy"].get<double>();
        }
        if (m.contains("target_loss") && m["target_loss"].is_number()) {
            r.targetLoss = m["target_loss"].get<double>();
        }
        r.startedAt = m.value("started_at", std::string());
        if (const auto it = m.find("command"); it != m.end() && it->is_array() && it->size() <= 4096) {
            for (const auto& word : *it) {
                if (word.is_string() && word.get_ref<const std::string&>().size() <= 65536) {
                    r.command.push_back(word.get<std::string>());
                }
            }
        }
        if (format >= 2) {
            r.machine = detail::deviceReportFromJsonValue(m.at("machine"));
        } else { // format 1: the machine as a few strings
            const auto& d = m.value("device", json::object());
            r.machine.cpu.model = d.value("cpu", std::string());
            r.machine.cpu.blas = d.value("blas", std::string());
            r.gpuNames = d.value("gpus", std::string());
            r.machine.torchVersion = d.value("torch", std::string());
            r.machine.torchCudaVersion = d.value("cuda", std::string());
            r.machine.cudnnVersion = d.value("cudnn", std::string());
            r.machine.hostName = d.value("host", std::string());
        }
        for (const auto& g : r.machine.gpus) {
            r.gpuNames += (r.gpuNames.empty() ? "" : ", ") + g.name;
        }
        const auto& lanes = m.at("lanes");
        if (!lanes.is_array() || lanes.empty() || lanes.size() > kMaxLanes) {
            throw DataError(fmt::format("{}: \"lanes\" must list 1 to {} lanes", where, kMaxLanes));
        }
        for (const auto& l : lanes) {
            RecordedLane lane;
            lane.name = l.at("name").get<std::string>();
            lane.file = l.at("file").get<std::string>();
            lane.spec = l.value("spec", std::string());
            lane.device = l.value("device", std::string());
            lane.host = l.value("host", std::string());
            lane.kind = l.value("kind", std::string("thread"));
            if (const auto it = l.find("machine"); it != l.end() && it->is_object()) {
                lane.machineReport = detail::deviceReportFromJsonValue(*it);
                lane.machine = detail::describeMachine(*lane.machineReport);
            } else if (format == 1) {
                lane.machine = l.value("machine", std::string());
            }
            if (l.contains("cost_per_hour") && l["cost_per_hour"].is_number()) {
                lane.costPerHour = l["cost_per_hour"].get<double>();
            }
            lane.totalSteps = detail::checkedValue(l, "total_steps", std::int64_t{0});
            lane.batch = detail::checkedValue(l, "batch", std::int64_t{0});
            // Lane files live inside the recording: no paths, no escapes.
            if (lane.file.empty() || lane.file.find('/') != std::string::npos ||
                lane.file.find("..") != std::string::npos) {
                throw DataError(fmt::format("{}: lane file name '{}' is not a plain file name", where, lane.file));
            }
            r.lanes.push_back(std::move(lane));
        }
    } catch (const json::exception& e) {
        throw DataError(fmt::format("{}: malformed manifest ({})", where, e.what()));
    }
    for (const auto& lane : r.lanes) {
        const auto file = dir / lane.file;
        std::error_code ec;
        const auto size = fs::file_size(file, ec);
        if (ec) {
            throw DataError(fmt::format("{}: missing lane file of {}", file.string(), lane.name));
        }
        if (size > kMaxLaneFileBytes) {
            throw DataError(fmt::format("{}: {} bytes, more than a recording lane may hold", file.string(), size));
        }
        std::ifstream in(file, std::ios::binary);
        auto& out = r.samples[lane.name];
        std::string line;
        std::size_t number = 0;
        char c;
        bool more = true;
        while (more) {
            line.clear();
            bool newline = false;
            while (in.get(c)) {
                if (c == '\n') {
                    newline = true;
                    break;
                }
                line += c;
                if (line.size() > kMaxLineBytes) {
                    throw DataError(
                        fmt::format("{}: line {} is longer than {} bytes", file.string(), number + 1, kMaxLineBytes));
                }
            }
            more = newline;
            if (line.empty()) {
                continue;
            }
            ++number;
            try {
                auto s = sampleFromJsonLine(line);
                s.lane = lane.name;
                out.push_back(std::move(s));
            } catch (const DataError& e) {
                if (!newline) {
                    // The last line, cut off mid-write (crash, power loss): keep what came before.
                    r.warnings.push_back(
                        fmt::format("{}: the last line is cut off; read up to line {}", file.string(), number - 1));
                    break;
                }
                throw DataError(fmt::format("{}: line {}: {}", file.string(), number, e.what()));
            }
        }
    }
    return r;
}

LaneSummary summarizeRecordedLane(const Recording& r, const RecordedLane& lane, const RunningSummary& running,
                                  std::size_t played) {
    LaneSpec spec;
    try {
        spec = parseLaneSpec(lane.spec.empty() ? "cpu" : lane.spec);
    } catch (const Error&) {
    }
    spec.name = lane.name;
    spec.device = lane.device.empty() ? spec.device : lane.device;
    spec.costPerHour = lane.costPerHour;
    auto s = running.summary(spec, lane.batch, {r.targetAccuracy, r.targetLoss});
    s.warmupSteps = r.warmupSteps;
    s.datasetName = r.dataset;
    s.synthetic = r.synthetic;
    if (played >= r.samples.at(lane.name).size() && !isTerminal(s.state)) {
        s.state = LaneState::Stopped;
        s.error = fmt::format("the recording ends at step {}, before the lane did", s.steps);
    }
    return s;
}

LaneSummary summarizeRecordedLane(const Recording& r, const RecordedLane& lane, std::size_t count) {
    RunningSummary running;
    const auto& samples = r.samples.at(lane.name);
    const std::size_t played = std::min(count, samples.size());
    for (std::size_t i = 0; i < played; ++i) {
        running.add(samples[i]);
    }
    return summarizeRecordedLane(r, lane, running, played);
}

RaceSummary summarizeRecording(const Recording& r) {
    RaceSummary out;
    out.workload = r.workload;
    out.command = r.command;
    out.datasetName = r.dataset;
    out.synthetic = r.synthetic;
    out.fair = r.fair;
    for (const auto& lane : r.lanes) {
        out.lanes.push_back(summarizeRecordedLane(r, lane, SIZE_MAX));
    }
    finishRaceSummary(out);
    return out;
}

std::vector<fs::path> repeatSetFolders(const fs::path& dir) {
    std::error_code ec;
    if (fs::exists(dir / "manifest.json", ec)) {
        return {};
    }
    std::vector<std::pair<int, fs::path>> found;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        constexpr std::string_view kPrefix = "repeat-";
        int k = 0;
        const char* last = name.data() + name.size();
        if (name.size() > kPrefix.size() && name.starts_with(kPrefix) &&
            std::from_chars(name.data() + kPrefix.size(), last, k).ptr == last && k > 0 &&
            fs::exists(it->path() / "manifest.json", ec)) {
            found.emplace_back(k, it->path());
        }
    }
    std::sort(found.begin(), found.end());
    std::vector<fs::path> folders;
    for (auto& f : found) {
        folders.push_back(std::move(f.second));
    }
    return folders;
}

} // namespace devicerace
