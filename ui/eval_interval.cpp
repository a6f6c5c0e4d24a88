#include "eval_interval.h"

#include <algorithm>
#include <limits>

#include "devicerace/race.h"

namespace devicerace::ui {

std::int64_t autoEvalInterval(const RaceSpec& spec, int evaluations) {
    // The race resolves batches, data and lengths exactly as it will when started (data sets
    // are cached, so this costs no second load); its lanes say how many steps they will take.
    RaceSpec probe = spec;
    probe.evalEverySteps = 0;
    const Race race(probe);
    std::int64_t fewest = std::numeric_limits<std::int64_t>::max();
    for (const auto* lane : race.lanes()) {
        fewest = std::min(fewest, lane->totalSteps());
    }
    if (fewest == std::numeric_limits<std::int64_t>::max() || fewest <= 0) {
        return 0;
    }
    // Never more often than every kMinInterval steps: a 30-step race spending most of its
    // time on ten test-set passes would be a slow demo of nothing.
    constexpr std::int64_t kMinInterval = 10;
    return std::max(kMinInterval, fewest / std::max(1, evaluations));
}

} // namespace devicerace::ui
