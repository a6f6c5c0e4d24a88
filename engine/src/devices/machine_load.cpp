// How busy the rest of the machine kept its CPUs (devices/machine_load.h).
#include "devices/machine_load.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

namespace devicerace::detail {

std::optional<CpuTicks> parseProcStat(std::string_view text) {
    CpuTicks out;
    bool aggregate = false;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const auto end = std::min(text.find('\n', pos), text.size());
        const auto line = text.substr(pos, end - pos);
        pos = end + 1;
        if (line.size() > 3 && line.substr(0, 3) == "cpu" && line[3] >= '0' && line[3] <= '9') {
            ++out.cpus;
            continue;
        }
        if (line.substr(0, 4) != "cpu ") {
            continue;
        }
        std::istringstream in{std::string(line.substr(4))};
        std::vector<std::uint64_t> v;
        std::uint64_t x = 0;
        while (v.size() < 10 && in >> x) {
            v.push_back(x);
        }
        if (v.size() < 8) {
            return std::nullopt;
        }
        // user nice system idle iowait irq softirq steal [guest guest_nice]
        out.busy = v[0] + v[1] + v[2] + v[5] + v[6];
        out.steal = v[7];
        out.total = out.busy + v[3] + v[4] + v[7];
        aggregate = true;
    }
    if (!aggregate) {
        return std::nullopt;
    }
    return out;
}

std::optional<MachineLoadReading> machineLoadBetween(const CpuTicks& from, const CpuTicks& to, double ownCpuSeconds,
                                                     double wallSeconds, double ticksPerSecond) {
    if (wallSeconds <= 0 || ticksPerSecond <= 0 || to.total <= from.total || to.busy < from.busy ||
        to.steal < from.steal) {
        return std::nullopt;
    }
    const double busySeconds = static_cast<double>(to.busy - from.busy) / ticksPerSecond;
    MachineLoadReading r;
    // The counters tick at 100 Hz per CPU and this process's own time is exact: a quiet machine
    // can read a little below 0.
    r.otherCpus = std::max(0.0, (busySeconds - ownCpuSeconds) / wallSeconds);
    r.stealShare = static_cast<double>(to.steal - from.steal) / static_cast<double>(to.total - from.total);
    return r;
}

namespace {

double ownCpuSeconds() {
    rusage u{};
    if (getrusage(RUSAGE_SELF, &u) != 0) {
        return 0;
    }
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
    return seconds(u.ru_utime) + seconds(u.ru_stime);
}

double wallNow() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

} // namespace

std::optional<CpuTicks> readProcStat(const std::filesystem::path& path) {
    std::ifstream in(path);
    if (!in) {
        return std::nullopt;
    }
    std::ostringstream text;
    text << in.rdbuf();
    return parseProcStat(text.str());
}

MachineLoad::MachineLoad(std::filesystem::path procStat) : m_path(std::move(procStat)) {
    if (const long hz = sysconf(_SC_CLK_TCK); hz > 0) {
        m_ticksPerSecond = static_cast<double>(hz);
    }
    const auto ticks = readProcStat(m_path);
    m_measurable = ticks.has_value();
    m_cpus = ticks ? ticks->cpus : 0;
}

std::optional<MachineLoadReading> MachineLoad::read() {
    if (!m_measurable) {
        return std::nullopt;
    }
    const double own = ownCpuSeconds();
    const double wall = wallNow();
    const auto ticks = readProcStat(m_path);
    std::optional<MachineLoadReading> out;
    if (ticks && m_last) {
        out = machineLoadBetween(*m_last, *ticks, own - m_lastOwn, wall - m_lastWall, m_ticksPerSecond);
    }
    m_last = ticks;
    m_lastOwn = own;
    m_lastWall = wall;
    return out;
}

} // namespace devicerace::detail
