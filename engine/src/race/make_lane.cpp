// Picks a lane's kind from its spec (an ssh:// device, isolate=) and builds it.
#include <fmt/format.h>

#include "devicerace/errors.h"
#include "devicerace/frameworks.h"
#include "devicerace/lane.h"
#include "cluster/slurm_lane.h"
#include "distributed/parallel_lane.h"
#include "lanes/thread_lane.h"
#include "workers/worker_lane.h"

namespace devicerace {

std::unique_ptr<Lane> makeLane(LaneSpec spec, LaneRunSettings settings) {
    if (laneKind(spec) == LaneKind::Thread) {
        return std::make_unique<ThreadLane>(std::move(spec), std::move(settings));
    }
    if (laneKind(spec) == LaneKind::Parallel) {
        return std::make_unique<ParallelLane>(std::move(spec), std::move(settings));
    }
    if (laneKind(spec) == LaneKind::Slurm) {
        return std::make_unique<SlurmLane>(std::move(spec), std::move(settings));
    }
    // A local framework= lane whose Python lacks the framework is refused with the race, before
    // any lane starts, naming the command that installs it (a remote host answers for itself).
    if (const auto problem = localFrameworkProblem(spec); !problem.empty()) {
        throw UsageError(fmt::format("lane {}: {}", spec.name.empty() ? spec.device : spec.name, problem));
    }
    return std::make_unique<WorkerLane>(std::move(spec), std::move(settings));
}

} // namespace devicerace
