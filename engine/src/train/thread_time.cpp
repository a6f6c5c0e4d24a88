// A thread's CPU time and context switches (train/thread_time.h).
#include "train/thread_time.h"

#include <algorithm>

#include <sys/resource.h>

namespace devicerace::detail {

ThreadTime ThreadTime::now() {
    ThreadTime t;
#if defined(__linux__)
    // One system call (0.44 µs here, against 1.27 µs with clock_gettime as well): Linux sums a
    // thread's user and system time from its exact runtime, to the microsecond.
    rusage usage{};
    if (getrusage(RUSAGE_THREAD, &usage) == 0) {
        const auto seconds = [](const timeval& v) { return static_cast<double>(v.tv_sec) + v.tv_usec * 1e-6; };
        t.cpuSeconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
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
