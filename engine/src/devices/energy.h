#pragma once
// A lane's energy counter: the CPU packages' RAPL counters through the kernel's
// powercap tree (/sys/class/powercap/intel-rapl:N/energy_uj, AMD's too), or an NVIDIA GPU's
// NVML total-energy counter. Never an estimate: where no counter can be read, the meter says
// why and reads nothing. One meter per lane, lane thread only.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace devicerace::detail {

class EnergyMeter {
public:
    /// The CPU packages' RAPL counters under `root` (default: $DEVICERACE_POWERCAP_ROOT, else
    /// /sys/class/powercap): every top-level zone "intel-rapl:N" whose name starts "package".
    static EnergyMeter cpu(const std::filesystem::path& root = {});
    /// GPU `index` through NVML.
    static EnergyMeter gpu(int index);

    bool measurable() const { return m_measurable; }
    /// "RAPL package-0 + package-1", "NVML", or "not measurable here: <why>".
    const std::string& source() const { return m_source; }
    /// Joules since the previous read (the first read starts the count and returns 0); counter
    /// wrap-arounds are undone with each zone's max_energy_range_uj. nullopt when not measurable
    /// or a read fails.
    std::optional<double> read();

private:
    struct Zone {
        std::filesystem::path energyFile;
        double rangeJoules = 0; // the counter wraps past this
        std::optional<double> last;
    };
    bool m_measurable = false;
    std::string m_source;
    std::vector<Zone> m_zones;
    int m_gpu = -1;
    std::optional<double> m_gpuLast;
};

} // namespace devicerace::detail
