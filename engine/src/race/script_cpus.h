#pragma once
// The CPUs each local CPU script lane's processes may use (the script lane pins its command to
// them: a user's script cannot be told which threads to spread over which cores otherwise).
// Thread-safe.
#include <vector>

#include "devicerace/race_plan.h"

namespace devicerace::detail {

/// Per lane of `plan` (empty for every other lane): in a live race, blocks of `threads x workers`
/// CPUs that no other script lane of the race uses, in lane order, while this machine's allowed
/// CPUs last; in fair mode (one lane at a time) and beyond them, empty: the lane takes the first
/// CPUs it may use. `allowed` is this process's CPU affinity.
std::vector<std::vector<int>> scriptLaneCpus(const RacePlan& plan, const std::vector<int>& allowed);
/// The same with this process's affinity.
std::vector<std::vector<int>> scriptLaneCpus(const RacePlan& plan);

} // namespace devicerace::detail
