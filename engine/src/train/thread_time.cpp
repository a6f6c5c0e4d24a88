// A thread's CPU time and context switches (train/thread_time.h).
#include "train/thread_time.h"

#include <algorithm>

#include <sys/resource.h>
#include <time.h>

namespace devicerace::detail {

ThreadTime ThreadTime::now() {
    ThreadTime t;
#if defined(__linux__)
    timespec cpu{};
    rusage usage{};
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0 && getrusage(RUSAGE_THREAD, &usage) == 0) {
        t.cpuSeconds = static_cast<double>(cpu.tv_sec) + static_cast<double>(cpu.tv_nsec) * 1e-9;
        t.voluntarySwitches = usage.ru_nvcsw;
        t.involuntarySwitches = usage.ru_nivcsw;
        t.valid = true;
    }
#endif
    return t;
}

double preemptedSeconds(double wallSeconds, const ThreadTime& from, const ThreadTime& to) {
    if (!from.valid || !to.valid || to.voluntarySwitches != from.voluntarySwitches ||
        to.involuntarySwitches == from.involuntarySwitches) {
        return 0.0;
    }
    const double offCpu = wallSeconds - (to.cpuSeconds - from.cpuSeconds);
    return std::clamp(offCpu, 0.0, std::max(0.0, wallSeconds));
}

} // namespace devicerace::detail
