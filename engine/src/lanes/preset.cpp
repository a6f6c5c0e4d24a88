#include "devicerace/environment.h"
#include "devicerace/preset.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include "util/file_util.h"
#include "devicerace/device_info.h"
#include "devicerace/errors.h"
#include "devicerace/workload.h"
#include "util/text_util.h"
#include "util/json_util.h"

namespace devicerace {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A preset is a few hundred bytes; anything far larger is not one.
constexpr std::uint64_t kMaxPresetBytes = 1u << 20;
constexpr int kFormat = 1;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
    throw DataError(fmt::format("{}: {}", origin, what));
}

// Expands one generic lane into concrete lanes for this machine.
std::vector<LaneSpec> expandLane(const std::string& text, std::vector<std::string>& notes) {
    auto comma = text.find(',');
    const std::string device(trim(std::string_view(text).substr(0, comma)));
    const std::string rest = comma == std::string::npos ? "" : text.substr(comma);
    const auto& report = deviceReport();
    const bool gpu = report.cudaAvailable && !report.gpus.empty();
    const int cores = std::max(1, report.cpu.physicalCores);
    std::vector<std::string> concrete;
    if (device == "best-gpu") {
        if (!gpu) {
            notes.push_back(
                fmt::format("no CUDA device here ({}): lane '{}' left out", report.cudaUnavailableReason, text));
            return {};
        }
        concrete.push_back("cuda:0" + rest);
    } else if (device == "best-device") {
        concrete.push_back((gpu ? std::string("cuda:0") : fmt::format("cpu,threads={}", cores)) + rest);
    } else if (device == "all-cores") {
        concrete.push_back(fmt::format("cpu,threads={}", cores) + rest);
    } else if (const auto at = text.find("workers=powers");
               at != std::string::npos && comma != std::string::npos && at > comma) {
        // (A key after the device only: "best-deviceworkers=powers" has none; found by fuzzing.)
        // A scaling race (seed 002): 1, 2, 4, ... data-parallel workers up to what is here —
        // CPU processes up to the cores, or GPUs (one rank each) up to the GPUs.
        const bool onGpu = device == "best-gpu" || device.starts_with("cuda");
        if (onGpu && !gpu) {
            notes.push_back(
                fmt::format("no CUDA device here ({}): lane '{}' left out", report.cudaUnavailableReason, text));
            return {};
        }
        const int most = onGpu ? static_cast<int>(report.gpus.size()) : cores;
        std::vector<int> counts;
        for (int n = 1; n < most; n *= 2) {
            counts.push_back(n);
        }
        counts.push_back(most);
        const auto keys = text.substr(comma, at - comma) + text.substr(at + 14); // ",...," without workers=powers
        for (int n : counts) {
            concrete.push_back(onGpu ? fmt::format("cuda:0-{}{}", n - 1, keys)
                                     : fmt::format("cpu{},workers={}", keys, n));
        }
        for (auto& c : concrete) {
            while (c.find(",,") != std::string::npos) {
                c.erase(c.find(",,"), 1);
            }
            if (c.ends_with(",")) {
                c.pop_back();
            }
        }
    } else if (text.find("threads=powers") != std::string::npos) {
        const auto at = text.find("threads=powers");
        std::vector<int> counts;
        for (int t = 1; t < cores; t *= 2) {
            counts.push_back(t);
        }
        counts.push_back(cores);
        for (int t : counts) {
            concrete.push_back(text.substr(0, at) + fmt::format("threads={}", t) + text.substr(at + 14));
        }
    } else {
        concrete.push_back(text);
    }
    std::vector<LaneSpec> out;
    for (const auto& c : concrete) {
        auto spec = parseLaneSpec(c);
        if (spec.cmd || spec.cli || spec.fault || spec.framework == "script" || spec.copy || spec.workdir ||
            spec.args) {
            // A file from someone else never names a program to run (nor crashes a lane, nor
            // copies a folder to another machine).
            throw UsageError(fmt::format("lane '{}': presets may not use cmd=, cli=, fault=, framework=script, copy=, "
                                         "workdir= or args=",
                                         c));
        }
        out.push_back(std::move(spec));
    }
    return out;
}

} // namespace

std::vector<fs::path> presetDirs() {
    std::vector<fs::path> dirs;
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_PRESETS")) {
        dirs.emplace_back(env);
    }
    // Relocatable installs (cmake --install --prefix, the .deb): next to the executable.
    std::error_code ec;
    const auto exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        dirs.push_back(exe.parent_path().parent_path() / "share" / "devicerace" / "presets");
    }
#ifdef DEVICERACE_INSTALL_PRESETS
    dirs.emplace_back(DEVICERACE_INSTALL_PRESETS);
#endif
#ifdef DEVICERACE_SOURCE_PRESETS
    dirs.emplace_back(DEVICERACE_SOURCE_PRESETS);
#endif
    return dirs;
}

std::vector<std::string> presetNames() {
    std::set<std::string> names;
    for (const auto& dir : presetDirs()) {
        std::error_code ec;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            if (it->path().extension() == ".json") {
                names.insert(it->path().stem().string());
            }
        }
    }
    return {names.begin(), names.end()};
}

