#include "race/script_cpus.h"

#include <sched.h>

namespace devicerace::detail {

std::vector<std::vector<int>> scriptLaneCpus(const RacePlan& plan, const std::vector<int>& allowed) {
    std::vector<std::vector<int>> out(plan.lanes.size());
    if (plan.spec.fair) {
        return out;
    }
    std::size_t next = 0;
    for (std::size_t i = 0; i < plan.lanes.size(); ++i) {
        const auto& lane = plan.lanes[i];
        if (lane.spec.framework != "script" || lane.localCpuProcesses == 0 || lane.localThreads == 0) {
            continue;
        }
        const auto need =
            static_cast<std::size_t>(lane.localThreads) * static_cast<std::size_t>(lane.localCpuProcesses);
        if (next + need > allowed.size()) {
            break; // not enough CPUs for a block of its own: this and later lanes share
        }
        out[i].assign(allowed.begin() + static_cast<std::ptrdiff_t>(next),
                      allowed.begin() + static_cast<std::ptrdiff_t>(next + need));
        next += need;
    }
    return out;
}

std::vector<std::vector<int>> scriptLaneCpus(const RacePlan& plan) {
    std::vector<int> allowed;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &set)) {
                allowed.push_back(c);
            }
        }
    }
    return scriptLaneCpus(plan, allowed);
}

} // namespace devicerace::detail
