// RAPL and NVML energy counters (devices/energy.h).
#include "devices/energy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "devices/nvml.h"
#include "devicerace/environment.h"

namespace devicerace::detail {

namespace fs = std::filesystem;

namespace {

std::optional<double> readNumber(const fs::path& file) {
    std::ifstream in(file);
    double v = 0;
    if (!(in >> v)) {
        return std::nullopt;
    }
    return v;
}

std::string readLine(const fs::path& file) {
    std::ifstream in(file);
    std::string s;
    std::getline(in, s);
    return s;
}

} // namespace

EnergyMeter EnergyMeter::cpu(const fs::path& rootIn) {
    EnergyMeter m;
    fs::path root = rootIn;
    if (root.empty()) {
        const char* env = devicerace::environmentSwitch("DEVICERACE_POWERCAP_ROOT");
        root = env && *env ? fs::path(env) : fs::path("/sys/class/powercap");
    }
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
        m.m_source = fmt::format("not measurable here: no powercap counters ({} is absent)", root.string());
        return m;
    }
    std::vector<std::pair<std::string, Zone>> zones;
    bool unreadable = false;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        const auto dir = entry.path().filename().string();
        // Top-level zones only ("intel-rapl:0"); "intel-rapl:0:1" are sub-zones (core, dram).
        if (dir.rfind("intel-rapl:", 0) != 0 || std::count(dir.begin(), dir.end(), ':') != 1) {
            continue;
        }
        const auto name = readLine(entry.path() / "name");
        if (name.rfind("package", 0) != 0) {
            continue;
        }
        Zone z;
        z.energyFile = entry.path() / "energy_uj";
        if (!readNumber(z.energyFile)) {
            unreadable = true; // root-only since Linux 5.10 on many distributions
            continue;
        }
        z.rangeJoules = readNumber(entry.path() / "max_energy_range_uj").value_or(0) / 1e6;
        zones.emplace_back(name, std::move(z));
    }
    if (zones.empty()) {
        m.m_source = unreadable ? fmt::format("not measurable here: the RAPL counters under {} are not readable "
                                              "by this user (root only)",
                                              root.string())
                                : fmt::format("not measurable here: no RAPL package counters under {}", root.string());
        return m;
    }
    std::sort(zones.begin(), zones.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::string names;
    for (auto& [name, z] : zones) {
        names += (names.empty() ? "" : " + ") + name;
        m.m_zones.push_back(std::move(z));
    }
    m.m_measurable = true;
    m.m_source = "RAPL " + names;
    return m;
}

EnergyMeter EnergyMeter::gpu(int index) {
    EnergyMeter m;
    m.m_gpu = index;
    if (!nvmlPresent()) {
        m.m_source = "not measurable here: NVML (libnvidia-ml.so.1) is not available";
    } else if (!nvmlEnergyJoules(index)) {
        m.m_source = fmt::format("not measurable here: GPU {} reports no total energy through NVML", index);
    } else {
        m.m_measurable = true;
        m.m_source = "NVML";
    }
    return m;
}

std::optional<double> EnergyMeter::read() {
    if (!m_measurable) {
        return std::nullopt;
    }
    if (m_gpu >= 0) {
        const auto now = nvmlEnergyJoules(m_gpu);
        if (!now) {
            return std::nullopt;
        }
        const double delta = m_gpuLast ? std::max(0.0, *now - *m_gpuLast) : 0.0;
        m_gpuLast = now;
        return delta;
    }
    double total = 0;
    for (auto& z : m_zones) {
        const auto uj = readNumber(z.energyFile);
        if (!uj) {
            return std::nullopt;
        }
        const double now = *uj / 1e6;
        if (z.last) {
            double delta = now - *z.last;
            if (delta < 0) { // the counter wrapped
                delta += z.rangeJoules;
            }
            total += std::max(0.0, delta);
        }
        z.last = now;
    }
    return total;
}

} // namespace devicerace::detail