namespace {

// A stand-in recording: a plain relative folder name beside the preset ("recordings/x-h100"),
// never absolute, never "..": a preset file cannot point the window at any folder on the disk.
fs::path standInPath(const std::string& origin, const std::string& title, const std::string& value) {
    const fs::path p(value);
    bool ok = !value.empty() && value.size() <= 200 && p.is_relative();
    for (const auto& part : p) {
        const auto s = part.string();
        ok = ok && !s.empty() && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char ch) {
                 return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
             });
    }
    if (!ok) {
        bad(origin, fmt::format("race '{}': stand_in \"{}\" must be a relative folder beside the preset "
                                "(letters, digits, '-', '_', '.'; no '..')",
                                title, value));
    }
    return p;
}

} // namespace

Preset parsePreset(const std::string& text, const std::string& origin, const fs::path& baseDir) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        bad(origin, fmt::format("not valid JSON ({})", e.what()));
    }
    if (!j.is_object()) {
        bad(origin, "a preset must be a JSON object");
    }
    if (!j.contains("format") || !j["format"].is_number_integer() || j["format"].get<int>() != kFormat) {
        bad(origin, fmt::format("unsupported preset format {} (this DeviceRace reads format {})",
                                j.contains("format") ? j["format"].dump() : "(missing)", kFormat));
    }
    Preset p;
    try {
        p.name = j.at("name").get<std::string>();
        p.description = j.value("description", std::string());
        p.seed = j.value("seed", std::string());
        const auto& races = j.at("races");
        if (!races.is_array() || races.empty() || races.size() > 64) {
            bad(origin, "\"races\" must be a list of 1 to 64 races");
        }
        for (const auto& r : races) {
            PresetRace race;
            race.title = r.value("title", std::string());
            race.spec.workload = r.at("workload").get<std::string>();
            findWorkload(race.spec.workload); // throws for unknown names
            if (r.contains("epochs")) {
                race.spec.epochs = detail::checkedAt<int>(r, "epochs");
            }
            if (r.contains("steps")) {
                race.spec.steps = detail::checkedAt<std::int64_t>(r, "steps");
            }
            if (r.contains("data")) {
                const auto d = r["data"].get<std::string>();
                if (d != "real" && d != "synthetic") {
                    bad(origin, fmt::format("race '{}': data \"{}\" (expected real or synthetic)", race.title, d));
                }
                race.spec.data = d == "real" ? DataMode::Real : DataMode::Synthetic;
            }
            race.spec.fair = r.value("fair", false);
            race.spec.seed = detail::checkedValue(r, "seed", std::uint64_t{0});
            if (r.contains("target_accuracy")) {
                race.spec.targetAccuracy = r["target_accuracy"].get<double>();
            }
            const auto& lanes = r.at("lanes");
            if (!lanes.is_array() || lanes.empty() || lanes.size() > 64) {
                bad(origin, fmt::format("race '{}': \"lanes\" must be a list of 1 to 64 lane specs", race.title));
            }
            bool gpuLeftOut = false;
            for (const auto& lane : lanes) {
                const auto before = race.notes.size();
                for (auto& spec : expandLane(lane.get<std::string>(), race.notes)) {
                    race.spec.lanes.push_back(std::move(spec));
                }
                gpuLeftOut =
                    gpuLeftOut || (race.notes.size() > before && race.notes.back().starts_with("no CUDA device"));
            }
            if (r.contains("stand_in")) {
                const auto rel = standInPath(origin, race.title, r["stand_in"].get<std::string>());
                if (gpuLeftOut) {
                    race.standIn = baseDir / rel;
                    race.notes.push_back(fmt::format("the GPU lane recorded on another machine ({}) races beside the "
                                                     "live lanes in the window; devicerace-cli replay {} prints it",
                                                     rel.string(), race.standIn->string()));
                }
            }
            if (race.spec.lanes.empty()) {
                race.spec.lanes = defaultLanes();
                race.notes.push_back("no lane of the preset fits this machine: racing the default lanes");
            }
            p.races.push_back(std::move(race));
        }
    } catch (const json::exception& e) {
        bad(origin, fmt::format("malformed preset ({})", e.what()));
    } catch (const UsageError& e) {
        bad(origin, e.what());
    }
    return p;
}

Preset loadPreset(const std::string& nameOrPath) {
    fs::path file;
    if (nameOrPath.ends_with(".json") || nameOrPath.find('/') != std::string::npos) {
        file = nameOrPath;
    } else {
        for (const auto& dir : presetDirs()) {
            std::error_code ec;
            if (fs::exists(dir / (nameOrPath + ".json"), ec)) {
                file = dir / (nameOrPath + ".json");
                break;
            }
        }
        if (file.empty()) {
            auto names = presetNames();
            std::string known;
            for (const auto& n : names) {
                known += (known.empty() ? "" : ", ") + n;
            }
            throw UsageError(
                fmt::format("unknown preset '{}' (known: {})", nameOrPath, known.empty() ? "none found" : known));
        }
    }
    return parsePreset(detail::readFileBounded(file, kMaxPresetBytes), file.string(), file.parent_path());
}

} // namespace devicerace
