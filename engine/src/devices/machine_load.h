#pragma once
// How busy the rest of the machine kept its CPUs while a lane trained: the kernel's CPU
// counters (/proc/stat) less this process's own CPU time (getrusage), and the time the
// hypervisor gave this virtual machine's vCPUs to others (steal). A fair race runs one lane at a
// time, so a lane that reads slow while another process kept a core busy, or while the host
// took the vCPUs' time, says so with the figure, not a guess (metrics/race_figures.cpp). One
// meter per lane, lane thread only; data-parallel lanes have none (the other ranks are processes
// of the same lane).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace devicerace::detail {

/// The machine's CPU time counters, in clock ticks, summed over its CPUs.
struct CpuTicks {
    std::uint64_t busy = 0;  // user + nice + system + irq + softirq (guest time is inside user)
    std::uint64_t steal = 0; // given by the hypervisor to other machines
    std::uint64_t total = 0; // every column but guest and guest_nice (counted in user and nice)
    int cpus = 0;            // the "cpuN" lines
};

/// Parses /proc/stat's text; nullopt when it has no aggregate "cpu " line of at least 8 numbers.
std::optional<CpuTicks> parseProcStat(std::string_view text);
/// Reads and parses `path` (/proc/stat); nullopt when it cannot be read or parsed.
std::optional<CpuTicks> readProcStat(const std::filesystem::path& path = "/proc/stat");

struct MachineLoadReading {
    double otherCpus = 0;  // CPUs kept busy by other processes, on average over the interval
    double stealShare = 0; // the share of the machine's CPU time the hypervisor gave elsewhere (0-1)
};

/// The reading between two counters, given this process's CPU seconds between them, the wall
/// seconds between them and the clock ticks per second. nullopt when the interval is empty.
std::optional<MachineLoadReading> machineLoadBetween(const CpuTicks& from, const CpuTicks& to, double ownCpuSeconds,
                                                     double wallSeconds, double ticksPerSecond);

class MachineLoad {
public:
    /// Reads `procStat` (default: /proc/stat).
    explicit MachineLoad(std::filesystem::path procStat = "/proc/stat");

    bool measurable() const { return m_measurable; }
    /// The machine's CPUs ("cpuN" lines; 0 when not measurable).
    int cpus() const { return m_cpus; }
    /// Since the previous read (the first read starts the count and returns nullopt); nullopt too
    /// when the counters cannot be read.
    std::optional<MachineLoadReading> read();

private:
    std::filesystem::path m_path;
    bool m_measurable = false;
    int m_cpus = 0;
    double m_ticksPerSecond = 100;
    std::optional<CpuTicks> m_last;
    double m_lastOwn = 0;
    double m_lastWall = 0;
};

} // namespace devicerace::detail
