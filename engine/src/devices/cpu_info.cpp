#include "devices/cpu_info.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "util/text_util.h"

namespace devicerace::detail {

std::string bf16UnitsOf(std::string_view flags) {
    bool amx = false, avx512 = false;
    for (const auto& word : splitString(flags, ' ')) {
        amx = amx || word == "amx_bf16";
        avx512 = avx512 || word == "avx512_bf16";
    }
    return amx ? "AMX" : avx512 ? "AVX-512 BF16" : "";
}

bool amxModelWithoutAmx(std::string_view vendor, int family, int model, std::string_view flags) {
    constexpr std::array<int, 4> kAmxModels = {143, 207, 173, 174};
    return vendor == "GenuineIntel" && family == 6 &&
           std::find(kAmxModels.begin(), kAmxModels.end(), model) != kAmxModels.end() && bf16UnitsOf(flags) != "AMX";
}

namespace {

int cpuinfoNumber(std::string_view text) {
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    return ec == std::errc() && end == text.data() + text.size() ? v : 0;
}

} // namespace

HostCpu readHostCpu() {
    HostCpu cpu;
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    std::set<std::pair<std::string, std::string>> cores;
    std::string physicalId = "0", vendor, flags;
    int family = 0, model = 0;
    bool flagsRead = false;
    while (std::getline(in, line)) {
        auto colon = line.find(':');
        if (colon == std::string::npos) {
            continue;
        }
        auto key = trim(std::string_view(line).substr(0, colon));
        auto value = std::string(trim(std::string_view(line).substr(colon + 1)));
        if (key == "model name" && cpu.model.empty()) {
            cpu.model = value;
        } else if (key == "physical id") {
            physicalId = value;
        } else if (key == "core id") {
            cores.emplace(physicalId, value);
        } else if (key == "vendor_id" && vendor.empty()) {
            vendor = value;
        } else if (key == "cpu family" && family == 0) {
            family = cpuinfoNumber(value);
        } else if (key == "model" && model == 0) {
            model = cpuinfoNumber(value);
        } else if (key == "flags" && !flagsRead) {
            flags = value;
            flagsRead = true;
            cpu.bf16Units = bf16UnitsOf(value);
        }
    }
    cpu.amxNotExposed = amxModelWithoutAmx(vendor, family, model, flags);
    cpu_set_t set;
    CPU_ZERO(&set);
    cpu.logicalCpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    cpu.physicalCores = cores.empty() ? cpu.logicalCpus : static_cast<int>(cores.size());
    // A container may pin us to fewer CPUs than the host has cores.
    if (cpu.physicalCores > cpu.logicalCpus) {
        cpu.physicalCores = cpu.logicalCpus;
    }
    if (cpu.model.empty()) {
        cpu.model = "unknown CPU";
    }
    return cpu;
}

namespace {
const HostCpu& hostCpuOnce() {
    static const HostCpu cpu = readHostCpu();
    return cpu;
}
} // namespace

const std::string& hostCpuModel() { return hostCpuOnce().model; }

const std::string& hostBf16Units() { return hostCpuOnce().bf16Units; }

namespace {

std::optional<double> parseNumber(std::string_view text) {
    text = trim(text);
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
        return std::nullopt;
    }
    return v;
}

std::optional<double> quotaOf(std::optional<double> quota, std::optional<double> period) {
    if (!quota || !period || *quota <= 0 || *period <= 0) {
        return std::nullopt;
    }
    return *quota / *period;
}

std::string readLine(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    return line;
}

// The tightest quota in `dir` and the directories above it, up to `top` (a hierarchy's mount).
std::optional<double> tightestQuota(const std::filesystem::path& top, std::filesystem::path dir, bool v2) {
    std::optional<double> best;
    std::error_code ec;
    for (int depth = 0; depth < 64; ++depth) {
        if (std::filesystem::is_directory(dir, ec)) {
            const auto q =
                v2 ? quotaCoresFromCpuMax(readLine(dir / "cpu.max"))
                   : quotaCoresFromCfs(readLine(dir / "cpu.cfs_quota_us"), readLine(dir / "cpu.cfs_period_us"));
            if (q && (!best || *q < *best)) {
                best = q;
            }
        }
        if (dir == top || !dir.has_parent_path() || dir.parent_path() == dir) {
            break;
        }
        dir = dir.parent_path();
    }
    return best;
}

} // namespace

std::optional<double> quotaCoresFromCpuMax(std::string_view line) {
    const auto words = splitString(trim(line), ' ');
    if (words.size() != 2 || words[0] == "max") {
        return std::nullopt;
    }
    return quotaOf(parseNumber(words[0]), parseNumber(words[1]));
}

std::optional<double> quotaCoresFromCfs(std::string_view quotaUs, std::string_view periodUs) {
    return quotaOf(parseNumber(quotaUs), parseNumber(periodUs));
}

std::optional<double> cpuQuotaCores(const std::string& root) {
    namespace fs = std::filesystem;
    const fs::path base = fs::path(root) / "sys/fs/cgroup";
    std::ifstream in(fs::path(root) / "proc/self/cgroup");
    std::string line;
    std::optional<double> best;
    const auto keep = [&](std::optional<double> q) {
        if (q && (!best || *q < *best)) {
            best = q;
        }
    };
    // "0::/path" (v2) or "4:cpu,cpuacct:/path" (v1); the path is relative to the hierarchy's
    // mount (the namespace's root inside a container).
    while (std::getline(in, line)) {
        const auto first = line.find(':');
        const auto second = first == std::string::npos ? first : line.find(':', first + 1);
        if (second == std::string::npos) {
            continue;
        }
        const auto controllers = line.substr(first + 1, second - first - 1);
        const auto path = fs::path(line.substr(second + 1)).relative_path();
        if (controllers.empty()) {
            keep(tightestQuota(base, path.empty() ? base : base / path, true));
            continue;
        }
        const auto names = splitString(controllers, ',');
        if (std::find(names.begin(), names.end(), "cpu") == names.end()) {
            continue;
        }
        for (const auto* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
            keep(tightestQuota(base / mount, path.empty() ? base / mount : base / mount / path, false));
        }
    }
    return best;
}

double usableCores(int threads) {
    double cores = std::max(1, threads);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        cores = std::min<double>(cores, std::max(1, CPU_COUNT(&set)));
    }
    if (const auto quota = cpuQuotaCores()) {
        cores = std::min(cores, *quota);
    }
    return cores;
}

std::string mappedBlasLibrary() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        auto slash = line.find('/');
        if (slash == std::string::npos) {
            continue;
        }
        auto path = line.substr(slash);
        auto base = path.substr(path.rfind('/') + 1);
        if (base.starts_with("libblas.so") || base.starts_with("libopenblas") || base.starts_with("libblis") ||
            base.starts_with("libmkl_rt")) {
            return path;
        }
    }
    return {};
}

bool isReferenceBlasPath(const std::string& path) {
    // Debian's alternatives put netlib's reference BLAS at .../blas/libblas.so.3; OpenBLAS
    // and BLIS install theirs under .../openblas*/ or .../blis*/ with the same file name.
    return path.find("/blas/libblas.so") != std::string::npos;
}

} // namespace devicerace::detail
