// The bf16 GEMM route cache (see bf16_route_cache.h).
#include "devices/bf16_route_cache.h"

#include <torch/version.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mutex>

#include "devicerace/peak_flops.h"
#include "devices/cpu_info.h"
#include "util/file_util.h"

namespace devicerace::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// 2: the oneDNN route widens its result with the engine's own loop (format 1's timings are of
// ATen's copy, so they are timed again). 3: the engine's own AVX-512 BF16 kernel is a route (a
// format 2 choice never timed it). 4: its AMX kernel is a route.
constexpr int kFormat = 4;
constexpr std::uint64_t kMaxBytes = 1u << 20;
std::mutex g_mutex;

std::string prefix() { return fmt::format("{}|", hostCpuModel()); }
std::string suffixVersion() { return fmt::format("|LibTorch {}|", TORCH_VERSION); }

json readCache(const fs::path& file) {
    try {
        auto j = json::parse(readFileBounded(file, kMaxBytes));
        if (j.is_object() && j.value("format", 0) == kFormat && j.contains("routes") && j["routes"].is_object()) {
            return j;
        }
    } catch (const std::exception&) {
        // absent, unreadable or not ours: timed again and rewritten
    }
    return json{{"format", kFormat}, {"routes", json::object()}};
}

} // namespace

fs::path bf16RouteCacheFile() {
    const auto peaks = peakCacheFile();
    return peaks.empty() ? fs::path() : peaks.parent_path() / "bf16-routes.json";
}

std::string bf16RouteCacheKey(int threads, int workers, const std::string& shape) {
    return fmt::format("{}{} thread{}{}{}{}", prefix(), threads, threads == 1 ? "" : "s",
                       workers > 1 ? fmt::format(" x {} workers", workers) : "", suffixVersion(), shape);
}

std::optional<std::string> cachedBf16Route(const std::string& key) {
    const auto file = bf16RouteCacheFile();
    if (file.empty()) {
        return std::nullopt;
    }
    std::lock_guard lock(g_mutex);
    const auto cache = readCache(file);
    const auto& routes = cache["routes"];
    if (const auto it = routes.find(key); it != routes.end() && it->is_object()) {
        if (const auto r = it->find("route"); r != it->end() && r->is_string()) {
            return r->get<std::string>();
        }
    }
    return std::nullopt;
}

void keepBf16Route(const std::string& key, const std::string& route,
                   const std::vector<std::pair<std::string, double>>& secondsPerCall) {
    const auto file = bf16RouteCacheFile();
    if (file.empty()) {
        return;
    }
    std::lock_guard lock(g_mutex);
    auto cache = readCache(file);
    json seconds = json::object();
    for (const auto& [name, s] : secondsPerCall) {
        seconds[name] = s;
    }
    cache["routes"][key] = {{"route", route}, {"seconds_per_call", seconds}};
    (void)replaceFileBestEffort(file, cache.dump(1) + "\n");
}

std::map<std::string, std::map<std::string, int>> cachedBf16RouteCounts() {
    std::map<std::string, std::map<std::string, int>> out;
    const auto file = bf16RouteCacheFile();
    if (file.empty()) {
        return out;
    }
    std::lock_guard lock(g_mutex);
    const auto cache = readCache(file);
    const auto head = prefix();
    const auto version = suffixVersion();
    for (const auto& [key, value] : cache["routes"].items()) {
        // "<model>|<threads>|LibTorch <v>|<shape>": this CPU's and this LibTorch's only.
        if (key.rfind(head, 0) != 0 || !value.is_object() || !value.contains("route") || !value["route"].is_string()) {
            continue;
        }
        const auto rest = key.substr(head.size());
        const auto v = rest.find(version);
        if (v == std::string::npos) {
            continue;
        }
        ++out[rest.substr(0, v)][value["route"].get<std::string>()];
    }
    return out;
}

} // namespace devicerace::detail
